"""The serial backend: tasks run in the calling thread, when collected."""

from __future__ import annotations

import collections

from .._batch_memory import reusing_arrays
from .._collector_watch import CollectorWatch
from .._gc_freeze import GcFreeze
from ..worker import run_task
from ._base import Event, Executor

__all__ = ["SerialExecutor"]


class SerialExecutor(Executor):
    """Runs each task inside `wait`, in submission order: the reference backend."""

    name = "serial"
    workers = 1
    prefetches = False

    def __init__(self, part):
        self.part = part
        self.queue: collections.deque = collections.deque()
        self.streams: dict = {}
        self.spent: list = []  # the last batch's samples, let go of one by one as the next one's are made (`run_task`)
        self.arrays = reusing_arrays()  # large batch arrays used again once the consumer lets go
        self._gc_freeze = GcFreeze()  # with FEEDLINE_TUNE_PROCESS=1: the collector off the objects already here
        self._collector_watch = CollectorWatch()  # the full collections timed, for the epoch's report

    def submit(self, key, task, affinity=None):
        self.queue.append((key, task))

    def wait(self, timeout):
        if not self.queue:
            return []
        key, task = self.queue.popleft()
        return [Event(key, run_task(self.part, task, self.arrays, streams=self.streams, spent=self.spent))]

    def outstanding(self):
        return len(self.queue)

    def cancel(self, generation):
        self.queue = collections.deque(item for item in self.queue if item[0][0] != generation)

    def close(self):
        self.spent.clear()
        self._gc_freeze.release()
        self._collector_watch.release()
