"""The automatic backend choice, decided on delivered throughput: try threads, then processes, keep the faster.

Every backend gives the same batches, so the engine can switch mid-epoch
without changing the output. `BackendTrial` is an `Executor` over two:
- Threads start at once and take every task while the process workers
  start (no wait for the first batch, no GIL probe before any work).
- Once every process worker is up, new tasks go to processes, and (after
  the threads' last task is back, so neither slows the other) their rate
  is measured the same way.
- Each rate is samples delivered per second over `TRIAL_TASKS` tasks; the
  faster backend keeps every later task (processes must beat threads by
  `PROCESS_MARGIN`), and the other one is closed. The
  decision, both rates and why are in ``stats().decision``.
A pipeline too short to finish the trial keeps the thread pool's results
and carries the trial over into its next epoch (the runtime persists).
"""

from __future__ import annotations

import time

from ..backends import Event, Executor

__all__ = ["PROCESS_MARGIN", "TRIAL_TASKS", "BackendTrial"]

TRIAL_TASKS = 4  # tasks measured per backend (per worker: at least 2): enough to pass warm-up noise, cheap if the loser is slow
PROCESS_MARGIN = 1.1  # processes must deliver this much more to win: threads copy no batch and hold no memory per worker


class _Rate:
    """Samples one backend delivers per second: between one completion and ``needed`` more.

    Measured from completion to completion (not from submission), so the
    first task's start-up and tasks sent before the backend had the machine
    to itself do not count.
    """

    def __init__(self, needed: int):
        self.needed = needed
        self.open = False  # completions count from here on
        self.anchor = None  # time of the completion the measurement starts from
        self.rows = 0
        self.tasks = 0
        self.end = None

    def begin(self) -> None:
        self.open = True

    def add(self, rows: int, now: float) -> None:
        if not self.open or self.done:
            return
        if self.anchor is None:
            self.anchor = now
            return
        self.rows += rows
        self.tasks += 1
        if self.tasks >= self.needed:
            self.end = now

    @property
    def done(self) -> bool:
        return self.end is not None

    @property
    def per_second(self) -> float:
        return self.rows / max(self.end - self.anchor, 1e-9)


class BackendTrial(Executor):
    """Threads now, processes once ready; the one that delivers more samples per second keeps the work."""

    def __init__(self, threads: Executor, processes: Executor, workers: int):
        self.threads, self.processes = threads, processes
        self.workers = workers
        self.cores = threads.cores
        self.note = ""
        self.winner: str | None = None
        self.rates: dict[str, float] = {}
        self._owner: dict = {}  # task key -> the executor it went to
        self._outstanding = {threads: 0, processes: 0}
        needed = max(TRIAL_TASKS, 2 * workers)
        self._rate = {threads: _Rate(needed), processes: _Rate(needed)}
        self._sent_to_processes = False
        self._closed: set = set()

    # -------------------------------------------------------- the interface
    @property
    def name(self) -> str:
        return self.winner or ("process" if self._sent_to_processes else "thread")

    @property
    def restarts(self) -> int:
        return self.threads.restarts + self.processes.restarts

    def submit(self, key, task, affinity=None) -> None:
        target = self._route()
        if target is self.threads:
            self._rate[target].begin()  # threads start at once: from their first task
        self._owner[key] = target
        self._outstanding[target] += 1
        target.submit(key, task, affinity)

    def wait(self, timeout):
        busy = [e for e in self._live() if self._outstanding[e]]
        if not busy:
            return []
        if len(busy) == 1:
            return self._collect(busy[0], busy[0].wait(timeout))
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:  # both hold tasks (only while switching): poll each briefly
            for executor in busy:
                events = self._collect(executor, executor.wait(0.002))
                if events:
                    return events
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def outstanding(self) -> int:
        return sum(e.outstanding() for e in self._live())

    def cancel(self, generation: int) -> None:
        for executor in self._live():
            executor.cancel(generation)
        for key in [k for k in self._owner if k[0] == generation]:
            self._outstanding[self._owner.pop(key)] -= 1

    def set_window_share(self, tasks: int) -> None:
        for executor in self._live():
            executor.set_window_share(tasks)

    def worker_pids(self) -> list[int]:
        return self.processes.worker_pids() if self.winner != "thread" else []

    def wait_ready(self, timeout: float | None = None) -> bool:
        return all(e.wait_ready(timeout) for e in self._live())

    def close(self) -> None:
        for executor in (self.threads, self.processes):
            executor.close()

    # --------------------------------------------------------------- trial
    def _live(self) -> list:
        """The executors that hold or may get tasks (the loser until its last task is back)."""
        if self.winner is None:
            return [self.threads, self.processes]
        return [e for e in (self.threads, self.processes) if e is self._winning() or self._outstanding[e]]

    def _winning(self) -> Executor:
        return self.threads if self.winner == "thread" else self.processes

    def _route(self) -> Executor:
        if self.winner is not None:
            return self._winning()
        if not self._rate[self.threads].done:
            return self.threads
        try:
            ready = self.processes.wait_ready(0)
        except Exception as exc:  # the workers cannot start here: threads it is, and the report says why
            self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads")
            return self.threads
        if not ready:
            return self.threads  # the process workers are still starting
        self._sent_to_processes = True
        return self.processes

    def _collect(self, executor: Executor, events: list) -> list:
        now = time.perf_counter()
        for event in events:
            if self._owner.pop(event.key, None) is not None:
                self._outstanding[executor] -= 1
            if self.winner is None and event.result.error is None:
                self._rate[executor].add(event.result.rows, now)
            if executor is self.threads:
                event.result.worker += self.processes.workers  # threads have their own rows in traces
        if self.winner is None:
            if self._sent_to_processes and not self._outstanding[self.threads]:
                self._rate[self.processes].begin()  # processes have the machine to themselves from here
            if self._rate[self.threads].done and self._rate[self.processes].done:
                self._decide()
        self._close_idle_loser()
        return [Event(e.key, e.result) for e in events]

    def _decide(self) -> None:
        threads, processes = self._rate[self.threads].per_second, self._rate[self.processes].per_second
        self.rates = {"thread": threads, "process": processes}
        winner = "process" if processes > PROCESS_MARGIN * threads else "thread"
        self._settle(winner, f"tried both: threads delivered {threads:,.0f} samples/s, processes {processes:,.0f} samples/s "
                             f"({self._rate[self.threads].tasks} tasks each): {'processes' if winner == 'process' else 'threads'}")

    def _settle(self, winner: str, note: str) -> None:
        self.winner, self.note = winner, note
        self._close_idle_loser()

    def _close_idle_loser(self) -> None:
        if self.winner is None:
            return
        loser = self.processes if self.winner == "thread" else self.threads
        if not self._outstanding[loser] and loser not in self._closed:
            self._closed.add(loser)
            loser.close()  # its memory and (for processes) its workers go now
