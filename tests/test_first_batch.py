"""The first batch: what the consumer does before it, and what starts beside it (issue 55).

Held process workers (the automatic choice's, started at the first sign
that its threads are held back by the GIL) get their pipeline pickled, and
its large arrays copied into shared memory, in a thread of their own: the
consumer meanwhile goes on delivering the threads' batches. These tests
count where the pickling ran and what the consumer was kept from, not how
long anything took.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import feedline as fl

BIG = np.arange(1 << 19, dtype=np.float64)  # 4 MiB: shared with the workers through a segment, not pickled whole


class _Gate:
    """Travels as the int 0; records each thread that pickles it, and in the held workers' own waits for `opened`."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.opened = threading.Event()
        self.threads: list[str] = []

    def __reduce__(self):
        self.threads.append(threading.current_thread().name)
        if threading.current_thread().name == "feedline-held-start":
            if self.fail:
                raise RuntimeError("this object cannot travel (a test's)")
            self.opened.wait(60)
        return int, (0,)


def _part(gate: _Gate):
    def read_big(i):
        return BIG[i] * 2 + gate  # the gate arrives in the worker as 0

    return fl.from_arrays(np.arange(16)).map(read_big, backend="process").batch(4).plan.part


def _events(executor, deadline: float) -> list:
    events = []
    while not events and time.monotonic() < deadline:
        events += executor.wait(0.1)
    return events


def test_held_workers_pickle_their_pipeline_and_copy_its_arrays_off_the_consumers_thread(no_leaks):
    from feedline.backends.process import ProcessExecutor
    from feedline.worker import Task

    gate = _Gate()
    held = ProcessExecutor(_part(gate), 2, held=True)  # returns while the pipeline's pickling waits at the gate
    try:
        assert held.connecting(), "held workers whose pipeline is still being pickled are not all connected"
        assert not held.wait_ready(0), "... nor ready"
        held.release()  # asked for while pickling: nothing to send yet, and nothing to wait for here
        held.submit((0, 0), Task(epoch=0, number=0, indices=np.arange(4, 8)))
        assert held.wait(0.05) == [], "no worker has the pipeline before its pickling ends"
        assert "MainThread" in gate.threads, "the dry run (can it be sent?) runs in the consumer, before anything starts"
        assert "feedline-held-start" in gate.threads, f"the pipeline was pickled for the workers in {gate.threads}"
        gate.opened.set()
        [event] = _events(held, time.monotonic() + 60)
        assert event.result.error is None
        assert event.result.payload.tolist() == (BIG[4:8] * 2).tolist(), "the workers read the shared array as it was"
    finally:
        gate.opened.set()
        held.close()


def test_held_workers_whose_pipeline_fails_to_pickle_say_so_at_release(no_leaks):
    from feedline.backends import PartNotPicklable
    from feedline.backends.process import ProcessExecutor

    gate = _Gate(fail=True)
    held = ProcessExecutor(_part(gate), 2, held=True)  # the dry run passes: only the real pickling fails
    try:
        deadline = time.monotonic() + 60
        while held.still_starting() and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(PartNotPicklable, match="cannot travel"):
            held.release()
    finally:
        held.close()


def test_held_workers_closed_while_their_pipeline_is_pickled_leave_nothing_behind(no_leaks):
    from feedline.backends.process import ProcessExecutor

    gate = _Gate()
    held = ProcessExecutor(_part(gate), 2, held=True)
    threading.Timer(0.05, gate.opened.set).start()  # close waits for the pickling, which forks nothing once closing
    held.close()
    assert not held.still_starting()
    assert held.worker_pids() == [], "closed before the pipeline was pickled, it forks no worker"


def test_checking_that_a_pipeline_can_be_sent_copies_none_of_its_arrays():
    """The automatic choice checks it in the consumer before its first thread starts: a dry run keeps no bytes."""
    from feedline.backends import check_sendable

    rows = [np.full(8192, i, dtype=np.float64) for i in range(512)]  # 32 MiB in arrays of 64 KiB, each under the
    part = fl.from_sequence(rows).map(lambda r: r[:4] * 2).batch(8).plan.part  # size that goes to a shared segment
    tracemalloc.start()
    try:
        check_sendable(part)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20, f"the dry run held {peak / 2**20:.1f} MiB: the rows' 32 MiB were pickled into it"


def test_a_pipeline_that_cannot_be_sent_is_still_found_out_by_the_dry_run():
    from feedline.backends import PartNotPicklable, check_sendable

    part = fl.from_sequence([np.zeros(4), threading.Lock()]).batch(1).plan.part
    with pytest.raises(PartNotPicklable, match="lock"):
        check_sendable(part)


_GIL_OVER_A_BIG_ARRAY = (  # GIL-bound work on 2 cores over a 64 MiB array, in a fresh interpreter: who pickled it?
    "import threading, numpy as np, feedline as fl\n"
    "from feedline.engine import _runtime\n"
    "_runtime.default_workers = lambda: 2\n"
    "from feedline import _startup\n"
    "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"
    "threads = []\n"
    "class Seen:\n"
    "    def __reduce__(self):\n"
    "        threads.append(threading.current_thread().name)\n"
    "        return int, (0,)\n"
    "seen = Seen()\n"
    "big = np.arange(8 << 20, dtype=np.float64)\n"
    "def python(i):\n"
    "    total = 0\n"
    "    for k in range(60000):\n"  # ~4 ms of Python: it holds the GIL
    "        total += k % 7\n"
    "    return np.full(4, big[i] + (seen and 0))\n"  # (the object here, 0 in a worker)
    "p = fl.from_arrays(np.arange(400)).map(python).batch(8)\n"
    "with p:\n"
    "    out = [int(b[r, 0]) for b in p for r in range(len(b))]\n"
    "    assert out == list(range(400)), out\n"
    "    print(p.stats().backend, ','.join(sorted(set(threads))))\n"
)


def test_the_automatic_choice_copies_a_big_array_for_its_workers_off_the_consumers_thread():
    """The consumer pickled the pipeline with its array for the held workers, and delivered nothing meanwhile."""
    base = {k: v for k, v in os.environ.items() if k not in ("FEEDLINE_FORKSERVER", "FEEDLINE_REMEMBER")}
    out = subprocess.run([sys.executable, "-c", _GIL_OVER_A_BIG_ARRAY], capture_output=True, text=True, timeout=300,
                         env=base | {"FEEDLINE_REMEMBER": "0"})
    assert out.returncode == 0, out.stderr
    backend, threads = out.stdout.split()
    if backend != "process":
        pytest.skip(f"the trial kept {backend} here (a busy machine?): nothing to check")
    assert "feedline-held-start" in threads.split(","), f"the pipeline was pickled for the workers in {threads} only"
