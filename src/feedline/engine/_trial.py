"""The automatic backend choice's mechanism: `BackendTrial` gathers observations, `decide` judges, the trial acts.

Every backend gives the same batches, so the engine can switch mid-epoch
without changing the output. `BackendTrial` is an `Executor` over a thread
pool and process workers: threads take the first tasks at once and their
CPU clocks are read side by side; the observations go to
`feedline.engine.choice.decide` under the trial's `Policy`, and the
verdict is carried out here. A verdict is passed to ``on_verdict`` to be
remembered (`feedline.engine._remembered`); a run that starts on a
remembered verdict builds the trial settled (`_start_on`). Both rates and
the reason are in ``stats().decision`` and ``stats().trial``. The trial's
phase is one `feedline.engine.choice.Phase`.

This module holds the `Executor` interface, the routing of tasks, the
measures and the settling; each other job is a part of the class in a
module of its own, which states what it owns:

- `feedline.engine._trial_gil`: the threads judged side by side for the GIL;
- `feedline.engine._trial_start`: the process workers' start during the trial;
- `feedline.engine._trial_handover`: tasks handed over from threads to processes;
- `feedline.engine._trial_again`: the winner watched, and the trial run again;
- `feedline.engine._trial_measure`: `Measure` and `Drift`, the rates counted;
- `feedline.engine._trial_standin`: `NotStarted`, a backend not started yet.

The executors are driven only through the `Executor` protocol, whose
capabilities (`side_by_side`, `pause_beyond`, `take_queued`, ...) have
neutral defaults. The model, the controller and the policy:
docs/automatic_choice.md.
"""

from __future__ import annotations

import math
import time

from .._switch_interval import SwitchHold
from ..backends import Event, Executor
from ._remembered import Remembered
from ._trial_again import Retrial
from ._trial_gil import GilJudging
from ._trial_handover import Handover
from ._trial_measure import Drift, Measure
from ._trial_standin import NotStarted
from ._trial_start import ForkServer, WorkerStart
from .choice import Action, Observations, Phase, Policy, Verdict, current_policy, decide, predict

__all__ = ["BackendTrial", "NotStarted"]

JUDGE_POLL = 0.002  # seconds between looks at the threads' clocks while the GIL is judged (how the trial looks, not what it decides)


