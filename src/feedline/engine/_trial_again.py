"""After the decision: the winner watched, and the trial run again where it no longer delivers.

`Retrial` is the part of `feedline.engine._trial.BackendTrial` that
watches the winner's tasks once settled: its rate per worker against the
rate that won (`Drift`; after `WinnerWatch.retrial_after`, doubled each time a
trial confirms the winner), and threads grown for I/O that keep only the
cores one GIL allows (`WinnerWatch.gil_limit`). Either runs the trial again
(`_try_again`), the loser restarted through ``restart(kind, workers)``
once its last task is back (None: never again).

State it owns: `_init_again`. For the new trial it starts the trial's
measures anew (`_measure_anew`) and the judging's stretches (`_forget_judging`).
"""

from __future__ import annotations

from ..backends import Executor
from ._trial_measure import Drift, Measure
from .choice import Phase, busy_while_working

__all__ = ["Retrial"]


class Retrial:
    """The winner watched after the decision, and the trial run again (see the module docstring)."""

    def _init_again(self, restart) -> None:
        self._restart = restart  # restart(kind, workers) -> a fresh executor of that kind (None: no trial again)
        self.trials = 1
        self._retrial_after = self.policy.watch.retrial_after
        self._drift = Drift(self.policy)
        self._decided_rate = 0.0  # the winner's samples/s per worker when it won
        self._settled_at = 0.0
        self._previous_winner: str | None = None
        self._retry_reason = ""  # why the trial runs again, for the decision text
        self._grown: Measure | None = None  # the thread winner's tasks since it grew: does the GIL limit them?
        self._grown_from = 0.0
        self._grown_clocks: tuple[float, float] | None = None  # the threads' summed CPU and idle seconds when they grew
        self._gil_capped = ""  # the grown threads hit the GIL: run the trial again once the loser's tasks are back
        self._io_shortcut = True  # threads that wait on I/O may win at once (not after they met the GIL)

    def _watch_grown(self, workers: int) -> None:
        """The thread winner grew to ``workers``: its tasks from now on tell whether the GIL limits them."""
        self._grown = Measure(workers, min(workers, self.cores), self.policy.evidence_span)
        self._grown_from = self.clock.perf_counter()
        self._grown_clocks = _summed_clocks(self.threads)

    def _watch_winner(self, executor: Executor, result) -> None:
        """A task of the winner's, after the decision: for the drift check and the grown threads."""
        self._drift.add(result)
        self._watch_grown_threads(executor, result)

    def _retry_if_due(self) -> None:
        """Run the trial again if grown threads met the GIL, or the winner's rate drifted down past `WinnerWatch.retrial_after`."""
        if self._gil_capped and self._restart is not None:
            self._try_again(self._gil_capped, io_shortcut=False)
        elif self._drift.drifted(self._decided_rate, self.workers) and self._may_retry():
            self._try_again(f"the rate fell ({self._drift.describe(self._decided_rate)})")

    def _watch_grown_threads(self, executor: Executor, result) -> None:
        """Threads grown for I/O that keep about one core busy between them (`WinnerWatch.gil_limit`): the GIL limits them now."""
        grown = self._grown
        if grown is None or executor is not self.threads or result.span[0] < self._grown_from:
            return
        grown.add(result)
        if not grown.done:
            return
        self._grown = None  # judged once per growth
        busy = self._grown_busy(executor, grown)
        low, high = self.policy.watch.gil_limit
        if self.cores >= 2 and low <= busy <= high:
            self._gil_capped = (f"{grown.workers} threads kept {busy:.2f} cores busy between them, the most "
                                f"the GIL lets Python use, with {self.cores} cores here")

    def _grown_busy(self, executor: Executor, grown: Measure) -> float:
        """Cores the grown threads kept busy since they grew: from their clocks (GIL waits between tasks count), else their tasks."""
        now = _summed_clocks(executor)
        if now is None or self._grown_clocks is None:
            return grown.cores_busy
        (cpu, idle), (was_cpu, was_idle) = now, self._grown_clocks
        return busy_while_working(cpu - was_cpu, idle - was_idle, self.clock.perf_counter() - self._grown_from, grown.workers)

    def _may_retry(self) -> bool:
        return (self._restart is not None and self._decided_rate > 0
                and self.clock.perf_counter() - self._settled_at >= self._retrial_after)

    def _try_again(self, reason: str, io_shortcut: bool = True) -> None:
        """The winner slowed down (machine load, the work changed, or grown threads met the GIL): run the trial again, the loser restarted."""
        loser_kind = "process" if self.winner == "thread" else "thread"
        loser = self.processes if loser_kind == "process" else self.threads
        if self._outstanding[loser]:
            return  # its last tasks are not back yet: next time
        self._gil_capped = ""
        try:
            fresh = self._restart(loser_kind, self.workers)
        except Exception:  # cannot start it now: keep the winner, and do not ask again for a while
            self._retrial_after *= 2
            return
        self._retry_reason, self._io_shortcut = reason, io_shortcut
        self._previous_winner = self.winner
        if loser_kind == "process":
            self.processes = fresh
            self._processes_started = True  # measured as before: a drifting rate is not a start-up question
            self.phase = Phase.STARTING_PROCESSES
            self._warmed = set()
            self._switch.take()
        else:
            self.threads = fresh
            self.phase = Phase.MEASURING_PROCESSES  # the process workers are up: they take the work and are measured first
        self._closed.discard(fresh)
        self._outstanding[fresh] = self._outstanding.pop(loser, 0)
        self._measure_anew()
        self._forget_judging(self.clock.perf_counter())  # (`feedline.engine._trial_gil`)
        self._abandoned = False  # (`feedline.engine._trial_handover`)
        self.winner = None  # the rates of the last decision stay in stats().trial until the next one
        self._started = self.clock.perf_counter()
        self.trials += 1
        self.threads.watch_progress(True)


def _summed_clocks(executor: Executor) -> tuple[float, float] | None:
    """The pool's CPU seconds and seconds waiting with no task so far, summed over its threads; None if unreadable."""
    clocks = executor.side_by_side()
    return None if clocks is None else (sum(c.cpu for c in clocks), sum(c.idle for c in clocks))
