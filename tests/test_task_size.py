"""Task size from measured work: cheap samples in long tasks, cheap batches several per task, expensive ones one per task; output and resume unchanged."""

from __future__ import annotations

import time

import numpy as np
import pytest

import feedline as fl
from feedline.engine._state import MAX_CHUNK, MAX_TASK_BYTES, TASKS_PER_WORKER, measured_chunk


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


# ------------------------------------------------------------ several batches per task
def small_image(v):
    """~10 us of work: a 3x4x4 image and its label (a batch of 16 takes well under a millisecond)."""
    return np.full((3, 4, 4), int(v) % 251, np.uint8), int(v)


def int_then_float(v):
    return int(v) if v < 3000 else float(v)


def _same_batches(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for k, (a, b) in enumerate(zip(got, expected)):
        for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
            assert x.dtype == y.dtype, f"batch {k}: dtype {x.dtype} where one batch per task gives {y.dtype}"
            np.testing.assert_array_equal(x, y, err_msg=f"batch {k}")


def _images(n, backend, drop=False, **kw):
    return fl.from_arrays(np.arange(n)).shuffle(seed=4).map(small_image, backend=backend, **kw).batch(16, drop_remainder=drop)


def test_measured_chunk_for_batches_is_whole_batches_within_the_memory_bound():
    assert measured_chunk(0.5, 50_000, 50_000, 2, batch=256, batch_bytes=786_432) == 3 * 256  # 2.6 ms a batch
    assert measured_chunk(0.01, 50_000, 10**6, 2, batch=256, batch_bytes=3 << 20) == 256  # 3 MiB a batch: one a task
    assert measured_chunk(2.0, 1_000, 1_000, 2, batch=32) == 32  # 64 ms a batch: one a task
    chunk = measured_chunk(0.01, 10**6, 10**8, 2, batch=10, batch_bytes=80)
    assert chunk % 10 == 0 and chunk <= MAX_CHUNK and chunk // 10 * 80 <= MAX_TASK_BYTES


@pytest.mark.parametrize("drop", [False, True])
def test_cheap_batches_go_several_per_task_from_the_second_epoch_and_each_is_unchanged(no_leaks, drop):
    n = 6_007  # 375 whole batches of 16 and 7 rows left over
    expected = [list(_images(n, "serial", drop).epoch(k)) for k in (0, 1)]
    with _images(n, "process", drop, workers=2) as pipe:
        first = list(pipe.epoch(0))
        tasks0, batches0 = pipe.stats().tasks, pipe.stats().batches
        second = list(pipe.epoch(1))
        tasks1, batches1 = pipe.stats().tasks, pipe.stats().batches
    _same_batches(first, expected[0])
    _same_batches(second, expected[1])
    assert batches0 == batches1 == (375 if drop else 376)
    assert tasks0 == batches0, "the first epoch has nothing measured: a batch per task"
    assert tasks1 < batches1 / 2, f"{tasks1} tasks for {batches1} batches of ~0.2 ms each: messages should carry several"


def test_a_batch_keeps_its_own_dtype_when_its_task_holds_several():
    def pipeline(backend, **kw):  # labels are ints before sample 3000, floats after; batch 187 holds both
        return fl.from_arrays(np.arange(6_000)).map(int_then_float, backend=backend, **kw).batch(16)

    expected = [list(pipeline("serial").epoch(k)) for k in (0, 1)]
    with pipeline("process", workers=2) as pipe:
        got = [list(pipe.epoch(k)) for k in (0, 1)]
        assert pipe.stats().tasks < pipe.stats().batches / 2
    for a, b in zip(got, expected):
        _same_batches(a, b)
    assert got[1][0].dtype == np.int64 and got[1][-1].dtype == np.float64


def test_a_checkpoint_inside_a_task_of_several_batches_resumes_exactly(no_leaks):
    n = 6_007
    with _images(n, "process", workers=2) as pipe:
        list(pipe.epoch(0))  # measures the work
        it = pipe.epoch(1)
        head = [next(it) for _ in range(7)]
        state = it.state()
        it.close()
    assert state["chunk"] > 16 and state["chunk"] % 16 == 0, state
    assert state["offset"] == 7 * 16 % state["chunk"] and state["offset"] > 0, f"not inside a task: {state}"
    with _images(n, "thread", workers=3) as fresh:  # another backend, no grid measured: the state's grid is used
        tail = list(fresh.resume(state))
    _same_batches(head + tail, list(_images(n, "serial").epoch(1)))
    with _images(n, "process", workers=2).prefetch(3) as fresh:  # a depth of the user's: no grouping of its own
        tail = list(fresh.resume(state))
    _same_batches(head + tail, list(_images(n, "serial").epoch(1)))


def test_a_failing_sample_inside_a_task_of_several_batches_comes_after_the_batches_before_it(tmp_path, no_leaks):
    flag = tmp_path / "fail"

    def fails_once_flagged(v):
        if int(v) == 1000 and flag.exists():
            raise ValueError("bad sample")
        return small_image(v)

    pipe = fl.from_arrays(np.arange(6_000)).map(fails_once_flagged, backend="process", workers=2).batch(16)
    with pipe:
        list(pipe.epoch(0))  # measures the work; nothing fails yet
        flag.touch()
        delivered = []
        with pytest.raises(fl.SampleError, match="sample 1000") as info:
            for batch in pipe.epoch(1):
                delivered.append(batch)
        assert pipe.stats().tasks < 62, "the failing sample should sit inside a task of several batches"
    assert len(delivered) == 1000 // 16, "every whole batch before the failing one is delivered first, as with a batch per task"
    assert isinstance(info.value.__cause__, ValueError)
    np.testing.assert_array_equal(delivered[-1][1], np.arange(976, 992))


def test_store_reads_in_bulk_go_several_batches_per_gather_within_the_cache_and_are_unchanged(tmp_path, no_leaks):
    from feedline.engine._state import cache_share
    from feedline.store import StoreWriter

    if cache_share(2) <= 0:
        pytest.skip("this system does not say how large its CPU caches are (Linux /sys): no grouping of bulk reads")
    x = np.random.default_rng(0).integers(0, 255, (6_000, 3, 8, 8), dtype=np.uint8)
    with StoreWriter(tmp_path / "s") as w:
        w.write({"x": x, "i": np.arange(len(x))})

    def pipeline():
        return fl.from_store(tmp_path / "s").shuffle(seed=3).batch(16)

    with pipeline() as pipe:
        epochs = [list(pipe.epoch(k)) for k in range(3)]
        tasks, batches = pipe.stats().tasks, pipe.stats().batches
        it = pipe.epoch(3)
        head = [next(it) for _ in range(5)]
        state = it.state()
        it.close()
    assert tasks <= -(-batches // 2), f"{tasks} gathers for {batches} batches of 1 KiB rows: one each"  # two a gather at least (an odd count: one gather of one)
    assert state.get("chunk", 16) > 16 and state["offset"] > 0, state
    for k, got in enumerate(epochs):
        for batch in got:
            np.testing.assert_array_equal(batch["x"], x[batch["i"]])
        assert sorted(np.concatenate([b["i"] for b in got]).tolist()) == list(range(len(x))), f"epoch {k}"
        assert [b["i"].tolist() for b in got] == [b["i"].tolist() for b in pipeline().epoch(k)], f"epoch {k}"
    with pipeline() as fresh:
        tail = list(fresh.resume(state))
    assert [b["i"].tolist() for b in head + tail] == [b["i"].tolist() for b in pipeline().epoch(3)]
