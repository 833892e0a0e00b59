"""A Dataset that draws from the global generators (torch, random, NumPy's legacy np.random) gets new values per sample.

Process workers reseed those generators before each batch from
``(seed, epoch, first sample)``; threads and the calling thread run in the
user's process and leave its generators alone.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import feedline as fl

SAMPLES = 256


class GlobalDraws:
    """A map-style dataset whose items are draws from the three global generators, as augmentations make them."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> np.ndarray:
        return np.array([torch.rand(()).item(), random.random(), np.random.rand()])


def identity(x):
    return x


def two_epochs(workers: int, backend: str = "process", seed: int | None = None) -> list[np.ndarray]:
    pipe = fl.from_sequence(GlobalDraws())
    if seed is not None:
        pipe = pipe.shuffle(seed=seed)
    pipe = pipe.map(identity, backend=backend, workers=workers).batch(8)
    with pipe:
        return [np.concatenate(list(pipe)) for _ in range(2)]


def assert_all_distinct(epochs: list[np.ndarray]) -> None:
    for column, name in enumerate(["torch.rand", "random.random", "np.random.rand"]):
        values = np.concatenate([epoch[:, column] for epoch in epochs])
        assert len(values) == 2 * SAMPLES
        assert len(set(values.tolist())) == len(values), f"{name} repeated a value across workers or epochs"


@pytest.mark.parametrize("workers", [2, 8])
def test_global_generators_never_repeat_across_process_workers_or_epochs(workers, no_leaks):
    assert_all_distinct(two_epochs(workers))


def test_global_generators_repeat_exactly_for_the_same_seed_and_worker_count(no_leaks):
    first, second = two_epochs(2, seed=3), two_epochs(2, seed=3)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    other = two_epochs(2, seed=4)
    assert not np.array_equal(np.sort(first[0], axis=0), np.sort(other[0], axis=0))


def test_global_generators_never_repeat_in_fresh_interpreter_workers(monkeypatch, no_leaks):
    monkeypatch.setenv("FEEDLINE_FORKSERVER", "0")  # each worker a new interpreter (the path Windows takes)
    assert_all_distinct(two_epochs(2))


def test_threads_draw_from_the_users_own_generators_unseeded(no_leaks):
    np.random.seed(11)
    expected = {float(v) for v in np.random.rand(SAMPLES)}
    np.random.seed(11)
    draws = fl.from_sequence(GlobalDraws()).map(identity, backend="thread", workers=2).batch(8)
    with draws:
        values = np.concatenate(list(draws))[:, 2]
    assert set(values.tolist()) == expected  # the user's seeded stream, in some order: feedline did not reseed it
