"""The epoch's last batches run as pieces on several workers: the same batches, errors and resume points as whole tasks."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import feedline as fl
from feedline import testing
from feedline.engine import _tail
from feedline.worker import Result, TaskError


@pytest.fixture
def short_pieces():
    """Pieces of a millisecond pay: every test batch below is long enough to be cut (the rule is tested on its own)."""
    with testing.mechanism_policy(tail_piece_seconds=0.001):
        yield


def record(i, rng):
    time.sleep(0.003)  # long enough to be cut, and the GIL released: threads run side by side
    return {"x": np.full((2, 3), i, np.int16) + rng.integers(0, 5, (2, 3)).astype(np.int16),
            "name": f"sample-{i}", "label": i % 3, "weight": i / 7}


def _pipe(n, backend, fn=record, batch=8, **batch_kw):
    workers = None if backend in (None, "serial") else 4
    return fl.from_sequence(list(range(n))).shuffle(seed=3).map(fn, backend=backend, workers=workers).batch(batch, **batch_kw)


def _run(pipe):
    with pipe:
        out = list(pipe)
        return out, pipe.stats()


def _assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a["x"].dtype == b["x"].dtype and np.array_equal(a["x"], b["x"])
        assert a["name"] == b["name"]
        for key in ("label", "weight"):
            assert a[key].dtype == b[key].dtype and np.array_equal(a[key], b[key])


@pytest.mark.parametrize("backend", ["thread", "process", None])
def test_last_batches_run_as_pieces_and_come_out_as_one_task_would_make_them(backend, short_pieces, no_leaks):
    want, _ = _run(_pipe(101, "serial"))  # 12 whole batches and a short one
    got, stats = _run(_pipe(101, backend))
    _assert_same(got, want)
    assert stats.batches == 13 and stats.samples == 101
    assert stats.tasks > stats.batches, "the epoch's last batches should have run as pieces"
    pieces = [span for span in stats.task_spans if span[4] < 8 and 8 < span[3] < 12]
    assert pieces, "a whole batch of the tail should have been cut"


def _first_task_rows(stats, number=0) -> list:
    """Rows of each task (or piece) of task ``number`` that ran this epoch, in the order they started."""
    return [span[4] for span in sorted(stats.task_spans, key=lambda span: span[1]) if span[3] == number]


@pytest.mark.parametrize("workers", [2, 8])
def test_the_first_batch_runs_as_a_piece_on_each_idle_thread_and_comes_out_whole(workers, no_leaks):
    want, _ = _run(_pipe(101, "serial"))
    pipe = fl.from_sequence(list(range(101))).shuffle(seed=3).map(record, backend="thread", workers=workers).batch(8)
    with pipe:
        got = list(pipe)
        first = _first_task_rows(pipe.stats())
        later = (list(pipe), _first_task_rows(pipe.stats()))
    _assert_same(got, want)
    assert len(first) > 1 and sum(first) == 8 and max(first) < 8, f"the first batch should run as pieces: {first}"
    assert later[1] == [8], "a later epoch knows the batches' time: its first runs whole (only the tail is cut)"


def test_one_thread_process_workers_or_the_automatic_choice_run_the_first_batch_whole(no_leaks):
    # the automatic choice's trial judges the threads by their first tasks: they run whole
    for backend, workers in (("thread", 1), ("process", 4), (None, 4)):
        with fl.from_sequence(list(range(101))).map(record, backend=backend, workers=workers).batch(8) as pipe:
            next(iter(pipe))
            # process workers may still be starting: a piece waiting for one would hold the first batch back
            assert _first_task_rows(pipe.stats()) == [8], (backend, workers)


def test_a_resumed_epoch_cuts_its_first_batch_and_delivers_the_rest_unchanged(no_leaks):
    want, _ = _run(_pipe(101, "serial"))
    with _pipe(101, "thread") as pipe:
        it = iter(pipe)
        [next(it) for _ in range(3)]
        state = it.state()
        it.close()
    with _pipe(101, "thread") as resumed:
        rest = list(resumed.resume(state))
        first = _first_task_rows(resumed.stats(), number=3)
    _assert_same(rest, want[3:])
    assert len(first) > 1 and sum(first) == 8, f"the resumed epoch's first batch should run as pieces: {first}"


def test_drop_remainder_keeps_every_whole_batch_and_drops_the_rest(short_pieces, no_leaks):
    want, _ = _run(_pipe(101, "serial", drop_remainder=True))
    got, stats = _run(_pipe(101, "thread", drop_remainder=True))
    _assert_same(got, want)
    assert len(got) == 12 and stats.tasks > stats.batches


def test_a_failing_sample_in_a_piece_raises_after_the_batches_before_it(short_pieces, no_leaks):
    with fl.from_sequence(list(range(101))).shuffle(seed=3) as order:
        bad = [int(i) for i in order][94]  # in batch 11 of 13: a piece of the tail

    def fails_on_bad(i, rng):
        if i == bad:
            raise ValueError(f"sample {i} is corrupt")
        return record(i, rng)

    delivered = []
    with _pipe(101, "process", fn=fails_on_bad) as pipe:
        with pytest.raises(fl.SampleError) as caught:
            for batch in pipe:
                delivered.append(batch)
        stats = pipe.stats()
    assert caught.value.index == bad and "corrupt" in str(caught.value)
    assert len(delivered) == 11  # every batch before the one holding it, none after
    assert stats.tasks > stats.batches, "the failing batch should have run as pieces"


def test_a_checkpoint_inside_the_tail_resumes_with_the_same_batches(short_pieces, no_leaks):
    want, _ = _run(_pipe(101, "serial"))
    with _pipe(101, "thread") as pipe:
        it = iter(pipe)
        first = [next(it) for _ in range(11)]  # past batches that ran as pieces
        state = it.state()
        assert it.stats().tasks > it.stats().batches
        rest = list(pipe.resume(state))
    _assert_same(first + rest, want)


@pytest.mark.parametrize("kind", ["map_batch", "collate"])
def test_batches_a_step_sees_whole_are_never_cut(kind, short_pieces, no_leaks):
    pipe = fl.from_sequence(list(range(64))).map(record, backend="thread", workers=4)
    if kind == "map_batch":
        pipe = pipe.batch(8).map_batch(lambda b: {**b, "mean": np.full(len(b["label"]), b["x"].mean())})
    else:
        pipe = pipe.batch(8, collate=lambda rows: {"x": np.stack([r["x"] for r in rows]), "n": len(rows)})
    out, stats = _run(pipe)
    assert stats.tasks == stats.batches == 8
    if kind == "collate":
        assert all(b["n"] == 8 for b in out)


def test_pieces_only_where_they_pay():
    pieces = _tail.TailPieces.__new__(_tail.TailPieces)  # the rule alone (the tests above build it from real plans)
    pieces.enabled, pieces.size, pieces._waiting = True, 32, {}
    # the last `workers` tasks of 12, 0.15 s each: two pieces on two workers, up to MAX_PIECES on many
    assert pieces.pieces(10, 12, 2, 32, 0.15, 1 << 20) == 2
    assert pieces.pieces(9, 12, 2, 32, 0.15, 1 << 20) == 1  # not yet the tail
    assert pieces.pieces(11, 12, 16, 32, 1.0, 1 << 20) == _tail.MAX_PIECES
    assert pieces.pieces(11, 12, 2, 32, 0.015, 1 << 20) == 1  # half a batch would be under PIECE_SECONDS
    assert pieces.pieces(11, 12, 2, 32, 0.15, 1 << 30) == 1  # copying a 1 GiB batch costs more than it saves
    assert pieces.pieces(7, 8, 2, 64, 0.1, 64 * 3 * 224 * 224 * 4) == 1  # the suite's jpeg: joining 38 MB cost 12 %
    assert pieces.pieces(11, 12, 2, 32, None, 1 << 20) == 1  # nothing measured yet
    assert pieces.pieces(11, 12, 1, 32, 0.15, 1 << 20) == 1  # one worker
    # the first batch, nothing measured: a piece per idle worker, up to MAX_PIECES, a row each at least
    assert pieces.first_pieces(32, 2) == 2 and pieces.first_pieces(32, 64) == _tail.MAX_PIECES
    assert pieces.first_pieces(3, 8) == 3 and pieces.first_pieces(32, 1) == 1 and pieces.first_pieces(32, 0) == 1
    pieces.enabled = False
    assert pieces.first_pieces(32, 8) == 1  # a batch that joining would change


def test_piece_indices_cut_in_order_as_even_as_can_be():
    cut = _tail.piece_indices(np.arange(10), 4)
    assert [list(c) for c in cut] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]


def test_join_takes_the_first_failed_piece_and_sums_the_times():
    ok = Result(payload={"x": np.zeros((2, 1))}, rows=2, times={"read": 0.5}, span=(1.0, 2.0))
    first, second = (TaskError.from_exception(ValueError(m), index, stage="map") for m, index in (("first", 2), ("second", 4)))
    bad = Result(error=first, times={"read": 0.25}, span=(0.5, 3.0))
    worse = Result(error=second, span=(1.0, 1.5))
    joined = _tail.join([ok, bad, worse], [[0, 1], [2, 3], [4, 5]])
    assert joined.error is first and joined.rows == 0 and joined.payload is None
    assert joined.times == {"read": 0.75} and joined.span == (0.5, 3.0)
    collated = TaskError.from_exception(ValueError("shapes"), 4, stage="batch")
    with pytest.raises(_tail.PiecesDiffer):  # which sample one task's collation names depends on every row
        _tail.join([ok, bad, Result(error=collated, span=(1.0, 1.5))], [[0, 1], [2, 3], [4, 5]])


def _stacks_but_one(i):
    time.sleep(0.003)
    return np.zeros(4 if i == 5 else 3)  # sample 5 does not stack with the others


@pytest.mark.parametrize("workers", [2, 8])
def test_rows_that_do_not_stack_fail_naming_the_sample_one_task_names(workers, no_leaks):
    def first_error(backend, workers):
        with fl.from_sequence(list(range(32))).map(_stacks_but_one, backend=backend, workers=workers).batch(8) as pipe:
            with pytest.raises(fl.SampleError) as caught:
                list(pipe)
            return caught.value, _first_task_rows(pipe.stats())
    want, _ = first_error("serial", None)
    got, first = first_error("thread", workers)
    assert (got.index, got.stage) == (want.index, want.stage) == (5, "batch"), (got, want)
    assert "(4,)" in str(got) and "(3,)" in str(got)
    assert len(first) > 1 and first[-1] == 8, f"its pieces ran, then the batch again whole: {first}"


_release = threading.Event()


def held_until_released(v):
    if v < 16:  # the long batch's samples wait for the test
        _release.wait(10)
    return v


def test_a_piece_waits_for_a_thread_with_nothing_to_run_rather_than_queue_behind_a_batch():
    from feedline.backends._thread import ThreadExecutor
    from feedline.worker import Task

    part = fl.from_arrays(np.arange(64)).map(held_until_released, backend="thread").batch(8).plan.part
    executor = ThreadExecutor(part, workers=2)
    _release.clear()
    try:
        executor.submit((0, 0), Task(0, 0, indices=np.arange(16)))  # held until released
        executor.submit((0, 1), Task(0, 1, indices=np.arange(16, 20)))  # back at once: its thread comes free
        executor.submit((0, 0, 0), Task(0, 0, indices=np.arange(20, 22), piece=True))
        assert executor.load == [1, 1] and executor.outstanding() == 3, "no thread is free yet: the piece waits"
        done, deadline = {}, time.monotonic() + 10
        while (0, 0, 0) not in done and time.monotonic() < deadline:
            done.update((e.key, e.result.worker) for e in executor.wait(0.1))
        assert (0, 0, 0) in done, "the piece should run on the free thread while the long batch is held"
        assert (0, 0) not in done and done[(0, 0, 0)] == done[(0, 1)], "on the thread that came free"
    finally:
        _release.set()
        while executor.outstanding():
            executor.wait(1.0)
        executor.close()


@pytest.mark.parametrize("backend, workers", [("thread", 32), ("process", 16)])
def test_many_more_workers_than_cores_cut_the_tail_and_deliver_every_batch_once_each_epoch(backend, workers, short_pieces, no_leaks):
    want, _ = _run(_pipe(203, "serial", batch=4))  # 50 whole batches and a short one: the last `workers` are cut
    pipe = fl.from_sequence(list(range(203))).shuffle(seed=3).map(record, backend=backend, workers=workers).batch(4)
    with pipe:
        epochs = [(list(pipe.epoch(0)), pipe.stats()), (list(pipe.epoch(0)), pipe.stats())]
    for got, stats in epochs:
        _assert_same(got, want)
        assert stats.samples == 203
    # 32 threads take all 51 tasks before any is back: only the next epoch knows which batches are worth cutting
    assert epochs[1][1].tasks > epochs[1][1].batches, "the last batches of a later epoch should run as pieces"


def _shapes():
    """Pipelines whose batches may or may not be cut: the tail and the automatic choice's give-back must agree on each."""
    base = fl.from_sequence(list(range(64))).map(record)
    return {
        "plain": (base.batch(8), True),
        "map_batch": (base.batch(8).map_batch(lambda b: b), False),
        "collate": (base.batch(8, collate=lambda rows: rows), False),
        "filter": (base.filter(lambda s: s["label"] != 1).batch(8), False),
        "padded": (fl.from_sequence([np.arange(i % 5 + 1) for i in range(64)]).padded_batch(8), False),
        "unbatched": (base, False),
    }


@pytest.mark.parametrize("shape", list(_shapes()))
def test_the_tail_and_a_thread_task_given_back_cut_the_same_batches(shape):
    from feedline.worker import Task, splittable

    pipe, cut = _shapes()[shape]
    plan = pipe.plan
    task = Task(epoch=0, number=0, indices=np.arange(plan.part.batch_size or 1))
    assert _tail.TailPieces(plan, "thread").enabled is cut
    assert splittable(plan.part, task) is cut
