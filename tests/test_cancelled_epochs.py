"""The epoch after a left one starts on free workers, gets exactly its own batches, and the left one holds nothing.

A worker still inside a sample of the left epoch (cancelled: it stops at
the sample's end) takes no task of the next epoch while another worker
can start it: the next epoch's first batch does not wait for that sample.
Samples here are held in the worker until the test releases them (a
``hold-<index>`` file claimed by the first sample of that index, a
``release-<index>`` file ending it), so which worker is inside which
sample is known without timing; a held sample gives up after
`HOLD_LIMIT` seconds, so a regression fails an assertion instead of
hanging. The log (`note`) says which worker began and ended each sample.
"""

from __future__ import annotations

import functools
import os
import threading
import time

import numpy as np
import pytest
from sample_log import LEAVE, leave_after, logged_pipeline, samples_begun

import feedline as fl
from feedline import testing

pytestmark = pytest.mark.timeout(120)

N, BATCH, SEED = 32, 4, 3
HOLD_LIMIT = 20.0  # seconds a held sample waits for its release at most


def note(folder: str, line: str) -> None:
    fd = os.open(os.path.join(folder, "log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{line}\n".encode())
    finally:
        os.close(fd)


def held(sample, folder: str):
    """Log the sample's begin and end with the worker's id; the first sample of an index with a hold file waits for its release."""
    index, worker = int(sample), fl.get_worker_info().id
    note(folder, f"{worker} {index} begin")
    try:
        os.remove(os.path.join(folder, f"hold-{index}"))  # claimed once: the same index in a later epoch runs freely
    except FileNotFoundError:
        pass
    else:
        deadline = time.monotonic() + HOLD_LIMIT
        while not os.path.exists(os.path.join(folder, f"release-{index}")) and time.monotonic() < deadline:
            time.sleep(0.005)
    note(folder, f"{worker} {index} end")
    return np.int64(index)


def log_lines(folder) -> list[tuple[int, int, str]]:
    try:
        with open(os.path.join(folder, "log")) as f:
            return [(int(w), int(i), what) for w, i, what in (line.split() for line in f)]
    except FileNotFoundError:
        return []


def wait_for(folder, index: int, since: int) -> int:
    """Block until sample ``index`` began, in the log's lines from ``since`` on; returns the worker it began on."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for worker, i, w in log_lines(folder)[since:]:
            if i == index and w == "begin":
                return worker
        time.sleep(0.005)
    raise AssertionError(f"sample {index} never began; the log: {log_lines(folder)[since:]}")


def reference(epoch: int) -> list[list[int]]:
    """The batches of ``epoch``, as one thread computes them."""
    return [b.tolist() for b in fl.from_arrays(np.arange(N)).shuffle(seed=SEED).batch(BATCH).epoch(epoch)]


@pytest.mark.parametrize(("backend", "other", "how"), [
    ("process", "idle", "break"), ("thread", "idle", "break"),
    ("process", "in a sample", "break"), ("thread", "in a sample", "break"),
    *[("process", "in a sample", how) for how in LEAVE if how != "break"],
])
def test_the_next_epoch_starts_on_the_worker_that_is_free_and_gets_exactly_its_own_batches(tmp_path, backend, other, how, no_leaks):
    folder = str(tmp_path)
    fn = functools.partial(held, folder=folder)
    # Two tasks a worker (prefetch 4) for a worker that is in a sample too; one (prefetch 2) for one that is idle.
    depth = 4 if other == "in a sample" else 2
    pipe = fl.from_arrays(np.arange(N)).shuffle(seed=SEED).map(fn, backend=backend, workers=2).batch(BATCH).prefetch(depth)
    with pipe:
        list(pipe)  # workers up
        testing.wait_ready(pipe, 60)
        start = len(log_lines(folder))
        left = reference(1)  # the epoch to be left: its tasks go 0 -> worker 0, 1 -> worker 1, 2 -> worker 0
        first_of = [batch[0] for batch in left]
        stuck, other_hold = first_of[2], first_of[1]
        for index in (stuck, other_hold):
            open(os.path.join(folder, f"hold-{index}"), "w").close()

        def release(index: int) -> None:
            open(os.path.join(folder, f"release-{index}"), "w").close()

        if other == "idle":
            # The other worker finishes task 1 once worker 0 is inside task 2's held sample; the epoch is left after batch 1.
            helper = threading.Thread(target=lambda: (wait_for(folder, stuck, start), release(other_hold)))
            helper.start()
            following = leave_after(pipe, 2, how)
            helper.join()
        else:
            # Left after batch 0 with worker 0 inside task 2's held sample and worker 1 inside task 1's.
            following = leave_after(pipe, 1, how, lambda: (wait_for(folder, stuck, start), wait_for(folder, other_hold, start)))
            threading.Timer(0.2, release, (other_hold,)).start()  # it ends its sample while the next epoch waits, or before
        at_leave = len(log_lines(folder))
        stuck_worker = [w for w, i, what in log_lines(folder)[start:] if i == stuck and what == "begin"][0]
        first = next(following).tolist()
        at_first = log_lines(folder)
        release(stuck)
        rest = [b.tolist() for b in following]
        after = log_lines(folder)
    leave_after.kept = None
    assert (stuck, "end") not in [(i, what) for _, i, what in at_first[start:]], "the first batch waited for the left epoch's sample"
    began_first = {w for w, i, what in at_first[at_leave:] if i in first and what == "begin"}
    assert began_first == {1 - stuck_worker}, f"the first batch ran on {began_first}, the worker inside the left sample is {stuck_worker}"
    assert [first, *rest] == reference(following.epoch)  # exactly its own batches: nothing of a cancelled task
    begun = sum(what == "begin" for _, _, what in after[at_leave:])
    assert begun == N, f"{begun - N} samples of the left epoch began after it was left"


@pytest.mark.parametrize("how", ["close", "superseded"])
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_left_epoch_still_referenced_holds_no_batches(tmp_path, backend, how, no_leaks):
    # Its finished tasks and cut batches hold a process worker's slots (or a thread's arrays) while it lives.
    with logged_pipeline(tmp_path / "begun.log", backend, n=64, batch=4, workers=2, seconds=0.005).prefetch(6) as pipe:
        list(pipe)
        it = iter(pipe)
        next(it)
        assert testing.batches_ahead(it) > 0
        if how == "close":
            it.close()
            following = iter(pipe)
        else:
            following = iter(pipe)  # `it` is still referenced: only the new epoch makes it stale
        assert testing.batches_ahead(it) == 0
        assert sorted(int(v) for b in following for v in b) == list(range(64))


@pytest.mark.parametrize("how", ["break", "close", "del"])
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_left_epoch_stops_without_a_next_one(tmp_path, backend, how, no_leaks):
    # No new epoch supersedes it: leaving it (the iterator dropped, or closed) is what cancels its tasks.
    log = tmp_path / "begun.log"
    with logged_pipeline(log, backend, n=96, batch=8, workers=2) as pipe:
        list(pipe)
        before = samples_begun(log)
        if how == "break":
            for taken, _ in enumerate(pipe, 1):
                if taken == 2:
                    break
        else:
            it = iter(pipe)
            next(it)
            next(it)
            if how == "close":
                it.close()
            else:
                del it
        at_leave = samples_begun(log)
        time.sleep(1.0)  # room for the left epoch's queued tasks to run, were they not cancelled
        after = samples_begun(log)
    assert at_leave - before >= 16
    assert after - at_leave <= 2, f"{after - at_leave} samples of the left epoch ran after it was left ({how}, {backend})"


@pytest.mark.parametrize("how", ["close", "superseded"])
@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_left_epoch_resumes_exactly_after_its_last_batch(tmp_path, backend, how, no_leaks):
    # Letting go of what it held leaves its position: resuming it gives the rest of that epoch, no batch twice.
    fn = functools.partial(held, folder=str(tmp_path))
    pipe = fl.from_arrays(np.arange(N)).shuffle(seed=SEED).map(fn, backend=backend, workers=2).batch(BATCH).prefetch(6)
    with pipe:
        it = iter(pipe)
        taken = [next(it).tolist() for _ in range(3)]
        if how == "close":
            it.close()
        else:
            list(pipe)  # a whole newer epoch while `it` is kept
        rest = [b.tolist() for b in pipe.resume(it.state())]
    assert [*taken, *rest] == reference(0)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_closing_a_superseded_iterator_leaves_the_newer_epochs_stats(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(48)).map(float, backend=backend, workers=2).batch(8)
    with pipe:
        old = iter(pipe)
        next(old)
        newer = iter(pipe)  # supersedes `old`
        assert len(list(newer)) == 6
        del newer
        old.close()
        assert pipe.stats().batches == 6, "the left epoch's one batch was published over the newer epoch's six"
