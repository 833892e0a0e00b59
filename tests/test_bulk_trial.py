"""Pipelines without per-sample Python: the calling thread and a thread pool are both tried, the output never changes."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline import testing


def normalise(batch):
    f = batch.astype(np.float32) / 255.0
    return f[:, ::-1] - f.mean(axis=(1, 2), keepdims=True)


@pytest.fixture
def images():
    return np.random.default_rng(0).integers(0, 255, (3000, 16, 16, 3), dtype=np.uint8)


def _cores(pipe) -> int:
    """Cores this process may use: the trial runs only with two or more."""
    return testing.usable_cores()


def _epochs_until_decided(pipe, reference, most=8):
    """Run epochs (each checked against ``reference``'s) until the trial has decided; return the last stats."""
    for epoch in range(most):
        got = [b.copy() for b in pipe.epoch(epoch)]
        want = list(reference.epoch(epoch))
        assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want)), f"epoch {epoch} differs"
        stats = pipe.stats()
        if stats.trial:
            return stats
    pytest.fail(f"the trial did not decide in {most} epochs: {stats.decision}")


def _trial_then_winner(pipe, reference):
    """Run ``pipe`` until its trial decided and one epoch more on the winner, each checked against ``reference``."""
    with pipe, reference:
        if _cores(pipe) < 2:
            pytest.skip("one core: bulk reads stay in the calling thread")
        stats = _epochs_until_decided(pipe, reference)
        again = [b.copy() for b in pipe.epoch(20)]  # on the winner
        assert all(np.array_equal(a, b) for a, b in zip(again, reference.epoch(20)))
    return stats


def test_bulk_pipeline_tries_both_and_delivers_the_serial_batches(images, no_leaks):
    pipe = fl.from_arrays(images).shuffle(seed=4).batch(16).map_batch(normalise)
    reference = fl.from_arrays(images).shuffle(seed=4).map(lambda s: s, backend="serial").batch(16).map_batch(normalise)
    stats = _trial_then_winner(pipe, reference)
    assert set(stats.trial) == {"serial", "thread"}, stats.decision
    assert "tried the calling thread" in stats.decision
    assert stats.backend == ("thread" if stats.trial["thread"] >= stats.trial["serial"] else "serial"), stats.decision


def test_losing_threads_are_stopped_and_the_winner_keeps_the_work(images, no_leaks):
    pipe = fl.from_arrays(images).batch(16).map_batch(normalise)
    reference = fl.from_arrays(images).map(lambda s: s, backend="serial").batch(16).map_batch(normalise)
    with pipe, reference:
        if _cores(pipe) < 2:
            pytest.skip("one core: bulk reads stay in the calling thread")
        stats = _epochs_until_decided(pipe, reference)
        executor = testing.runtime(pipe).executor
        assert stats.backend in ("serial", "thread") and executor.winner == stats.backend
        if stats.backend == "serial":
            assert not any(t.is_alive() for t in executor.threads.threads), "the losing threads still run"


def test_a_short_bulk_epoch_is_exact_whatever_the_trial_reached(images, no_leaks):
    for batches in (1, 3, 7):
        pipe = fl.from_arrays(images[: 8 * batches]).batch(8)
        with pipe:
            out = list(pipe)
        assert [b.tolist() for b in out] == [images[k:k + 8].tolist() for k in range(0, 8 * batches, 8)]


def test_shuffled_store_reads_without_a_batch_function_try_threads_too(tmp_path, images, no_leaks):
    pytest.importorskip("pyarrow")
    from feedline.store import StoreWriter

    path = tmp_path / "images.store"
    with StoreWriter(path, rows_per_file=700) as w:  # 5 files: batches gather across files
        w.write(images)
    pipe = fl.from_store(path).shuffle(seed=4).batch(16)
    reference = fl.from_arrays(images).shuffle(seed=4).map(lambda s: s, backend="serial").batch(16)
    stats = _trial_then_winner(pipe, reference)
    assert set(stats.trial) == {"serial", "thread"}, stats.decision
    assert "bulk reads from a store" in stats.decision and "tried the calling thread" in stats.decision


def test_in_memory_bulk_reads_without_a_batch_function_stay_in_the_calling_thread(images, no_leaks):
    pipe = fl.from_arrays(images).shuffle(seed=4).batch(16)
    reference = fl.from_arrays(images).shuffle(seed=4).map(lambda s: s, backend="serial").batch(16)
    with pipe, reference:
        got = [b.copy() for b in pipe]
        stats = pipe.stats()
        assert all(np.array_equal(a, b) for a, b in zip(got, reference.epoch(0)))
    assert stats.backend == "serial" and not stats.trial, stats.decision
