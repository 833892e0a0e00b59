"""The automatic choice for pipelines without per-sample Python: the calling thread or threads, measured.

A pipeline such as ``from_store(p).shuffle().batch(256).map_batch(augment)``
reads whole batches in bulk and runs at most a batch function. Which is
faster depends on what those do, and goes both ways: a NumPy ``map_batch``
gains from a second thread, while bulk gathers of small rows (a Python loop
per row across a store's files, or a batch of small rows) lose on threads,
which pay a hand-off per batch. So bulk reads alone stay
in the calling thread (`feedline.engine._choice`), except from a store,
whose `gather` copies each record batch's rows with NumPy calls that
release the GIL (issue 15), so two threads can copy two batches at once.
Where a batch function runs, or a store is read in bulk, `SerialOrThreads`
tries both on the pipeline itself, as `feedline.engine._trial` does for
threads and processes (threads start in microseconds; no processes here,
which would copy every batch once more):

- The first tasks run serially, in the calling thread, as each is
  collected, and are measured (at least `MIN_TASKS` of them and
  `MIN_SPAN` seconds).
- The next go to the threads, measured once the serial tasks are done (so
  the calling thread competes with them no more).
- Threads keep the work if they deliver at least as many samples per
  second: they also run ahead of the consumer, so loading overlaps the
  training step, which the serial path cannot do.
Both rates and the reason are in ``stats().decision`` and ``stats().trial``.
"""

from __future__ import annotations

import time

from ..backends import Executor

__all__ = ["MIN_SPAN", "MIN_TASKS", "SerialOrThreads"]

MIN_TASKS = 4  # tasks measured per candidate, at least (times the workers, for threads)
MIN_SPAN = 0.01  # seconds of measured work per worker, at least


class _Rate:
    """Tasks one candidate ran: samples per second, over ``workers`` workers."""

    def __init__(self, workers: int):
        self.workers = workers
        self.rows = self.span = 0.0
        self.tasks = 0

    def add(self, result) -> None:
        start, end = result.span
        self.rows += result.rows
        self.span += max(end - start, 1e-9)
        self.tasks += 1

    @property
    def done(self) -> bool:
        return self.tasks >= MIN_TASKS * self.workers and self.span >= MIN_SPAN * self.workers

    @property
    def per_second(self) -> float:
        return self.workers * self.rows / self.span


class SerialOrThreads(Executor):
    """Serial first, threads next, the faster keeps the work (see the module docstring)."""

    def __init__(self, serial: Executor, threads: Executor):
        self.serial, self.threads = serial, threads
        self.workers = threads.workers
        self.cores = threads.cores
        self.note = ""
        self.winner: str | None = None
        self.rates: dict[str, float] = {}
        self._owner: dict = {}
        self._outstanding = {serial: 0, threads: 0}
        self._measure = {serial: _Rate(1), threads: _Rate(threads.workers)}
        self._threads_from = None  # thread tasks started from here are measured (the serial ones are done)
        self._threads_closed = False

    @property
    def name(self) -> str:
        if self.winner is not None:
            return self.winner
        return "thread" if self._measure[self.serial].done else "serial"

    @property
    def settled(self) -> bool:
        return self.winner is not None

    @property
    def steady(self) -> bool:
        """Decided, and the threads' last task back where the calling thread won (its own tasks run as collected)."""
        return self.winner is not None and (self.winner == "thread" or not self._outstanding[self.threads])

    def submit(self, key, task, affinity=None) -> None:
        target = self._route()
        self._owner[key] = target
        self._outstanding[target] += 1
        target.submit(key, task, affinity)

    def wait(self, timeout):
        if self._outstanding[self.serial]:  # runs the next serial task here, now
            return self._collect(self.serial, self.serial.wait(timeout))
        if self._outstanding[self.threads]:
            return self._collect(self.threads, self.threads.wait(timeout))
        return []

    def outstanding(self) -> int:
        return self.serial.outstanding() + self.threads.outstanding()

    def cancel(self, generation: int) -> None:
        self.serial.cancel(generation)
        self.threads.cancel(generation)
        for key in [k for k in self._owner if k[0] == generation]:
            self._outstanding[self._owner.pop(key)] -= 1

    def set_window_share(self, tasks: int) -> None:
        self.threads.set_window_share(tasks)

    def grow(self, workers: int) -> bool:
        """Threads only, once they won (e.g. a batch function reading from the network)."""
        if self.winner != "thread" or not self.threads.grow(workers):
            return False
        self.workers = workers
        return True

    def shrink(self, workers: int) -> bool:
        """Threads only, once they won."""
        if self.winner != "thread" or not self.threads.shrink(workers):
            return False
        self.workers = workers
        return True

    def close(self) -> None:
        self.serial.close()
        if not self._threads_closed:
            self._threads_closed = True
            self.threads.close()

    # --------------------------------------------------------------- trial
    def _route(self) -> Executor:
        if self.winner is not None:
            return self.serial if self.winner == "serial" else self.threads
        return self.threads if self._measure[self.serial].done else self.serial

    def _collect(self, executor: Executor, events: list) -> list:
        for event in events:
            if self._owner.pop(event.key, None) is not None:
                self._outstanding[executor] -= 1
            result = event.result
            if self.winner is None and result.error is None and result.rows:
                if executor is self.serial:
                    self._measure[executor].add(result)
                elif self._threads_from is not None and result.span[0] >= self._threads_from:
                    self._measure[executor].add(result)
        if self.winner is None:
            if self._threads_from is None and self._measure[self.serial].done and not self._outstanding[self.serial]:
                self._threads_from = time.perf_counter()
            if self._measure[self.threads].done:
                self._decide()
        if self.winner == "serial" and not self._outstanding[self.threads] and not self._threads_closed:
            self._threads_closed = True
            self.threads.close()  # the loser's threads go once their last task is back
        return events

    def _decide(self) -> None:
        serial, threads = self._measure[self.serial].per_second, self._measure[self.threads].per_second
        self.rates = {"serial": serial, "thread": threads}
        self.winner = "thread" if threads >= serial else "serial"
        self.note = (f"tried the calling thread ({serial:,.0f} samples/s) and {self.workers} threads "
                     f"({threads:,.0f} samples/s): {'threads' if self.winner == 'thread' else 'the calling thread'}")
