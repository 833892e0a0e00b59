"""The automatic backend choice, decided on measured throughput: threads first, then processes, the faster wins.

Every backend gives the same batches, so the engine can switch mid-epoch
without changing the output. `BackendTrial` is an `Executor` over two:
- Threads start at once and take the first tasks (no wait for the first
  batch) while the process workers fork, from the fork server.
- Once every process worker is up (so their start-up does not slow the
  threads down), thread tasks are measured; then new tasks go to the
  processes, and once the threads' last task is back, process tasks are
  measured alone (each worker's first task, its warm-up, is left out).
- A measurement is at least `workers` tasks and `MIN_SPAN` seconds of
  work per worker; its rate is rows over task spans, times the workers.
  Processes must beat threads by `PROCESS_MARGIN` (threads copy no batch
  and hold no memory per worker); the loser is closed. Cores kept busy by
  the threads do not settle it: threads that release the GIL can still
  lose, e.g. to page faults of large temporaries that the workers' malloc
  settings avoid.
A pipeline too short to finish the trial keeps what it has and carries the
trial over into its next epoch (the runtime persists). Both rates and the
reason are in ``stats().decision`` and ``stats().trial``.
"""

from __future__ import annotations

import time

from ..backends import Executor

__all__ = ["MIN_SPAN", "PROCESS_MARGIN", "BackendTrial"]

MIN_SPAN = 0.05  # seconds of measured work per worker, at least: short tasks are noisy
PROCESS_MARGIN = 1.1  # processes must deliver this much more to win: threads copy no batch and hold no memory per worker


class _Measure:
    """Tasks one backend ran alone: samples per second and cores kept busy, for all its workers.

    Per task, not per wall-clock window: a worker's rate is rows over the
    task's span, and the pool's is that times the number of workers (they
    all have work while the consumer waits, which is when it matters). So
    it does not matter which worker ran which measured task.
    """

    def __init__(self, workers: int, skip_first: bool):
        self.workers, self.skip_first = workers, skip_first
        self.rows = self.span = self.cpu = 0.0
        self.tasks = 0
        self.seen: set = set()  # workers whose first task (warm-up) went by

    def add(self, result) -> None:
        if self.done:
            return
        if self.skip_first and result.worker not in self.seen:
            self.seen.add(result.worker)
            return
        start, end = result.span
        self.rows += result.rows
        self.span += max(end - start, 1e-9)
        self.cpu += result.cpu
        self.tasks += 1

    @property
    def done(self) -> bool:
        return self.tasks >= self.workers and self.span >= self.workers * MIN_SPAN

    @property
    def per_second(self) -> float:
        return self.workers * self.rows / self.span

    @property
    def cores_busy(self) -> float:
        return self.workers * self.cpu / self.span


class BackendTrial(Executor):
    """Threads now, processes next; the faster keeps the work (see the module docstring)."""

    def __init__(self, threads: Executor, processes: Executor, workers: int):
        self.threads, self.processes = threads, processes
        self.workers = workers
        self.cores = threads.cores
        self.note = ""
        self.winner: str | None = None
        self.rates: dict[str, float] = {}
        self._owner: dict = {}  # task key -> the executor it went to
        self._outstanding = {threads: 0, processes: 0}
        self._usable = min(workers, threads.cores)  # cores the threads could keep busy at most
        # Threads share the consumer's warmed-up interpreter; each process worker warms up on its first task.
        self._measure = {threads: _Measure(workers, skip_first=False), processes: _Measure(workers, skip_first=True)}
        self._ready_at = None  # when every process worker was up: thread tasks count from here
        self._sent_to_processes = False
        self._drained_at = None  # when the threads' last task was back (worker clock): processes alone from here
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
        if self._ready_at is None:
            try:
                ready = self.processes.wait_ready(0)
            except Exception as exc:  # the workers cannot start here: threads it is, and the report says why
                self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads")
                return self.threads
            if ready:
                self._ready_at = time.perf_counter()
        if self._ready_at is None or not self._measure[self.threads].done:
            return self.threads  # the process workers are starting, or the threads are being measured
        self._sent_to_processes = True
        return self.processes

    def _collect(self, executor: Executor, events: list) -> list:
        for event in events:
            if self._owner.pop(event.key, None) is not None:
                self._outstanding[executor] -= 1
            result = event.result
            if self.winner is None and result.error is None:
                if executor is self.threads:
                    if self._ready_at is not None and result.span[0] >= self._ready_at:
                        self._measure[executor].add(result)  # started once the process workers were up
                elif self._drained_at is not None and result.span[0] >= self._drained_at:
                    self._measure[executor].add(result)  # started once the threads were done
            if executor is self.threads:
                result.worker += self.processes.workers  # threads have their own rows in traces
        if self.winner is None:
            if self._sent_to_processes and not self._outstanding[self.threads] and self._drained_at is None:
                self._drained_at = time.perf_counter()  # processes have the machine to themselves from here
            if self._measure[self.processes].done:
                self._decide()
        self._close_idle_loser()
        return events

    def _decide(self) -> None:
        threads, processes = self._measure[self.threads], self._measure[self.processes]
        self.rates = {"thread": threads.per_second, "process": processes.per_second}
        winner = "process" if processes.per_second > PROCESS_MARGIN * threads.per_second else "thread"
        self._settle(winner, f"tried both: threads {threads.per_second:,.0f} samples/s ({threads.cores_busy:.1f} of "
                             f"{self._usable} cores busy), processes {processes.per_second:,.0f} samples/s: "
                             f"{'processes' if winner == 'process' else 'threads'}")

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
