"""The thread backend: a pool of threads in the consumer's process.

Right for work that releases the GIL (image decoders, NumPy on large
arrays): no start-up cost, no transport. Each thread has its own task
queue (tasks of one stream shard go to one thread, in order); results go
to one shared queue. An unexpected exception in a thread is returned as a
task error, never lost, and the thread lives on.

Shutdown: `close` puts a stop marker in every queue and joins the threads
(a thread stuck in user code is abandoned as a daemon after a timeout).
"""

from __future__ import annotations

import itertools
import queue
import threading

from ..worker import Result, TaskError, run_task
from ._base import Event, Executor

__all__ = ["ThreadExecutor"]

_STOP = object()
_names = itertools.count()


class ThreadExecutor(Executor):
    name = "thread"

    def __init__(self, part, workers: int):
        self.part = part
        self.workers = workers
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.inboxes = [queue.SimpleQueue() for _ in range(workers)]
        self.load = [0] * workers
        self.pending = 0
        self.cancelled: set[int] = set()
        self.threads = []
        pool = next(_names)
        for n, inbox in enumerate(self.inboxes):
            thread = threading.Thread(target=self._work, args=(n, inbox), name=f"feedline-{pool}-thread-{n}", daemon=True)
            thread.start()
            self.threads.append(thread)

    def _work(self, n, inbox):
        streams: dict = {}
        while True:
            item = inbox.get()
            if item is _STOP:
                return
            key, task = item
            try:
                result = run_task(self.part, task, streams=streams)
            except BaseException as exc:  # reported to the consumer, never swallowed
                result = Result(error=TaskError.from_exception(exc))
            result.worker = n
            self.results.put((n, key, result))

    def submit(self, key, task, affinity=None):
        n = affinity % self.workers if affinity is not None else min(range(self.workers), key=self.load.__getitem__)
        self.load[n] += 1
        self.pending += 1
        self.inboxes[n].put((key, task))

    def wait(self, timeout):
        events = []
        try:
            item = self.results.get(timeout=timeout) if timeout is None or timeout > 0 else self.results.get_nowait()
        except queue.Empty:
            return events
        while True:
            n, key, result = item
            self.load[n] -= 1
            self.pending -= 1
            if key[0] not in self.cancelled:
                events.append(Event(key, result))
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                return events

    def outstanding(self):
        return self.pending

    def cancel(self, generation):
        self.cancelled.add(generation)

    def close(self):
        for inbox in self.inboxes:
            inbox.put(_STOP)
        for thread in self.threads:
            thread.join(timeout=2.0)
        self.threads = []
