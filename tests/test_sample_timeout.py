"""map(timeout=...): a sample stuck in I/O is stopped, reported through on_error, its worker replaced.

Real processes and a real stuck sample: the map sleeps 30 s on one file,
the limit is 1 s, so the worker must be killed and replaced for the test to
end (well) before the sleep would. Nothing here measures time: the checks
are on what is delivered, what is reported, and what is left behind
(`no_leaks`). The samples that must not time out do trivial work, far
under the limit.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import feedline as fl
from feedline import SampleError

N = 40
BATCH = 4
SEED = 3
STUCK = 13  # the file whose read never finishes (in time)
# on_error="skip" warns once per epoch; test_stuck_sample_is_skipped... checks that warning.
pytestmark = pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")


def load(path: str):
    """Read a sample file; the STUCK one hangs as a dead network mount would."""
    if path.endswith(f"{STUCK:03d}.txt"):
        time.sleep(30)
    with open(path) as f:
        return np.int64(int(f.read()))


def load_or_fail(path: str):
    """The reference: the STUCK file fails at once (what a timeout must look like to on_error)."""
    if path.endswith(f"{STUCK:03d}.txt"):
        raise TimeoutError("stand-in for the stuck sample")
    return load(path)


@pytest.fixture
def files(tmp_path):
    paths = []
    for i in range(N):
        path = tmp_path / f"{i:03d}.txt"
        path.write_text(str(i))
        paths.append(str(path))
    return paths


def pipeline(files, fn=load, *, workers=2, on_error="skip", timeout=1, backend="process"):
    return fl.from_files(files).shuffle(seed=SEED).map(
        fn, backend=backend, workers=workers, on_error=on_error, timeout=timeout
    ).batch(BATCH)


def reference_batches(files, on_error="skip"):
    """What a serial run gives when the stuck sample fails at once instead of hanging."""
    pipe = fl.from_files(files).shuffle(seed=SEED).map(load_or_fail, backend="serial", on_error=on_error).batch(BATCH)
    with pipe:
        return [b.tolist() for b in pipe]


@pytest.mark.parametrize("workers", [2, 8])
def test_stuck_sample_is_skipped_and_its_worker_replaced(files, workers, no_leaks):
    pipe = pipeline(files, workers=workers)
    with pipe, pytest.warns(RuntimeWarning, match=f"skipped 1 samples .*: {STUCK}"):
        batches = [b.tolist() for b in pipe]
        stats = pipe.stats()
    assert batches == reference_batches(files), "the other samples must come once each, in the serial order"
    assert sorted(v for b in batches for v in b) == [i for i in range(N) if i != STUCK]
    assert [index for index, _ in stats.skipped] == [STUCK]
    reason = stats.skipped[0][1]
    assert "TimeoutError" in reason and "timeout=1" in reason, reason
    assert stats.worker_restarts >= 1, "the stuck worker must have been replaced"


@pytest.mark.parametrize("workers", [2, 8])
def test_stuck_sample_raises_sample_error_at_its_batch(files, workers, no_leaks):
    expected = reference_batches(files)
    at = next(k for k, b in enumerate(reference_batches(files, on_error=lambda i, e: np.int64(-1))) if -1 in b)
    delivered = []
    pipe = pipeline(files, workers=workers, on_error="raise")
    with pipe:
        with pytest.raises(SampleError) as caught:
            for b in pipe:
                delivered.append(b.tolist())
    error = caught.value
    assert delivered == expected[:at], "every batch before the stuck one comes, in order, then the error"
    assert error.index == STUCK and error.where == files[STUCK]
    assert f"sample {STUCK}" in str(error) and files[STUCK] in str(error) and "timeout=1" in str(error), str(error)
    assert isinstance(error.__cause__, TimeoutError)


def test_callable_on_error_replaces_the_stuck_sample(files, no_leaks):
    def replace(index, error):
        return np.int64(-1 if isinstance(error, TimeoutError) else -2)

    pipe = pipeline(files, on_error=replace)
    with pipe:
        batches = [b.tolist() for b in pipe]
    assert batches == reference_batches(files, on_error=lambda i, e: np.int64(-1))


def test_resume_around_the_skipped_sample_gives_the_rest_of_the_epoch(files, no_leaks):
    pipe = pipeline(files)
    with pipe:
        it = iter(pipe)
        states, batches = [json.dumps(it.state())], []
        for b in it:
            batches.append(b.tolist())
            states.append(json.dumps(it.state()))
    stuck_at = next(k for k, b in enumerate(reference_batches(files, on_error=lambda i, e: np.int64(-1))) if -1 in b)
    for k in (stuck_at, stuck_at + 1):  # just before the stuck sample's batch (it times out again), and after it
        fresh = pipeline(files)
        with fresh:
            resumed = fresh.resume(json.loads(states[k]))
            rest = [b.tolist() for b in resumed]
            skipped = [index for index, _ in resumed.stats().skipped]
        assert rest == batches[k:], f"resume after {k} batches"
        assert skipped == [STUCK]


def load_two_stuck(path: str):
    """Files STUCK and STUCK + 1 (one batch, without a shuffle) both hang."""
    if path.endswith((f"{STUCK:03d}.txt", f"{STUCK + 1:03d}.txt")):
        time.sleep(30)
    with open(path) as f:
        return np.int64(int(f.read()))


def test_two_stuck_samples_of_one_batch_are_both_left_out(files, no_leaks):
    pipe = fl.from_files(files).map(load_two_stuck, workers=2, on_error="skip", timeout=1).batch(BATCH)
    with pipe:
        values = [v for b in pipe for v in b.tolist()]
        stats = pipe.stats()
    assert values == [i for i in range(N) if i not in (STUCK, STUCK + 1)]
    assert sorted(index for index, _ in stats.skipped) == [STUCK, STUCK + 1]
    assert stats.worker_restarts >= 2


def test_samples_under_the_limit_never_time_out(files, no_leaks):
    def slowish(path):
        time.sleep(0.01)
        with open(path) as f:
            return np.int64(int(f.read()))

    pipe = pipeline(files, slowish, workers=8, on_error="raise", timeout=5)  # 8 processes on few cores: under load
    with pipe:
        for _ in range(2):
            values = sorted(v for b in pipe for v in b.tolist())
            assert values == list(range(N))
            assert pipe.stats().skipped == [] and pipe.stats().worker_restarts == 0


@pytest.mark.parametrize("backend", ["thread", "serial", "ray"])
def test_timeout_is_refused_where_a_stuck_sample_cannot_be_stopped(files, backend):
    with pytest.raises(ValueError, match=f"timeout=1.*backend='{backend}'" if backend != "ray" else "not supported yet"):
        pipeline(files, backend=backend)


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "5", True])
def test_timeout_must_be_a_positive_number_of_seconds(files, bad):
    with pytest.raises(ValueError, match="timeout"):
        fl.from_files(files).map(load, timeout=bad)


def test_timeout_is_refused_for_generator_sources():
    def shard(index, count):
        yield from range(index, 8, count)

    with pytest.raises(ValueError, match="generator source"):
        fl.from_generator(shard, num_shards=2).map(lambda x: x, timeout=1)


def test_timeout_without_a_backend_runs_in_processes(files, no_leaks):
    pipe = fl.from_files(files).map(load_or_fail, timeout=5, on_error="skip").batch(BATCH)
    with pipe:
        values = [v for b in pipe for v in b.tolist()]
        assert pipe.stats().backend == "process"
    assert sorted(values) == [i for i in range(N) if i != STUCK]
    assert "timeout=5" in repr(pipe) or "timeout=5" in str(pipe)