class BackendTrial(GilJudging, WorkerStart, Handover, Retrial, Executor):
    """Threads at once, processes if the threads hold the GIL, threads again only if they could win (docs/automatic_choice.md).

    ``make_processes()`` starts the process executor (`_judge_gil` decides
    when); ``restart(kind, workers)`` starts a fresh one of either kind for
    a trial run again (None: never); ``park()`` starts process workers held
    (`_park_workers`). ``clock`` and ``fork_server`` are what the trial
    reads the time from and asks after the fork server (a test scripts
    both: `feedline.testing.trial_clock`, `trial_fork_server`).
    """

    def __init__(self, threads: Executor, make_processes, workers: int, restart=None,
                 remembered: Remembered | None = None, on_verdict=None, park=None, policy: Policy | None = None,
                 clock=time, fork_server: ForkServer | None = None):
        self.policy = policy or current_policy()  # the thresholds of every decision (`feedline.engine.choice`)
        self.clock = clock  # ``perf_counter``, ``monotonic``, ``thread_time`` (the consumer's CPU): `time`, or a test's
        self.fork_server = fork_server or ForkServer()
        self.phase = Phase.JUDGING_THREADS
        self.threads, self.processes = threads, NotStarted(workers)
        self._on_verdict = on_verdict  # on_verdict(winner, rates, samples/s per worker, why, workers) -> None or why not kept
        self.workers = workers
        self.cores = threads.cores
        self._verdict_note = ""  # why the winner won (`note` while there is one)
        self.winner: str | None = None
        self.rates: dict[str, float] = {}
        self._owner: dict = {}  # task key -> the executor it went to
        self._outstanding = {threads: 0, self.processes: 0}
        self._usable = min(workers, threads.cores)  # cores the threads could keep busy at most
        self._reset_measures()
        self._warmed: set = set()  # process workers whose first task (imports, first page faults) went by, unmeasured
        self._thread_rows = self._thread_cpu = 0.0  # every thread task: the threads' upper bound
        self._thread_span, self._thread_tasks = 0.0, 0  # ... and how long they ran (their CPU share: I/O-bound?)
        self._thread_cpu_wait = 0.0  # ... and waited for a CPU while runnable (other programs on the cores: not I/O)
        self._alone_from = None  # processes measured from here (the threads' last task is back)
        self._threads_alone_from = None  # threads measured from here (the processes' last task is back)
        self._pieces: set = set()  # keys of pieces of the epoch's last batches sent while undecided (`_observe`)
        self._init_again(restart)
        self._init_judging(threads)
        self._init_start(make_processes, park)
        self._init_handover()
        self._closed: set = set()
        self._started = self.clock.perf_counter()
        self.decided_after: float | None = None  # seconds from the trial's start to its decision
        self._switch = SwitchHold()
        self._window_share: int | None = None  # the tasks each worker may hold, passed on to the workers once started
        if remembered is not None:
            self._start_on(remembered)
            return
        self._switch.take()  # from the start: GIL-bound threads otherwise hold the consumer's judging back a switch interval a step
        threads.watch_progress(True)

    # -------------------------------------------------------- the interface
    @property
    def name(self) -> str:
        if self.winner:
            return self.winner
        return "process" if self.phase is Phase.MEASURING_PROCESSES else "thread"

    @property
    def note(self) -> str:
        """Why the winner keeps the work; before the verdict, which phase the trial is in (an epoch can end first)."""
        if self.winner is None:
            return f"no verdict yet ({self.phase.value}); the trial goes on in the next epoch"
        return self._verdict_note

    @property
    def settled(self) -> bool:
        return self.winner is not None

    @property
    def steady(self) -> bool:
        """Decided, and the loser's last task back (a trial run again is not: both run meanwhile)."""
        if self.winner is None:
            return False
        return not self._outstanding[self.processes if self.winner == "thread" else self.threads]

    @property
    def processes_started(self) -> bool:
        """Whether this trial started process workers (threads that keep the cores busy never need them)."""
        return self._processes_started

    @property
    def restarts(self) -> int:
        return self.threads.restarts + self.processes.restarts

    def submit(self, key, task, affinity=None) -> None:
        if self.winner is None and self._alone_from is None:
            self._switch.take()  # again, where an idle spell gave it back (`_collect`)
        self._check_ready()
        if task.piece and self.winner is None:
            self._pieces.add(key)
        if self._handing_over:
            self._move_returned()  # a hand-over waiting past its deadline goes now, before this task
        target = self._route()
        self._owner[key] = target
        self._outstanding[target] += 1
        if self._drained is not None and target is self.threads:
            self._drained.append((key, task))  # for the processes once up (`_drain_threads`)
            return
        if target is self.processes:
            self._send_to_processes(key, task)
        else:
            target.submit(key, task, affinity)

    def wait(self, timeout):
        deadline = None if timeout is None else self.clock.monotonic() + timeout
        while True:
            self._check_ready()
            if self._handing_over:
                self._move_returned()
            busy = [e for e in self._live() if self._outstanding[e]]
            if not busy:
                return []
            if len(busy) == 1 and (self.phase.processes_up or self.winner is not None):
                left = None if deadline is None else max(0.0, deadline - self.clock.monotonic())
                return self._collect(busy[0], busy[0].wait(left))
            # Both hold tasks, or the process workers are starting: poll briefly, so their start is seen at once.
            for executor in busy:
                events = self._collect(executor, executor.wait(0.002 if len(busy) > 1 else self._poll()))
                if events:
                    return events
            if deadline is not None and self.clock.monotonic() >= deadline:
                return []

    def _poll(self) -> float:
        """Seconds to wait for the one busy executor before looking again: `JUDGE_POLL` while the GIL is judged."""
        return JUDGE_POLL if self.phase is Phase.JUDGING_THREADS else 0.01

    def outstanding(self) -> int:
        return sum(e.outstanding() for e in self._live())

    def cancel(self, generation: int) -> None:
        for executor in self._live():
            executor.cancel(generation)
        for key in [k for k in self._owner if k[0] == generation]:
            self._outstanding[self._owner.pop(key)] -= 1
        self._cancel_handover(generation)
        self._pieces = {key for key in self._pieces if key[0] != generation}

    def set_window_share(self, tasks: int) -> None:
        self._window_share = tasks
        for executor in self._live():
            executor.set_window_share(tasks)

    def worker_pids(self) -> list[int]:
        return self.processes.worker_pids() if self.winner != "thread" else []

    def wait_ready(self, timeout: float | None = None) -> bool:
        return all(e.wait_ready(timeout) for e in self._live())

    def grow(self, workers: int) -> bool:
        """Only once the trial is over: the winner adds workers (the measurements compare equal worker counts)."""
        if self.winner is None or not self._winning().grow(workers):
            return False
        self.workers = workers
        if self.winner == "thread":
            self._watch_grown(workers)
        return True

    @property
    def workers_elsewhere(self) -> bool:
        """Processes won, and no thread task is out any more (threads still running need the GIL)."""
        return self.winner == "process" and self.steady

    def batch_room(self) -> int | None:
        """The process workers' bound on batches in flight, once they are started (decided or not)."""
        return self.processes.batch_room() if self._processes_started and self.winner != "thread" else None

    def shrink(self, workers: int) -> bool:
        """Once the trial is over: the winner lets workers go, where it can (threads)."""
        if self.winner is None or not self._winning().shrink(workers):
            return False
        self.workers = workers
        self._grown = None
        return True

    def close(self) -> None:
        self._switch.give_back()
        for executor in (self.threads, self.processes, self._early, self._parked):
            if executor is not None:
                executor.close()

    # --------------------------------------------------------------- the trial
    def _reset_measures(self) -> None:
        """Empty measures of both backends (a trial, or one again), each pool credited at most the cores it could use."""
        usable, span = min(self.workers, self.cores), self.policy.evidence_span
        self._measure = {self.threads: Measure(self.workers, usable, span), self.processes: Measure(self.workers, usable, span)}
        self._first_tasks = Measure(self.workers, usable, span)  # every process task, cold ones too: a lower bound on their rate

    def _measure_anew(self) -> None:
        """A trial run again: empty measures, the threads' bound measured again, neither backend measured alone yet."""
        self._reset_measures()
        self._thread_rows = self._thread_cpu = 0.0
        self._thread_span, self._thread_tasks = 0.0, 0
        self._thread_cpu_wait = 0.0
        self._alone_from = self._threads_alone_from = None

    def _start_on(self, remembered: Remembered) -> None:
        """Start on the verdict of an earlier run's trial (`feedline.engine._remembered`): the winner at once, no trial.

        ``threads`` is then the winner's pool (all of it) or a `NotStarted`
        stand-in for it. The rate it won with is the drift check's
        reference, so a winner that no longer delivers runs the trial again
        (`_try_again`), the loser started for it.
        """
        if remembered.winner == "process":
            self._processes_started = True
            self.phase = Phase.MEASURING_PROCESSES
            self._use_processes(self._make_processes())  # a failure to start raises: the caller runs a trial instead
        self.rates = dict(remembered.rates)
        self._settle(remembered.winner, remembered.describe(), measured=False)
        self._decided_rate = remembered.per_worker

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
        return self.processes if self.phase is Phase.MEASURING_PROCESSES else self.threads

    def _collect(self, executor: Executor, events: list) -> list:
        if executor is self.threads:
            self._thread_results_in(events)
        elif events:
            events = self._rerun_without_shared_memory(events)
        kept = []
        for event in events:
            if self._owner.pop(event.key, None) is not None:
                self._outstanding[executor] -= 1
            result = event.result
            piece = event.key in self._pieces
            self._pieces.discard(event.key)
            if self.winner is None and result.error is None:
                self._observe(executor, result, piece)
            elif result.error is None and executor is self._winning():
                self._watch_winner(executor, result)
            if executor is self.threads:
                result.worker += self.processes.workers  # threads have their own rows in traces
            if event.key in self._partials:
                result = self._join_partial(executor, event.key, result)
                if result is None:
                    continue  # it runs again whole
                event = Event(event.key, result)
            kept.append(event)
        events = kept
        if self.winner is None:
            self._advance()
        else:
            self._retry_if_due()
        if self.winner is None and not any(self._outstanding.values()):
            # Nothing in flight (an epoch too short for a verdict is over): nothing to judge until the next
            # task, and a pipeline kept but not iterated must not keep the whole process's interval short.
            self._switch.give_back()
        self._close_idle_loser()
        return events

    def _observe(self, executor: Executor, result, piece: bool = False) -> None:
        """Count ``result`` (a ``piece`` of one of the epoch's last batches or a whole task) in the trial's measures.

        Threads measured alone leave pieces out: they ran beside fewer busy
        threads than the pool, and would claim cores one GIL does not give them.
        """
        started = result.span[0]
        if executor is self.threads:
            self._thread_rows += result.rows
            self._thread_cpu += result.cpu
            self._thread_span += max(result.span[1] - started, 1e-9)
            self._thread_cpu_wait += result.cpu_wait
            self._thread_tasks += 1
            if self._threads_alone_from is not None and started >= self._threads_alone_from and not piece:
                self._measure[self.threads].add(result)
            return
        self._first_tasks.add(result)
        if result.worker not in self._warmed:
            self._warmed.add(result.worker)  # its warm-up: left out
            return
        if self._alone_from is not None and started >= self._alone_from:
            self._measure[self.processes].add(result)
        elif not self._abandoned and result.rows:
            rate = result.rows / max(result.span[1] - started, 1e-9)
            running = self.threads.running_rates()
            if running and self.policy.sure_ratio * max(running) < rate:
                self._abandoned = True
                self._hand_over_after([], self.threads.abandon_running())

    def _observations(self, **judged) -> Observations:
        """What the model reads now: the threads' tasks, the verdict on the GIL, the measures, and ``judged``'s stretches."""
        return Observations(
            self.phase, cores=self.cores, pool=self.workers, threads=self.threads.workers,
            thread_rows=self._thread_rows, thread_cpu=self._thread_cpu, thread_span=self._thread_span,
            thread_wanted=self._thread_cpu + self._thread_cpu_wait, thread_tasks=self._thread_tasks,
            io_shortcut=self._io_shortcut, cores_kept=self._cores_kept, judged=self._judged,
            processes=self._measure[self.processes].measured(), first_tasks=self._first_tasks.measured(),
            threads_alone=self._measure[self.threads].measured(), **judged)

    def _advance(self) -> None:
        """After each result: the processes alone from their first task past the threads' last, then the model's verdict."""
        now = self.clock.perf_counter()
        if self.phase.processes_up and self._alone_from is None and not self._outstanding[self.threads]:
            self._alone_from = now  # the processes have the machine to themselves from here
            self._switch.give_back()
        if self.phase is Phase.MEASURING_THREADS and self._threads_alone_from is None and not self._outstanding[self.processes]:
            self._threads_alone_from = now
        verdict = decide(self._observations(alone=self._alone_stretch(now)), self.policy)
        if verdict.action is Action.MEASURE_THREADS:
            self.phase = Phase.MEASURING_THREADS  # threads might win: measure them alone, every one of them
            self._widen()
            if not self._outstanding[self.processes]:
                self._threads_alone_from = now
        elif verdict.settles:
            noted = self.phase is Phase.MEASURING_PROCESSES and verdict.action is Action.PROCESSES
            self._carry_out(verdict, now, f"{self._cores_note()}{verdict.why}" if noted else verdict.why)

    def _carry_out(self, verdict: Verdict, now: float, why: str) -> None:
        """Settle on ``verdict``'s winner, with its rates and ``why`` in the decision."""
        self.rates = dict(verdict.rates)
        self.decided_after = now - self._started
        self._settle("thread" if verdict.action is Action.THREADS else "process", why)

    def _thread_bound(self) -> float:
        """Samples/s the threads could deliver at most (`feedline.engine.choice.predict`; 0: unknown)."""
        return predict(self._observations()).threads_bound

    def _settle(self, winner: str, note: str, measured: bool = True) -> None:
        """``winner`` keeps the work from now on; a ``measured`` verdict (not a failure to start) is passed to ``on_verdict``."""
        if self.trials > 1:
            confirmed = winner == self._previous_winner
            note = f"tried again after {self._retry_reason}: {note}"
            self._retrial_after = self._retrial_after * 2 if confirmed else self.policy.watch.retrial_after
        self.winner, self._verdict_note, self.phase = winner, note, Phase.SETTLED
        self._stop_starting()
        if (winner == "process" and self._outstanding[self.threads]
                and self.rates.get("process", 0.0) >= self.policy.sure_ratio * self.rates.get("thread", math.inf)):
            # threads measured alone hold the next tasks, at a fraction of the processes' speed: those move now
            self._hand_over_after(self.threads.take_queued(), self.threads.abandon_running())
        if winner == "thread":
            self._widen()  # threads that won on I/O as scouts: the whole pool
        self._settled_at = self.clock.perf_counter()
        self._decided_rate = self.rates.get(winner, 0.0) / max(1, self._measure[self._winning()].workers)
        if measured and self._on_verdict is not None:
            trouble = self._on_verdict(winner, dict(self.rates), self._decided_rate, note, self.workers)
            if trouble:
                self._verdict_note += f"; {trouble}"
        self._drift = Drift(self.policy)
        self.threads.watch_progress(False)
        self._switch.give_back()
        self._close_idle_loser()

    def _close_idle_loser(self) -> None:
        if self.winner is None:
            return
        loser = self.processes if self.winner == "thread" else self.threads
        if not self._outstanding[loser] and loser not in self._closed:
            self._closed.add(loser)
            loser.close()  # its memory and (for processes) its workers go now
