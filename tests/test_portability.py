"""A pipeline travels as its description, and every backend gives the same values for every sample type."""

from __future__ import annotations

import pickle

import cloudpickle
import numpy as np
import pytest

import feedline as fl
import feedline.testing


def double(x):
    return x * 2


def identity(x):
    return x


@pytest.mark.parametrize("dumps", [pickle.dumps, cloudpickle.dumps], ids=["pickle", "cloudpickle"])
def test_pipeline_pickles_after_iterating_and_the_copy_runs_the_next_epoch(backend, dumps, no_leaks):
    pipe = fl.from_arrays(np.arange(40)).shuffle(seed=3).map(double, backend=backend, workers=2).batch(8)
    with pipe:
        first = [b.tolist() for b in pipe]  # the runtime (workers, queues) is up now
        copy = pickle.loads(dumps(pipe))
        expected = [b.tolist() for b in pipe]  # epoch 1 of the original
    with copy:
        assert [b.tolist() for b in copy] == expected  # the copy resumes at the same epoch
    assert first != expected  # epochs are shuffled differently, so the epoch really carried over


def test_a_pickled_running_pipeline_carries_no_workers(no_leaks):
    pipe = fl.from_arrays(np.arange(8)).map(double, backend="process", workers=2).batch(4)
    with pipe:
        next(iter(pipe))
        copy = pickle.loads(pickle.dumps(pipe))
        assert fl.testing.runtime(copy) is None  # the copy starts its own workers when iterated
        assert "running" not in repr(copy)


@pytest.mark.parametrize(
    "samples",
    [
        [2**70, 1, 2, 3, 4],  # beyond int64: an object array
        [None, None, None, None, None],
        [{"a": 2**65, "b": np.float32(1)}] * 5,
        [("text", np.arange(3)), ("more", np.arange(3))] * 2 + [("last", np.arange(3))],
    ],
    ids=["big-int", "none", "dict-of-big-int", "str-and-array"],
)
def test_every_backend_batches_python_objects_like_serial(backend, samples, no_leaks):
    def run(name):
        pipe = fl.from_sequence(samples).map(identity, backend=name, workers=2).batch(5)
        with pipe:
            return [pickle.dumps(b) for b in pipe]

    assert run(backend) == run("serial")


def pid_of(_):
    import os
    import time

    time.sleep(0.01)
    return os.getpid()


def test_unbatched_expensive_samples_spread_over_every_worker(no_leaks):
    # 40 samples without batch(): once one task of 64 samples, run by one worker.
    pipe = fl.from_arrays(np.arange(40)).map(pid_of, backend="process", workers=2)
    with pipe:
        epoch = iter(pipe)
        assert feedline.testing.wait_ready(pipe, 60)
        pids = list(epoch)
    assert len(pids) == 40 and len(set(pids)) == 2


def test_unbatched_checkpoint_of_the_64_sample_grid_still_resumes_exactly(no_leaks):
    pipe = fl.from_arrays(np.arange(300)).map(double, backend="thread", workers=2)
    with pipe:
        epoch = pipe.epoch(0)
        next(epoch)
        state = epoch.state()
        assert state["chunk"] == 1  # 300 samples: 300 tasks of one
        # written before the grid depended on the epoch (64 a task), with no chunk, seeds or digest
        older = {**state, "task": 1, "offset": 6, "batches": 70}
        for field in ("chunk", "seeds", "digest"):
            older.pop(field, None)
        assert [int(v) for v in pipe.resume(older)] == [2 * v for v in range(70, 300)]
