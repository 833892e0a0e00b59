"""Unbatched task size from measured work: cheap samples in long tasks, expensive ones one per task; output and resume unchanged."""

from __future__ import annotations

import time

import numpy as np

import feedline as fl
from feedline.engine._state import MAX_CHUNK, TASKS_PER_WORKER, measured_chunk


def add_one(v):
    return v + 1


def slow_square(v):
    time.sleep(0.02)
    return v * v


def _epoch_with_state(pipe, epoch):
    it = pipe.epoch(epoch)
    first = next(it)
    chunk = it.state()["chunk"]
    return [first, *it], chunk


def test_measured_chunk_follows_the_work_per_sample_within_its_bounds():
    assert measured_chunk(0.0, 0, 1000, 2) is None  # nothing measured: the default grid
    assert measured_chunk(1.0, 1_000_000, 10**9, 2) == MAX_CHUNK  # 1 us a sample
    assert measured_chunk(0.2, 10, 10**6, 2) == 1  # 20 ms a sample: one per task
    assert measured_chunk(1.0, 1_000_000, 1000, 4) == 1000 // (TASKS_PER_WORKER * 4)  # short epoch: work for every worker


def test_cheap_unbatched_samples_get_longer_tasks_from_the_second_epoch_with_the_same_output(no_leaks):
    n = 40_000
    pipe = fl.from_arrays(np.arange(n)).map(add_one, backend="process", workers=2)
    with pipe:
        first, chunk0 = _epoch_with_state(pipe, 0)
        second, chunk1 = _epoch_with_state(pipe, 1)
    assert [int(v) for v in first] == [int(v) for v in second] == list(range(1, n + 1))
    assert chunk0 == 64  # the first epoch: nothing measured yet
    assert chunk1 > chunk0, "cheap samples should be cut into longer tasks once their cost is known"


def test_threads_keep_the_first_epochs_grid(no_leaks):
    pipe = fl.from_arrays(np.arange(40_000)).map(add_one, backend="thread", workers=2)
    with pipe:
        _, chunk0 = _epoch_with_state(pipe, 0)
        _, chunk1 = _epoch_with_state(pipe, 1)
    assert chunk0 == chunk1 == 64


def test_expensive_unbatched_samples_go_one_per_task(no_leaks):
    pipe = fl.from_arrays(np.arange(40)).map(slow_square, backend="process", workers=4)
    with pipe:
        _, _ = _epoch_with_state(pipe, 0)
        out, chunk1 = _epoch_with_state(pipe, 1)
    assert chunk1 == 1
    assert [int(v) for v in out] == [v * v for v in range(40)]


def test_a_checkpoint_taken_on_a_measured_grid_resumes_exactly(no_leaks):
    n = 20_000
    pipe = fl.from_arrays(np.arange(n)).shuffle(seed=3).map(add_one, backend="process", workers=2)
    with pipe:
        list(pipe.epoch(0))  # measures the work
        it = pipe.epoch(1)
        head = [int(next(it)) for _ in range(12_345)]
        state = it.state()
        assert state["chunk"] != 64
        it.close()
    expected = [int(v) for v in fl.from_arrays(np.arange(n)).shuffle(seed=3).map(add_one, backend="serial").epoch(1)]
    fresh = fl.from_arrays(np.arange(n)).shuffle(seed=3).map(add_one, backend="thread", workers=3)
    with fresh:
        tail = [int(v) for v in fresh.resume(state)]
    assert head + tail == expected
