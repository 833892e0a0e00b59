"""The automatic backend choice, decided on measured throughput: threads that keep the cores busy at once, else processes first.

Every backend gives the same batches, so the engine can switch mid-epoch
without changing the output. `BackendTrial` is an `Executor` over a thread
pool and process workers: threads take the first tasks at once and their
CPU clocks are read side by side (`_judge_gil`); threads that keep the
cores busy keep the work and no process starts; otherwise the process
workers start (the fork server at the first sign of the GIL, the workers
before the verdict on a sign borne out), take the tasks over earliest
first, and are measured alone against the most the threads could reach
(`_thread_bound`), or against threads measured alone (`_decide`). After the
decision the winner's rate is watched (`_Drift`), and a verdict is passed
to ``on_verdict`` to be remembered (`feedline.engine._remembered`); a run
that starts on a remembered verdict builds the trial settled (`_start_on`).
Both rates and the reason are in ``stats().decision`` and ``stats().trial``.

The whole protocol, in the order it runs, with the measurement behind each
constant below: docs/automatic_choice.md.
"""

from __future__ import annotations

import dataclasses
import math
import time

from .._errors import SharedMemoryFull
from .._switch_interval import SwitchHold
from ..backends import Event, Executor, warm_up, warmed_up, warming_up
from ..worker import Result
from ._imports import imports_seen
from ._remembered import Remembered
from ._tail import join

__all__ = ["GIL_LIMIT", "GIL_SIGN", "MIN_SPAN", "NEAR_BOUND", "PROCESS_MARGIN", "BackendTrial", "NotStarted", "first_threads"]

MIN_SPAN = 0.05  # seconds of measured work per worker, at least: short tasks are noisy
PROCESS_MARGIN = 1.1  # processes must deliver this much more than measured threads: threads copy no batch and hold no memory per worker
NEAR_BOUND = 0.85  # processes delivering this share of the threads' upper bound win without a thread phase ...
FAR_PAST_BOUND = 2.0  # ... and from their first tasks, cold ones too, at this multiple of it (threads the GIL held back) ...
FEW_TASKS = 4  # ... once this many are in (or one per worker, if fewer), not a warm task per worker (`_far_past_bound`)
GIL_SIGN = 0.65  # ... if the threads kept under this share of their usable cores busy side by side (else: PROCESS_MARGIN of it)
ABANDON_RATIO = 2.0  # a warm process worker this many times faster than every running thread task: those tasks move over
IO_SHARE = 0.2  # thread tasks using less than this share of a core while they run wait on I/O: threads win at once ...
IO_TOGETHER = 0.5  # ... if all the threads together use less than this much of a core too (else it may be the GIL's share)
EVIDENCE_SPAN = 0.05  # seconds every thread must stay busy side by side before `KEEP_CORES` is judged ...
EARLY_SPAN = 0.02  # ... or only this long, to start the process workers, when the threads kept under `EARLY_SHARE` of their
EARLY_SHARE = 0.6  # cores busy, each thread's first sample done before the stretch, and they began `EARLY_SAMPLES`
EARLY_SAMPLES = 2  # samples in it for each of up to `EARLY_THREADS` threads (not each of all: sixteen threads that hold
EARLY_THREADS = 2  # the GIL begin 1/16 of the samples each; two each took them 0.28 s to show on a 16-core machine)
SERVER_SPAN = 0.01  # seconds of such a stretch that start the fork server's imports before the verdict (`_start_server_if_held`); twice: the workers
IDLE_SHARE = 0.05  # ... none of them waiting for tasks more than this share of the stretch
KEEP_CORES = 0.9  # threads keeping this share of the cores they could use busy (~1 / PROCESS_MARGIN) keep the work at once
START_PROCESSES_AFTER = 0.3  # seconds: no verdict on the GIL by then (threads kept waiting for tasks; Windows: at once): start the process workers anyway
DRIFT_RATIO = 0.6  # the winner's samples/s per worker fell below this share of what won it the trial: try both again
DRIFT_WINDOWS = 2  # ... for this many windows in a row (a window: 4 tasks per worker, at least 8)
RETRIAL_AFTER = 10.0  # seconds after a decision before it may be revisited; doubled each time a trial confirms the winner
GIL_LIMIT = (0.8, 1.25)  # cores that threads grown for I/O keep busy between them when the GIL is what limits them
KEEP_RUNNING = 1  # threads held back by the GIL that go on while process workers start (the rest wait: `_start_processes`) ...
PAUSE_ALL_CORES = 8  # ... none on machines with this many cores: the workers came up in 0.02-0.03 s instead of 0.29-0.44 s (16 cores)
PAUSE_LIMIT = 2.0  # ... for at most this many seconds: workers slower to come up than that do not stall the threads' tasks
HANDOVER_WAIT = 0.05  # seconds the queued tasks wait for the paused threads' tasks to come back, so that those go first
GIVE_BACK_SHARE = 2 / 3  # threads judged to keep at most this share of their cores busy give back, as the workers come up, ...
GIVE_BACK_DONE = 0.25  # ... the running tasks that cannot be split with under this share of their samples begun (`_check_ready`)
EARLY_WORKERS_SHARE = 0.85  # threads keeping under this share of their cores busy start the workers early (`_start_workers_if_held`)
JUDGE_POLL = 0.002  # seconds between looks at the threads' clocks while the GIL is judged (was 0.01: verdicts 0.02 s later)
ROOM_BESIDE_SERVER = 2  # cores beyond the threads judged (the fork server's imports, the consumer's thread) to judge them meanwhile
CONNECTING_SKIPPED = 0.08  # seconds after the server is up that held workers connecting leave only the plain verdict, at most
IMPORTS_SKIPPED = 0.15  # seconds of first-sample imports left out of the stretches judged, at most (`import cv2`: ~0.1 s; `_judge_gil`)
SCOUT_THREADS = 4  # on `PAUSE_ALL_CORES` cores or more, or of more threads, the trial judges this many first (`first_threads`)
CLOSE_CALL_SPAN = 0.15  # seconds a stretch must last to start processes where the threads kept `EARLY_WORKERS_SHARE` or more (`_close_call`)


def first_threads(workers: int, cores: int) -> int:
    """Threads the automatic choice starts with: all, or `SCOUT_THREADS` where more are asked for or cores are many.

    Threads that hold the GIL share it: sixteen of them each finish their
    first sample only after ~16 samples' worth of Python, so a verdict
    that waits for every thread to be past its first sample came ~0.2 s
    into the epoch on a 16-core machine. Few threads show it as plainly
    (four such threads keep ~1 of their 4 cores busy) in a fraction of the
    time, and what few threads cannot keep busy, more cannot either; but
    few threads that keep their cores busy say nothing about sixteen, so
    then the whole pool starts and is judged again (`BackendTrial._widen`).
    The same where ``map(workers=...)`` asks for more threads than
    `SCOUT_THREADS` on fewer cores: 16 or 64 GIL-bound threads on 2 cores
    gave no verdict within `START_PROCESSES_AFTER`, kept running beside the
    starting workers, and the hand-over waited 2.2 s for 64 of them (first
    epochs 0.93 and 1.63 s against 0.76 and 0.90 s for process workers set
    by hand; with scouts 0.83 and 0.95 s).
    """
    return min(workers, SCOUT_THREADS) if cores >= PAUSE_ALL_CORES or workers > SCOUT_THREADS else workers


def _busy_with_one_gil(threads: int, held: float) -> float:
    """Cores ``threads`` keep busy when each holds the GIL ``held`` of its working time, on exponential holds.

    One GIL is a single server with a finite population (the machine
    repairman queue): a thread works free of the GIL for a while, then
    waits for it and holds it. The GIL is busy ``1 - p0`` of the time,
    ``p0`` the chance that no thread holds or waits for it; each thread's
    cycle is one unit of CPU, so the threads keep ``(1 - p0) / held`` cores
    busy, never more than ``threads`` and never more than ``1 / held``.
    Summed in logarithms: the terms overflow floats past ~170 threads.
    """
    ratio = held / (1.0 - held)
    logs, log_term = [0.0], 0.0
    for k in range(1, threads + 1):
        log_term += math.log(threads - k + 1) + math.log(ratio)
        logs.append(log_term)
    top = max(logs)
    idle = math.exp(-top) / sum(math.exp(x - top) for x in logs)
    return (1.0 - idle) / held


def grown_busy(judged: int, kept: float, grown: int) -> float:
    """Cores ``grown`` threads could keep busy at most, where ``judged`` of them kept ``kept`` busy side by side.

    Scouts (`first_threads`) that lose a little of their cores to the GIL
    say how long each holds it, and sixteen threads queue for it far more
    than four: the GIL share that costs four threads 7 % of their cores
    caps sixteen at ~7 of 16 (the suite's jpeg workload on 16 cores: four
    kept 3.25-3.8 of 4, sixteen 4.7-6.5 of 16). The hold is solved from the
    scouts with the queue of `_busy_with_one_gil` (exponential holds queue
    more than steady ones, so the hold it finds is the shortest that fits:
    an upper bound on what the grown pool keeps busy), and the result is
    never above the scouts' own share of ``grown`` cores.
    """
    share = min(1.0, kept / judged) * grown
    if judged >= grown or kept >= judged * (1.0 - 1e-6):
        return share
    if kept <= 1.0:
        return min(share, 1.0)  # one GIL's worth: many threads keep no more busy
    low, high = 1e-9, 1.0 - 1e-9  # the hold: busy falls as it grows
    for _ in range(60):
        middle = (low + high) / 2
        if _busy_with_one_gil(judged, middle) > kept:
            low = middle
        else:
            high = middle
    return min(share, _busy_with_one_gil(grown, low))


def _waited_for_tasks(baseline: tuple, now: float, clocks: list) -> bool:
    """A thread waited for tasks more than `IDLE_SHARE` of the stretch since ``baseline`` (or the pool changed): not side by side."""
    began, _, before = baseline
    return len(before) != len(clocks) or any(now_[2] - was[2] > IDLE_SHARE * (now - began) for now_, was in zip(clocks, before))


class _Measure:
    """Tasks one backend ran alone: samples per second and cores kept busy, for all its workers.

    Per task, not per wall-clock window: a worker's rate is rows over the
    task's span, and the pool's is that times the number of workers (they
    all have work while the consumer waits, which is when it matters). So
    it does not matter which worker ran which measured task. But tasks
    that ran beside fewer busy workers than the pool (threads just widened
    to it, or the epoch's last tasks cut into pieces that not every worker
    got) went faster than a full pool's, and times the workers claimed more
    cores than there are: sixteen GIL-bound threads on 2 cores measured on
    one-row pieces "kept 2.6 of 2 cores busy", 360 samples/s against 345
    for processes, and threads won (1 first run in ~12). So the pool is
    credited at most the ``cores`` it runs on (`per_second`); GIL-bound
    threads can still claim the two cores where they use one.
    """

    def __init__(self, workers: int, cores: int):
        self.workers, self.cores = workers, cores
        self.rows = self.span = self.cpu = 0.0
        self.tasks = 0

    def add(self, result) -> None:
        if self.done:
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
        return self.workers * self.rows / self.span * min(1.0, self.cores / max(self.claimed_cores, 1e-9))

    @property
    def claimed_cores(self) -> float:
        """The cores the measured tasks' CPU, times the workers, say the pool kept busy (more than it has: see above)."""
        return self.workers * self.cpu / self.span

    @property
    def cores_busy(self) -> float:
        return min(self.claimed_cores, self.cores)


class _Drift:
    """The winner's samples/s per worker over windows of tasks after the decision, against the rate that won."""

    def __init__(self):
        self.rows = self.span = 0.0
        self.tasks = 0
        self.low = 0  # windows in a row below DRIFT_RATIO of the decided rate
        self.last = 0.0  # the last full window's rate

    def add(self, result) -> None:
        start, end = result.span
        self.rows += result.rows
        self.span += max(end - start, 1e-9)
        self.tasks += 1

    def drifted(self, decided: float, workers: int) -> bool:
        """True once `DRIFT_WINDOWS` full windows in a row ran below `DRIFT_RATIO` of ``decided``."""
        if self.tasks < max(8, 4 * workers) or self.span < MIN_SPAN * workers:
            return False
        self.last = self.rows / self.span
        self.low = self.low + 1 if decided > 0 and self.last < DRIFT_RATIO * decided else 0
        self.rows = self.span = 0.0
        self.tasks = 0
        return self.low >= DRIFT_WINDOWS

    def describe(self, decided: float) -> str:
        return f"{self.last:,.0f} samples/s per worker, was {decided:,.0f}"


class NotStarted(Executor):
    """A backend `BackendTrial` has not started: the process workers before it starts them, or the threads of a
    run that starts on a remembered verdict for processes. No tasks, nothing to wait for."""

    restarts = 0

    def __init__(self, workers: int, name: str = "process", cores: int = 1):
        self.workers, self.name, self.cores = workers, name, cores

    def submit(self, key, task, affinity=None):
        raise RuntimeError("feedline: a task went to process workers that were never started (a bug; please report it)")

    def wait(self, timeout):
        return []

    def outstanding(self) -> int:
        return 0

    def cancel(self, generation: int) -> None:
        pass

    def set_window_share(self, tasks) -> None:
        pass  # `BackendTrial` passes it on once the workers start

    def wait_ready(self, timeout=None) -> bool:
        return True

    def worker_pids(self) -> list[int]:
        return []

    def watch_progress(self, on: bool) -> None:
        pass

    def resume(self, give_back: bool = False) -> list:
        return []

    def take_returned(self) -> list:
        return []

    def close(self) -> None:
        pass


class BackendTrial(Executor):
    """Threads at once, processes if the threads hold the GIL, threads again only if they could win (docs/automatic_choice.md).

    ``make_processes()`` starts the process executor (`_judge_gil` decides
    when); ``restart(kind,
    workers)`` starts a fresh one of either kind for a trial run again
    (None: never).
    """

    def __init__(self, threads: Executor, make_processes, workers: int, restart=None,
                 remembered: Remembered | None = None, on_verdict=None, park=None):
        self.threads, self.processes = threads, NotStarted(workers)
        self._park = park  # park() starts the process workers held (`Executor.release`): see `_park_workers`
        self._parked: Executor | None = None
        self._on_verdict = on_verdict  # on_verdict(winner, rates, samples/s per worker, why, workers) -> None or why not kept
        self._make_processes = make_processes
        self._processes_started = False
        self.workers = workers
        self._restart = restart
        self.trials = 1
        self._retrial_after = RETRIAL_AFTER
        self._drift = _Drift()
        self._decided_rate = 0.0  # the winner's samples/s per worker when it won
        self._settled_at = 0.0
        self._previous_winner: str | None = None
        self._retry_reason = ""  # why the trial runs again, for the decision text
        self._grown: _Measure | None = None  # the thread winner's tasks since it grew: does the GIL limit them?
        self._grown_from = 0.0
        self._gil_capped = ""  # the grown threads hit the GIL: run the trial again once the loser's tasks are back
        self._io_shortcut = True  # threads that wait on I/O may win at once (not after they met the GIL)
        self.cores = threads.cores
        self.note = ""
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
        self._baseline: tuple | None = None  # (when, this process's CPU time, the threads' clocks) as a stretch began
        self._warm_baseline: tuple | None = None  # ... and as every thread was past its first sample (the early verdict's stretch)
        self._judging_from = time.perf_counter()  # the verdict is due `START_PROCESSES_AFTER` after this
        self._modules = imports_seen()[0]  # modules imported as of the stretches judged: one that imports is cold
        self._imports_from: float | None = None  # when a first sample was first seen importing
        self._server_early = ""  # "importing", then "up": `_start_server_if_held` started the fork server
        self._server_up_at = 0.0  # ... up then
        self._cores_kept: float | None = None  # cores the threads kept busy side by side, once known ...
        self._judged = threads.workers  # ... by this many threads (scouts: fewer than the pool, `first_threads`)
        self._cores_others = 0.0  # ... and cores the consumer's thread used meanwhile
        self._ready = False  # every process worker is up: new tasks go to processes from here
        self._alone_from = None  # processes measured from here (the threads' last task is back)
        self._threads_again = False  # the bound did not settle it: threads are measured alone
        self._threads_alone_from = None  # threads measured from here (the processes' last task is back)
        self._alone_baseline: tuple | None = None  # (when, consumer CPU, the threads' clocks) as every thread was busy, measured alone
        self._abandoned = False  # the threads' running tasks were taken back once
        self._handover: list = []  # thread tasks for the processes, sent earliest first with those given back ...
        self._due: set = set()  # ... once the thread tasks with these keys are back (given back, or done) ...
        self._handover_by = 0.0  # ... or by then
        self._held: list = []  # tasks for the processes submitted meanwhile: sent after the handover
        self._partials: dict = {}  # key -> (a thread's result for a task's first rows, their indices, the rest's, where)
        self._pieces: set = set()  # keys of pieces of the epoch's last batches sent while undecided (`_observe`)
        self._early: Executor | None = None  # process workers started at the first sign of the GIL (`_start_workers_if_held`) ...
        self.early_workers_at: float | None = None  # ... this many seconds into the trial (None: not early)
        self._sign_mark: tuple | None = None  # where the stretch that must bear out the workers' first sign began
        self._drained: list | None = None  # tasks kept from threads while the workers start (`_drain_threads`), else None
        self._waits_at: dict = {}  # a stretch's start -> the threads' `runnable_waits` then (`_runnable_share`)
        self._sent: dict = {}  # key -> task, for tasks on process workers (`_rerun_without_shared_memory`)
        self._paused_at: float | None = None  # when threads were paused for the process workers' start
        self._pause_when_up = False  # ... to be paused once the fork server is up (it was importing: `_start_processes`)
        self._drain_when_up = False  # ... and drained then (its workers waited for a zygote's imports)
        self._closed: set = set()
        self._started = time.perf_counter()
        self.decided_after: float | None = None  # seconds from the trial's start to its decision
        self._switch = SwitchHold()
        self._window_share: int | None = None  # the tasks each worker may hold, passed on to the workers once started
        if remembered is not None:
            self._start_on(remembered)
            return
        self._switch.take()  # from the start: GIL-bound threads otherwise hold the consumer's judging back 5 ms a step
        threads.watch_progress(True)

    # -------------------------------------------------------- the interface
    @property
    def name(self) -> str:
        if self.winner:
            return self.winner
        return "process" if self._ready and not self._threads_again else "thread"

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
        if target is self.processes and self._due:
            self._held.append((key, task))  # behind the earlier tasks the threads give back (`_move_returned`)
            return
        if target is self.processes:
            self._to_processes(key, task)
        else:
            target.submit(key, task, affinity)

    def wait(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_ready()
            if self._handing_over:
                self._move_returned()
            busy = [e for e in self._live() if self._outstanding[e]]
            if not busy:
                return []
            if len(busy) == 1 and (self._ready or self.winner is not None):
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                return self._collect(busy[0], busy[0].wait(left))
            # Both hold tasks, or the process workers are starting: poll briefly, so their start is seen at once.
            for executor in busy:
                events = self._collect(executor, executor.wait(0.002 if len(busy) > 1 else self._poll()))
                if events:
                    return events
            if deadline is not None and time.monotonic() >= deadline:
                return []

    def _poll(self) -> float:
        """Seconds to wait for the one busy executor before looking again: `JUDGE_POLL` while the GIL is judged."""
        return JUDGE_POLL if not self._processes_started and self.winner is None else 0.01

    def outstanding(self) -> int:
        return sum(e.outstanding() for e in self._live())

    def cancel(self, generation: int) -> None:
        for executor in self._live():
            executor.cancel(generation)
        for key in [k for k in self._owner if k[0] == generation]:
            self._outstanding[self._owner.pop(key)] -= 1
        self._due = {key for key in self._due if key[0] != generation}  # cancelled tasks give no result to wait for
        self._partials = {key: kept for key, kept in self._partials.items() if key[0] != generation}
        self._sent = {key: task for key, task in self._sent.items() if key[0] != generation}
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
            self._grown, self._grown_from = _Measure(workers, min(workers, self.cores)), time.perf_counter()
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

    def _reset_measures(self) -> None:
        """Empty measures of both backends (a trial, or one again), each pool credited at most the cores it could use."""
        usable = min(self.workers, self.cores)
        self._measure = {self.threads: _Measure(self.workers, usable), self.processes: _Measure(self.workers, usable)}
        self._first_tasks = _Measure(self.workers, usable)  # every process task, cold ones too: a lower bound on their rate

    def _start_on(self, remembered: Remembered) -> None:
        """Start on the verdict of an earlier run's trial (`feedline.engine._remembered`): the winner at once, no trial.

        ``threads`` is then the winner's pool (all of it) or a `NotStarted`
        stand-in for it. The rate it won with is the drift check's
        reference, so a winner that no longer delivers runs the trial again
        (`_try_again`), the loser started for it.
        """
        if remembered.winner == "process":
            self._processes_started = self._ready = True
            self._use_processes(self._make_processes())  # a failure to start raises: the caller runs a trial instead
        self.rates = dict(remembered.rates)
        self._settle(remembered.winner, remembered.describe(), measured=False)
        self._decided_rate = remembered.per_worker

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
        if not self._ready or self._threads_again:
            return self.threads
        return self.processes

    def _check_ready(self) -> None:
        """Once every process worker is up: move the tasks still queued for threads to them.

        Paused threads give their tasks back, and so do running threads the
        GIL held back to `GIVE_BACK_SHARE` of their cores, for tasks begun
        under `GIVE_BACK_DONE`: a thread that finished a task just before
        the workers came up had taken the next from its queue, and ran it at
        a fraction of the processes' speed while they waited (audio, 2
        cores: the threads' last tasks back 0.24 s in instead of ~0.11 s;
        epochs +1-8 %, in four alternating pairs of eight). A task that can
        be split (`feedline.worker.splittable`: one batch of the default
        collate, no ``map_batch`` in the worker) is given back however far
        along, keeping the rows done: only the rest runs on the processes,
        and the two parts are joined into the batch (`_join_partial`). Left
        to finish, such tasks ran beside the workers at a fraction of their
        speed (story 4, 2 cores: the workers' first tasks 0.22-0.24 s instead
        of 0.15; automatic 0.905-0.925 of processes by hand, 0.955-0.96
        split, two runs of 10 alternating rounds). One that cannot be split
        runs to its end when far along: what the thread did would be lost
        (gil: tasks ~45 % done as the workers came up, -2 to -6 % when they
        were given back whole).
        """
        if self._ready or self.winner is not None:
            return
        self._judge_gil()
        if not self._processes_started or self.winner is not None:
            return
        if self._pause_when_up and not warming_up() and self.processes.workers_forked():
            self._pause_threads()  # the server is up and the workers forked (`_start_processes`)
            if self._drain_when_up:
                self._drain_when_up = False
                self._drain_threads()
        try:
            self._ready = self.processes.wait_ready(0)
        except Exception as exc:  # the workers cannot start here: threads it is, and the report says why
            self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads", measured=False)
            return
        if not self._ready and self._paused_at is not None and time.perf_counter() - self._paused_at > PAUSE_LIMIT:
            self._paused_at = None
            self.threads.resume()  # the paused threads hold tasks the consumer may be waiting for ...
            self._undrain()  # ... and so may the tasks kept from them
        if self._ready:
            self._paused_at = None
            queued, self._drained = (self._drained or []) + self.threads.take_queued(), None
            due = self.threads.resume(give_back=True)  # paused tasks come back: they go first, in key order
            if self._cores_kept is not None and self._cores_kept <= GIVE_BACK_SHARE * self._judged_cores():
                # so do running ones not far along, where the processes will be much faster (`GIVE_BACK_SHARE`)
                self._abandoned = True
                due += self.threads.abandon_running(done_under=GIVE_BACK_DONE)
            self._hand_over_after(queued, due)

    @property
    def _handing_over(self) -> bool:
        """Thread tasks are on their way to the processes (`_move_returned` sends them, then the held ones)."""
        return bool(self._due or self._handover or self._held)

    def _hand_over_after(self, tasks, due) -> None:
        """``tasks`` go to the processes with the thread tasks ``due`` back, earliest first (`_move_returned`)."""
        self._handover += tasks
        self._due |= set(due)
        self._handover_by = time.perf_counter() + HANDOVER_WAIT
        self._move_returned()

    def _hand_over(self, tasks) -> None:
        """Submit ``(key, task)`` pairs the threads hold no more to the processes, earliest first."""
        for key, task in sorted(tasks, key=lambda pair: pair[0]):
            if self._owner.get(key) is self.threads:  # not cancelled meanwhile
                self._owner[key] = self.processes
                self._outstanding[self.threads] -= 1
                self._outstanding[self.processes] += 1
                self._to_processes(key, task)

    def _to_processes(self, key, task) -> None:
        self._sent[key] = task  # until its result is in: run on threads instead if shared memory is full
        self.processes.submit(key, task)

    def _collect(self, executor: Executor, events: list) -> list:
        if executor is self.threads:
            self._due.difference_update(event.key for event in events)  # due, but done before the next sample
            self._move_returned()
        elif events:
            events = self._rerun_without_shared_memory(events)
        for i, event in enumerate(events):
            if self._owner.pop(event.key, None) is not None:
                self._outstanding[executor] -= 1
            result = event.result
            piece = event.key in self._pieces
            self._pieces.discard(event.key)
            if self.winner is None and result.error is None:
                self._observe(executor, result, piece)
            elif result.error is None and executor is self._winning():
                self._drift.add(result)
                self._watch_grown_threads(executor, result)
            if executor is self.threads:
                result.worker += self.processes.workers  # threads have their own rows in traces
            if event.key in self._partials:
                events[i] = Event(event.key, self._join_partial(event.key, result))
        if self.winner is None:
            self._advance()
        elif self._gil_capped and self._restart is not None:
            self._try_again(self._gil_capped, io_shortcut=False)
        elif self._drift.drifted(self._decided_rate, self.workers) and self._may_retry():
            self._try_again(f"the rate fell ({self._drift.describe(self._decided_rate)})")
        if self.winner is None and not any(self._outstanding.values()):
            # Nothing in flight (an epoch too short for a verdict is over): nothing to judge until the next
            # task, and a pipeline kept but not iterated must not keep the whole process's interval short.
            self._switch.give_back()
        self._close_idle_loser()
        return events

    def _rerun_without_shared_memory(self, events: list) -> list:
        """Process tasks that found no room in shared memory run on threads, which keep the work from then on.

        Docker gives a container 64 MB of ``/dev/shm`` unless told
        otherwise; process workers hand every batch over there, threads
        need none. A full ``/dev/shm`` sends segments to the spill folder
        first (`feedline.transport._shm`); where that is off
        (``FEEDLINE_SPILL_DIR=0``) or full too, under the automatic choice
        it is a reason to use threads (the decision says so), not an error;
        set ``backend="process"`` by hand, it is `SharedMemoryFull`.
        """
        kept = []
        for event in events:
            task = self._sent.pop(event.key, None)
            error = event.result.error
            if task is None or error is None or error.type != SharedMemoryFull.__name__ or not self._threads_to_take_over():
                kept.append(event)
                continue
            if self.winner != "thread":
                why = (f"process workers cannot hand batches over: {error.message.split('. ')[0]}: threads "
                       "(give the container more shared memory for processes)")
                self._settle("thread", f"{self.note}; then {why}" if self.winner else why, measured=False)
                self._restart = None  # no trial again (drift, grown threads meeting the GIL): processes cannot run here
            self._owner[event.key] = self.threads
            self._outstanding[self.processes] -= 1
            self._outstanding[self.threads] += 1
            self.threads.submit(event.key, task)
        return kept

    def _threads_to_take_over(self) -> bool:
        """Threads to take the work over: the pool, or one started now (a run started on a remembered process verdict); False: none."""
        if not isinstance(self.threads, NotStarted):
            return True
        if self._restart is None:
            return False
        waiting, self.threads = self.threads, self._restart("thread", self.workers)
        self._outstanding[self.threads] = self._outstanding.pop(waiting)
        self._measure[self.threads] = self._measure.pop(waiting)
        return True

    def _watch_grown_threads(self, executor: Executor, result) -> None:
        """Threads grown for I/O that keep `GIL_LIMIT` cores busy between them: the GIL limits them now."""
        grown = self._grown
        if grown is None or executor is not self.threads or result.span[0] < self._grown_from:
            return
        grown.add(result)
        if not grown.done:
            return
        self._grown = None  # judged once per growth
        low, high = GIL_LIMIT
        if self.cores >= 2 and low <= grown.cores_busy <= high:
            self._gil_capped = (f"{grown.workers} threads kept {grown.cores_busy:.2f} cores busy between them, the most "
                                f"the GIL lets Python use, with {self.cores} cores here")

    def _observe(self, executor: Executor, result, piece: bool = False) -> None:
        """Count ``result`` (a ``piece`` of one of the epoch's last batches or a whole task) in the trial's measures.

        Threads measured alone leave pieces out: a few rows each, handed to
        whichever thread is free, they ran beside fewer busy threads than
        the pool, and sixteen GIL-bound threads on 2 cores measured on them
        delivered 346-367 samples/s "on 2 of 2 cores" against 271-334 for
        processes, and won, where one GIL lets them use one core, half
        that (`_Measure`).
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
            self._settle_if_waiting_on_io()
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
            if running and ABANDON_RATIO * max(running) < rate:
                self._abandoned = True
                self._hand_over_after([], self.threads.abandon_running())

    def _join_partial(self, key, rest: Result) -> Result:
        """The batch of task ``key``: the rows a thread did before giving it back, then ``rest``'s (`_move_returned`).

        Joined as the epoch's last batches are from their pieces
        (`feedline.engine._tail.join`), so the batch is the one a single
        task would have made. The result keeps ``rest``'s span, worker and
        CPU (the thread's went to the threads' bound when it came back);
        the stage times are both parts'.
        """
        partial, done, rest_indices, where = self._partials.pop(key)
        joined = join([partial, rest], [done, rest_indices], where)
        joined.span, joined.worker, joined.cpu, joined.cpu_wait = rest.span, rest.worker, rest.cpu, rest.cpu_wait
        joined.transport = rest.transport
        return joined

    def _move_returned(self) -> None:
        """Tasks the threads gave back run on the processes; what the threads did of them counts for their bound.

        The tasks given back (paused or abandoned threads') are held with
        the queued ones until all are back (or `HANDOVER_WAIT` passed), and
        so are tasks submitted meanwhile (`_held`): the given-back ones are
        the earliest, the next batches among them, and the process workers
        take what they are sent in the order sent. Sent as they came, the
        queued tasks went first and the given-back ones waited a whole round
        of tasks behind them (16 workers on 2 cores: batch 3 at 2.2 s
        instead of 0.7 s).
        """
        for key, returned in self.threads.take_returned():
            self._thread_rows += returned.rows
            self._thread_cpu += returned.cpu
            task = returned.task
            if returned.partial is not None:  # its first rows are done: the rest runs on the processes (`_join_partial`)
                done, rest = task.indices[: returned.rows], task.indices[returned.rows :]
                self._partials[key] = (returned.partial, done, rest, returned.where)
                task = dataclasses.replace(task, indices=rest)
            self._handover.append((key, task))
            self._due.discard(key)
        if self._due and time.perf_counter() >= self._handover_by:
            self._due = set()  # one still running past the deadline is handed over when it comes back
        if self._due or not self._handing_over:
            return
        moving, self._handover = self._handover, []
        self._hand_over(moving)
        held, self._held = self._held, []
        for key, task in held:
            if self._owner.get(key) is self.processes:  # not cancelled meanwhile
                self._to_processes(key, task)

    def _advance(self) -> None:
        now = time.perf_counter()
        if self._ready and self._alone_from is None and not self._outstanding[self.threads]:
            self._alone_from = now  # the processes have the machine to themselves from here
            self._switch.give_back()
        processes = self._measure[self.processes]
        if not self._threads_again and self._far_past_bound(now):
            return
        if not self._threads_again and processes.done:
            bound = self._thread_bound()
            if bound and processes.per_second >= self._at_once_share() * bound:
                self.rates = {"thread": bound, "process": processes.per_second}
                self.decided_after = now - self._started
                self._settle("process", f"{self._cores_note()}processes {processes.per_second:,.0f} samples/s, "
                                        f"{processes.per_second / bound:.0%} of the most {self._usable} threads could reach "
                                        f"({bound:,.0f} samples/s at their CPU rate): processes")
                return
            self._threads_again = True  # threads might win: measure them alone, every one of them
            self._widen()
        if self._threads_again:
            if self._threads_alone_from is None and not self._outstanding[self.processes]:
                self._threads_alone_from = now
            if self._threads_alone_from is not None and self._threads_cannot_win(now):
                return
            if self._measure[self.threads].done:
                self._decide()

    def _far_past_bound(self, now: float) -> bool:
        """Processes whose first tasks already deliver `FAR_PAST_BOUND` times what threads the GIL held back could: processes, now.

        A measurement waits for a warm task per worker (`_Measure.done`,
        each worker's first left out), and on many cores an epoch may not
        hold that many: sixteen workers on 16 cores ran story 1's 12 tasks
        (the stories' epochs hold 12-32), so no trial decided, the report
        gave no verdict and no run was remembered, while the processes
        delivered 14-17 times the threads' bound on the suite's gil workload.
        Every process task counts here, the cold first ones and those beside
        the threads' last: both only slow the processes down, so their rate
        is a lower bound. Only for threads judged held back by the GIL (under
        `GIL_SIGN` of their cores busy): threads that kept their cores busy
        are measured, whose bound counts their own cold first tasks.
        """
        first = self._first_tasks
        if (first.tasks < min(self.workers, FEW_TASKS) or first.span < min(self.workers, FEW_TASKS) * MIN_SPAN
                or self._cores_kept is None or self._cores_kept >= GIL_SIGN * self._judged_cores()):
            return False
        bound = self._thread_bound()
        if not bound or first.per_second < FAR_PAST_BOUND * bound:
            return False
        self.rates = {"thread": bound, "process": first.per_second}
        self.decided_after = now - self._started
        self._settle("process", f"{self._cores_note()}processes' first {first.tasks} tasks {first.per_second:,.0f} "
                                f"samples/s, {first.per_second / bound:.0%} of the most {self._usable} threads could "
                                f"reach ({bound:,.0f} samples/s at their CPU rate): processes")
        return True

    def _threads_cannot_win(self, now: float) -> bool:
        """Threads measured alone that keep too few cores busy to come within `PROCESS_MARGIN` of the processes: processes, now.

        Threads deliver the cores they keep busy times their CPU rate (rows
        per CPU second of their tasks), so a stretch of `EVIDENCE_SPAN` with
        every thread busy says what they can reach long before their tasks
        are in. On 16 cores sixteen jpeg threads kept ~5.5 of 16 cores busy
        where four had kept 3.7 of 4; their tasks of 32 images took ~0.5 s
        each, and waiting for sixteen of them cost one epoch in three ~1.2 s
        (auto 1,582 samples/s against 2,789 by hand). Set once per stretch,
        as `_judge_gil` does; a thread that waited for tasks starts it again.
        """
        clocks = self.threads.side_by_side()
        if clocks is None or self._thread_cpu <= 0:
            return False
        if self._alone_baseline is None:
            if all(busy for busy, *_ in clocks):
                self._alone_baseline = (now, time.thread_time(), clocks)
            return False
        if _waited_for_tasks(self._alone_baseline, now, clocks):
            self._alone_baseline = None  # one waited for tasks meanwhile (or the pool changed): not side by side
            return False
        if now - self._alone_baseline[0] < EVIDENCE_SPAN:
            return False
        kept = self._stretch(self._alone_baseline, now, clocks)[1]
        reach = kept * self._thread_rows / self._thread_cpu
        processes = self._measure[self.processes].per_second
        if processes <= PROCESS_MARGIN * reach:
            return False  # threads may still win: measured to the end
        self.rates = {"thread": reach, "process": processes}
        self.decided_after = now - self._started
        self._settle("process", f"tried both: {len(clocks)} threads alone kept {kept:.1f} of {self._usable} cores busy, "
                                f"{reach:,.0f} samples/s at their CPU rate; processes {processes:,.0f} samples/s: processes")
        return True

    def _at_once_share(self) -> float:
        """The share of the threads' bound at which processes win without a thread phase (docs/automatic_choice.md, "Measuring and deciding")."""
        held_back = self._cores_kept is None or self._cores_kept < GIL_SIGN * self._judged_cores()  # no clocks: as if held back
        return NEAR_BOUND if held_back else PROCESS_MARGIN

    def _settle_if_waiting_on_io(self) -> None:
        """Thread tasks that use under `IO_SHARE` of a core while they run wait on I/O, not the GIL: threads, at once.

        A thread that holds the GIL uses a core while it runs (two of them:
        half a core each); one whose tasks mostly wait (files, the network)
        cannot be helped by processes, and measuring processes on such work
        took seconds while the worker count stayed at one per core. Many
        threads that hold the GIL also use little each (16 of them: 1/16 of
        a core, less than `IO_SHARE`), so the shortcut needs the threads
        together to use under `IO_TOGETHER` of a core as well: 16 threads
        of pure Python on a 16-core machine were taken for I/O, grown to
        113 and delivered 142 samples/s where 16 processes delivered 1,900
        (benchmarks/server_check.py on an H100 host). With 0.8 there, one
        epoch in three still grew them (to 128, then processes at 128):
        sixteen threads passing the GIL between sixteen cores use less
        than a core between them. The time the tasks waited for a CPU while
        runnable counts as use (Linux, `CpuWaitClock`): threads that other
        programs keep off the cores use as little CPU as threads that wait
        on files, but are not blocked (two GIL-bound threads beside eight
        programs spinning on 2 cores: 11-17 % of a core each, taken for I/O).
        """
        running = self.threads.workers  # (scouts: fewer than the pool)
        wanted = self._thread_cpu + self._thread_cpu_wait  # the CPU the tasks used or were runnable for
        if (self.winner is not None or not self._io_shortcut or self._thread_tasks < running
                or self._thread_span < running * MIN_SPAN or wanted >= IO_SHARE * self._thread_span):
            return
        share = wanted / self._thread_span
        if running * share >= IO_TOGETHER:
            return  # side by side they may use a core between them: the GIL's share, not I/O (judged by `_judge_gil`)
        self.rates = {"thread": self.workers * self._thread_rows / self._thread_span}
        self.decided_after = time.perf_counter() - self._started
        self._settle("thread", f"thread tasks used {share:.0%} of a core while they ran: they wait on I/O, "
                               "not on the GIL, so processes cannot do better: threads")

    def _judge_gil(self) -> None:
        """Start the process workers only if the threads cannot keep the cores busy; threads that can keep the work.

        Threads that hold the GIL for Python code run one at a time: two of
        them keep one core busy between them (measured 1.01-1.06 on the
        suite's gil workload; 1.5-1.7 for audio's dozens of small NumPy
        calls a sample). Threads that release it in C code (decoders,
        resizes, NumPy on large arrays) keep every core busy (1.81-1.99 of
        2 for jpeg, seg and store). The threads' CPU clocks are read at each
        poll: a stretch starts when every thread is busy and is judged after
        `EVIDENCE_SPAN` seconds, or after `EARLY_SPAN` when it is plain that
        the GIL holds them (under `EARLY_SHARE` of their cores busy, every
        thread past its first sample, whose imports and first calls can
        hold the GIL in any work, and `EARLY_SAMPLES` more each for up to
        `EARLY_THREADS` threads begun in it: on the suite's gil workload the
        processes then start at 0.05-0.08 s instead of 0.08-0.09 s) (a thread that waited for tasks more than
        `IDLE_SHARE` of it starts it again, and so does a fork server still
        importing: it takes a core meanwhile, unless the threads judged leave
        it one, `_room_beside_server`). Once every thread is past its
        first sample, the stretch from then is the one judged: first samples
        are cold in a new interpreter (imports, first calls, fresh memory;
        jpeg's kept one core of two for 20-55 ms, and 7 first epochs of 8
        went to processes, 0.80 of threads by hand; 8 of 8 to threads
        since). A stretch in which a first sample imports a module is not
        judged at all (`imports_seen`), for up to `IMPORTS_SKIPPED` of
        imports: story 2's function imports OpenCV on its first call, one
        thread imported while the other waited for the module, one core of
        two busy for ~0.1 s, which started the fork server, whose imports then
        took a core from threads that release the GIL (seg, new interpreters:
        0.95 -> 0.98-0.99 of threads by hand, 8 alternating rounds). Longer
        imports are judged from then on, as before, so that the process
        workers' own imports start beside the threads': with every import
        left out, GIL-bound work after 0.6 s of imports ran slower than the
        serial loop (benchmarks/RESULTS.md, "Twenty-second session"). The
        whole stretch decides alone only for threads still in
        their first samples (story 1's 70 ms Keras batches), and otherwise
        only to keep threads that it shows busy. Threads past their first
        samples get no verdict beside the fork server's imports
        (`_start_server_if_held`): there, threads that release the GIL kept
        ~1 of 2 cores busy, as threads that hold it do; the stretch after
        the server is up decides. Threads that keep `KEEP_CORES`
        of the cores they could use busy (the cores left over by the
        consumer's thread, e.g. one that checks or converts every batch,
        measured over the same stretch) are within `PROCESS_MARGIN` of
        anything processes could do with the same work on the same cores,
        without a start-up or a copy of every batch: they keep the work, and
        the process workers are never started (starting them beside such
        threads cost short epochs 10-25 %: their interpreters and imports
        took the cores the threads needed). Otherwise, or with no verdict
        within `START_PROCESSES_AFTER` seconds of the fork server being ready
        (threads that keep waiting for tasks), or no per-thread clocks
        (Windows), the process workers start and are measured as before.
        Scouts (`first_threads`) that keep under `IO_TOGETHER` of a core busy
        wait on something other than the GIL (files, the network): the whole
        pool starts at once (`_widen`) instead of after their first tasks
        (workers=32 on 2 cores, 4 ms waits: epochs 0.33 -> 0.30 s, threads
        set by hand 0.28 s).
        """
        if self._processes_started or self.winner is not None:
            return
        now = time.perf_counter()
        clocks = self.threads.side_by_side()
        if clocks is None or self._usable < 2 or now - self._judging_from >= START_PROCESSES_AFTER:
            self._start_processes()  # no clocks; one thread shows nothing side by side; or no verdict in time
            return
        importing = warming_up()
        if importing and self._server_early != "importing":
            if not self._room_beside_server():
                self._judge_anew(now)  # the fork server takes a core while it starts: not a fair stretch (and the
                return  # workers could not start before it is ready anyway)
            importing = False  # ... unless it has a core of its own: scouts on a many-core machine are judged meanwhile
        if self._server_early == "importing" and not importing:  # the server `_start_server_if_held` started is up:
            self._server_early = "up"  # its imports spoiled the stretch for threads that keep their cores busy
            self._server_up_at = now
            self._judge_anew(now)
            return
        if (not importing and self._parked is not None and self._parked.connecting()
                and now - self._server_up_at < CONNECTING_SKIPPED):
            self._warm_baseline = None  # held workers connect (`_park_workers`): their CPU, like the server's imports',
            importing = True  # leaves only the plain verdict, on threads still in their first samples
        modules, importing_module = imports_seen()
        imported, self._modules = importing_module or modules != self._modules, modules
        if imported and any(begun < 2 for *_, begun in clocks):  # an import in the first samples (`import cv2` in
            if self._imports_from is None:  # the function) is cold: the stretch begins again past it, for the
                self._imports_from = now  # first `IMPORTS_SKIPPED` of imports
            if now - self._imports_from < IMPORTS_SKIPPED:
                self._baseline = self._warm_baseline = None
                return
        if self._baseline is None:
            if all(busy for busy, *_ in clocks):
                self._baseline = (now, time.thread_time(), clocks)
                self._mark_waits(now)
            return
        if self._warm_baseline is None and all(busy and begun >= 2 for busy, _, _, begun in clocks):
            self._warm_baseline = (now, time.thread_time(), clocks)  # every thread past its first sample: the early stretch
            self._mark_waits(now)
        if _waited_for_tasks(self._baseline, now, clocks):
            self._baseline = self._warm_baseline = None  # one waited for tasks meanwhile: not side by side
            return
        self._start_server_if_held(now, clocks)
        if self._baseline is None:
            return  # the fork server's imports started: a new stretch
        self._start_workers_if_held(now, clocks)
        whole = now - self._baseline[0] >= EVIDENCE_SPAN
        warm = self._warm_baseline is not None and now - self._warm_baseline[0] >= EARLY_SPAN
        judged = self._warm_baseline if warm and not importing else self._baseline
        if warm and not importing:  # past the first samples: theirs are cold (imports, first calls, fresh memory)
            span, kept, others, usable, begun = self._stretch(self._warm_baseline, now, clocks)
            if not whole and (begun < EARLY_SAMPLES * min(len(clocks), EARLY_THREADS) or kept >= EARLY_SHARE * usable):
                return  # not plain yet: the whole stretch's time decides
        elif whole and self._warm_baseline is None:  # first samples that run long (story 1's 70 ms Keras batches)
            span, kept, others, usable, begun = self._stretch(self._baseline, now, clocks)
        elif whole and not importing:  # every thread just past its first sample: the whole stretch may keep threads
            span, kept, others, usable, begun = self._stretch(self._baseline, now, clocks)
            if kept < self._keep_share() * usable:
                return  # ... but the cold first samples in it may be what held them: `EARLY_SPAN` past them decides
        else:
            return
        if kept < IO_TOGETHER:  # they wait, and not on the GIL (its holder runs): the I/O shortcut, or `START_PROCESSES_AFTER`
            if self._scouting and kept + self._runnable_share(judged, span) >= IO_TOGETHER:
                self._baseline = self._warm_baseline = None  # other programs kept them off the cores: a stretch
                return  # of nothing (`START_PROCESSES_AFTER` still runs)
            if self._widen():  # scouts that wait (files, the network) say nothing of the GIL: the whole pool waits with them
                self._judge_anew(now)
            return
        if importing and kept >= EARLY_SHARE * usable:
            return  # beside the server's imports only the plain GIL verdict (`_start_server_if_held`)
        self._judged = self.threads.workers
        if self._close_call(kept, usable, span):
            return  # within reach of keeping the work: a longer stretch decides
        self._cores_kept, self._cores_others = kept, others
        if kept < self._keep_share() * usable:
            self._start_processes()
            return
        if self._widen():  # scouts kept their cores busy: the whole pool is judged again
            self._judge_anew(now)
            return
        self.rates = {"thread": begun / span}  # samples begun
        self.decided_after = now - self._started
        self._settle("thread", f"{self._cores_note()[:-2]}: the work releases the GIL, so processes could add little: threads")

    def _close_call(self, kept: float, usable: float, span: float) -> bool:
        """The whole pool kept just under `_keep_share` of its cores busy (from `EARLY_WORKERS_SHARE`), over under `CLOSE_CALL_SPAN`.

        Two threads over 50 ms are few samples of a busy share: the
        suite's store reads (crop from a memory map, PIL resize, NumPy
        normalise), the same work every epoch, read 1.70-1.91 of 1.92
        usable cores, and 2 first epochs in one series of 30 (0 in
        another) went to processes on a reading of 1.70-1.71 (498 and 573
        samples/s against ~690 for the epochs that stayed on threads: the
        workers' start took the cores on an 8-task epoch, for no steady
        gain: 671-837 samples/s on processes, 671-802 on threads). Threads
        in that band deliver most of what processes could meanwhile, so a
        stretch three times longer decides there; below it, workers start
        as before (and early: `_start_workers_if_held`). Scouts are judged
        as before: their share is `_keep_share`'s own, not measured here.
        """
        if self._scouting or span >= CLOSE_CALL_SPAN:
            return False
        return EARLY_WORKERS_SHARE * usable <= kept < self._keep_share() * usable

    def _runnable_share(self, baseline: tuple, span: float) -> float:
        """Cores' worth of time the threads were runnable but waiting for a CPU since ``baseline`` (Linux; else 0).

        Threads that use under `IO_TOGETHER` of a core between them wait on
        files or the network, unless other programs keep them off the
        cores: four GIL-bound scouts on 2 cores, while the sixteen process
        workers of the pipeline before them exited, were taken for I/O and
        the whole pool started (1 run in ~30 of the tests in a row).
        """
        before = self._waits_at.get(baseline[0])
        if before is None:
            return 0.0
        waited = sum(now_ - was for now_, was in zip(self.threads.runnable_waits(), before))
        return max(0.0, waited / span)

    def _mark_waits(self, now: float) -> None:
        """Keep the threads' `runnable_waits` at the stretch begun ``now`` (and only at the stretches still judged)."""
        live = {b[0] for b in (self._baseline, self._warm_baseline) if b is not None}
        self._waits_at = {began: waits for began, waits in self._waits_at.items() if began in live}
        self._waits_at[now] = self.threads.runnable_waits()

    def _room_beside_server(self) -> bool:
        """The fork server importing beside the threads judged takes a core none of them needs (`ROOM_BESIDE_SERVER`).

        On `START_AHEAD_CORES` cores or more the server starts importing when
        the map is described (`feedline.engine._runtime.start_early`), and
        on a 16-core host it imported for 0.35-0.8 s (the workers' first
        tasks at 0.41-0.52 s with processes set by hand, story 1, whose
        Keras import the server's first fork waits for). Judged only after
        it, story 1's four scouts (GIL-bound Keras batches, ~1 of 4 cores)
        got their verdict at ~0.4 s and the workers were up at 0.77-1.20 s:
        epochs 1.40-1.83 s against 1.14-1.31 by hand (0.71-0.94 paired); story 2's
        decoded crops ran on the four scouts alone until the workers came up
        at 0.47-0.59 s, with twelve cores idle (epochs 0.53-0.64 s, sixteen
        threads by hand 0.25 s). Four scouts, the consumer's thread and the
        server's imports fit in 16 cores side by side, so the stretch is
        fair; sixteen threads on 16 cores are not judged beside it.
        """
        return self.cores - self.threads.workers >= ROOM_BESIDE_SERVER

    def _judge_anew(self, now: float) -> None:
        """Drop the stretches judged so far: the next starts when every thread is busy, and the verdict is due from ``now``."""
        self._baseline = self._warm_baseline = None
        self._judging_from = now

    def _start_server_if_held(self, now: float, clocks: list) -> None:
        """Start the fork server's imports at the first sign of threads held back by the GIL, before the verdict.

        On fewer than `START_AHEAD_CORES` cores the server is not started
        when a map is described (its imports took a core that threads that
        then won needed, `feedline.engine._runtime.start_early`), so the
        process workers waited for it after the verdict: story 1's
        GIL-bound Keras batches were judged at 0.07 s and the workers up at
        0.22-0.29 s, against 0.11 s by hand. Threads that keep under
        `EARLY_SHARE` of their cores busy for `SERVER_SPAN` leave a core
        idle for the imports; threads that release the GIL keep 0.9-1.0 of
        them. The verdict still decides whether workers start: beside the
        imports, threads that release the GIL keep fewer cores busy (three
        busy on two cores: 0.67 of them each), never as few as threads that
        hold it (0.5), so meanwhile only the plain verdict (under
        `EARLY_SHARE`) is given, and the rest waits for a stretch after.
        Story 1 (2 cores): the server starts at 0.04-0.06 s, the workers are
        up at 0.15-0.18 s, and the epoch ran +1.5 to +7.6 % (medians of
        three alternating runs of 6-10 each); the stories whose threads win
        never start it (story 2 decoded 443 vs 434 samples/s, PNG 186 vs
        185); story 4 338 vs 341 (its workers start while GIL-bound threads
        still hold one core either way).
        """
        if self._server_early or warming_up() or warmed_up() or not self._first_sign(self._baseline, now, clocks, EARLY_SHARE):
            return
        self._server_early = "importing"
        self._baseline = self._warm_baseline = None  # judged from here: the sign may have been cold first samples
        try:
            warm_up("process")
        except Exception:  # the workers' own start reports what is wrong, with context (`_start_processes`)
            return
        self._park_workers()

    def _park_workers(self) -> None:
        """Start the process workers held: they fork as the server comes up, connect, and wait for the pipeline.

        Asked for at the verdict, the workers of a server that is up took
        25-38 ms to be ready beside GIL-bound threads (story 4, 2 cores: the
        forks, the hand-shake, each step waiting for a core or the GIL), and
        building their executor 8-10 ms more; held from the first sign, only
        the pipeline's unpickling and one message each are left then
        (`Executor.release`). While they connect once the server is up
        their start takes CPU, as the server's imports do, so then, as
        beside the imports, only the plain verdict is given, on threads
        still in their first samples (`_judge_gil`), for at most
        `CONNECTING_SKIPPED` after the server is up: sixteen held workers
        beside four GIL-bound scouts on 2 cores (``map(workers=16)``) took
        0.22-0.3 s to connect, their hand-shake waiting for the GIL the
        threads held, and the verdict waited with them (0.87 of processes
        by hand; 0.95 bounded, 6 paired rounds; audio, jpeg and story 1
        level). Story 1's verdict
        waited for the connection when every stretch restarted meanwhile
        (0.238 s instead of ~0.07 in one run of two): 0.938 of processes by
        hand, 0.974 with the plain verdict given (12 paired rounds, fresh
        interpreters; story 4 +1.8 %, audio +1.4 %, gil level). Before the
        server is up they take no CPU, and the plain verdict beside the
        imports stays (judged while they waited for the server too, story
        1's verdict came after it: 0.88 of processes).
        Threads that win close them unused (two forks and hand-shakes: a few
        ms of CPU after the server's ~85 ms).
        """
        if self._park is None or self._parked is not None or self._early is not None or self._processes_started:
            return
        try:
            self._parked = self._park()
        except Exception:  # `_start_processes` tries again, and reports what it meets
            self._parked = None

    def _unpark(self) -> Executor | None:
        """The held workers, given the pipeline now (None if none were started)."""
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.release()
        return parked

    def _start_workers_if_held(self, now: float, clocks: list) -> None:
        """Start the process workers before the verdict where the fork server is up and the threads leave a core idle.

        Over `SERVER_SPAN` after every thread is past its first sample, and
        over the `SERVER_SPAN` after that (`_sign_borne_out`), threads that
        keep under `EARLY_WORKERS_SHARE` of their cores busy leave the rest
        to the workers' start (a fork, the pipeline's unpickling, the
        hand-shake), so the workers are up as the verdict comes instead of
        ~0.035 s after it (audio on 2 cores: 1.53-1.54 of 2 busy 10 ms in,
        epochs 0.93 -> 0.96 of process workers set by hand, 6 alternating
        rounds; gil, one core of two, unchanged). Not on a weaker sign:
        started whatever the threads showed, their start took the cores of
        threads that then won (jpeg: 1.9-2.0 of 2 busy, epochs 0.85 of
        threads by hand, and verdicts turned to processes). Threads still
        in their first samples (story 1's 70 ms Keras batches, which end
        only after the verdict) are read over the stretch since every thread
        was busy, with the plain sign (`EARLY_SHARE`): first samples are
        cold, and only threads plainly held back start workers then (story 1
        after a second of set-up, the server up: the workers asked for at
        0.025-0.034 s instead of 0.07, epochs 0.86 -> 0.90 of processes by
        hand in 10 alternating rounds; story 2 and 3 with set-up, whose
        threads win, level). The verdict still decides; workers it does
        not want are closed (`_settle`).
        """
        if self._early is not None or not warmed_up():
            return
        # every thread still in its first sample (story 1's 70 ms Keras batches): the whole stretch, the plain sign
        baseline, share = ((self._baseline, EARLY_SHARE) if self._warm_baseline is None
                           else (self._warm_baseline, EARLY_WORKERS_SHARE))
        if not self._sign_borne_out(baseline, now, clocks, share):
            return
        try:
            self._early = self._unpark() or self._make_processes()
        except Exception:  # `_start_processes` tries again, and reports what it meets
            return
        self.early_workers_at = now - self._started

    def _first_sign(self, baseline: tuple | None, now: float, clocks: list, share: float) -> bool:
        """`SERVER_SPAN` since ``baseline``, the threads kept under ``share`` of their cores busy (and not idle: `IO_TOGETHER`)."""
        if baseline is None or now - baseline[0] < SERVER_SPAN:
            return False
        return self._keeps_under(baseline, now, clocks, share)

    def _sign_borne_out(self, baseline: tuple | None, now: float, clocks: list, share: float) -> bool:
        """`_first_sign`, and the same again over the `SERVER_SPAN` after it.

        One stretch of 10 ms is short: threads that keep their cores busy
        (jpeg: 1.84-1.95 of 2 over any such stretch) showed 1.15-1.52 in 3
        epochs of 25 (a thread off its core for a few milliseconds), the
        workers' start then took their cores and turned the verdict to
        processes: auto 0.89 of threads by hand, 1.00 with the second
        stretch (audio and gil, whose threads show it in every stretch,
        level; 10-16 alternating rounds). The fork server's start keeps one
        stretch: story 1 ran 3 % slower with its server started 10 ms later.
        """
        if baseline is None:
            return False
        if self._sign_mark is None or self._sign_mark[0] < baseline[0]:  # (none yet, or from a stretch started again)
            if self._first_sign(baseline, now, clocks, share):
                self._sign_mark = (now, time.thread_time(), clocks)
            return False
        if now - self._sign_mark[0] < SERVER_SPAN:
            return False
        mark, self._sign_mark = self._sign_mark, None  # borne out, or not: a later stretch from ``baseline`` may mark again
        return self._keeps_under(mark, now, clocks, share)

    def _keeps_under(self, baseline: tuple, now: float, clocks: list, share: float) -> bool:
        _, kept, _, usable, _ = self._stretch(baseline, now, clocks)
        return IO_TOGETHER <= kept < share * usable

    def _stretch(self, baseline: tuple, now: float, clocks: list) -> tuple:
        """``(seconds, cores the threads kept busy, cores the consumer's thread used, cores they could use, samples begun)`` since ``baseline``.

        The consumer's thread is the one judging (it iterates). Not the rest
        of this process: with NumPy's BLAS pool left at a thread per core,
        ~0.9 of a core went to threads other than the workers and the
        consumer while audio threads ran, and counted as the consumer's it
        made GIL-bound threads look as if they kept every core they could
        use busy (3,500 samples/s on threads where processes deliver 7,600;
        with ``OPENBLAS_NUM_THREADS=1`` that share was ~0).
        """
        began, consumer_cpu, before = baseline
        span = now - began
        kept = sum(now_[1] - was[1] for now_, was in zip(clocks, before)) / span
        others = max(0.0, (time.thread_time() - consumer_cpu) / span)  # (0 if another thread took over the iterating)
        usable = min(self._usable, self.threads.workers, self.cores - others)  # (scouts: fewer than the pool)
        return span, kept, others, usable, sum(now_[3] - was[3] for now_, was in zip(clocks, before))

    def _start_processes(self) -> None:
        """Start the process workers (see `_judge_gil`); a failure settles on threads with the reason."""
        self._processes_started = True
        if self._cores_kept is not None and warming_up() and self._room_beside_server():
            self._pause_when_up = True  # judged beside the server's imports: their tasks are worth having till it is up
        elif self._cores_kept is not None:  # judged held back by the GIL: few threads deliver as much meanwhile, and
            self._pause_threads()  # the workers start sooner
        soon = self._early is not None or warmed_up()  # the workers fork from a server that is up: in ~0.02-0.04 s
        try:
            fresh, self._early = self._early or self._unpark() or self._make_processes(), None
        except Exception as exc:
            self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads", measured=False)
            return
        self._use_processes(fresh)
        if self._cores_kept is not None and not fresh.workers_forked():
            # They wait for a zygote's imports (torch: ~1.5 s), not ~0.02 s: the threads go on till they are forked,
            self.threads.resume()  # as few as deliver what they can beside the import (`_kept_importing`)
            self.threads.narrow(self._kept_importing())
            self._paused_at, self._pause_when_up, self._drain_when_up = None, True, soon
            return
        if soon and self._cores_kept is not None:
            self._drain_threads()

    def _pause_threads(self) -> None:
        """Pause the threads held back by the GIL beyond `_kept_running` while the process workers start.

        Asking for 16 workers beside 16 such threads took 0.12 s, not 0.02.
        Where the verdict came while the fork server still imported
        (`_room_beside_server`), the pause waits for it to be up
        (`_check_ready`): paused from the verdict, the threads would leave
        every core idle for the rest of its imports (0.3 s and more on a
        16-core host), where they deliver a share of what the workers will.
        """
        self._pause_when_up = False
        self.threads.pause_beyond(self._kept_running())
        self._paused_at = time.perf_counter()

    def _drain_threads(self) -> None:
        """Threads held back by the GIL begin no new task while the workers start from a fork server that is up.

        Their queued tasks wait for the workers (`_check_ready` hands them
        over), and so do tasks submitted meanwhile; the running ones end as
        usual. A thread that finished a task just before the workers came up
        took the next from its queue and ran it beside them at a fraction
        of their speed (audio, 2 cores: the threads' second tasks ran
        0.08-0.15 s, beside the workers' first; epochs +1.5 % without them,
        8 alternating rounds). Not while the server still imports: the
        threads' tasks are then worth waiting for. Tasks go back to the
        threads if the workers do not come up (`PAUSE_LIMIT`) or fail.
        """
        self._drained = self.threads.take_queued()

    def _undrain(self) -> None:
        """The tasks kept from the threads go back to them (the workers did not come up in time, or cannot start)."""
        drained, self._drained = self._drained or [], None
        for key, task in drained:
            if self._owner.get(key) is self.threads:
                self.threads.submit(key, task)

    def _use_processes(self, fresh: Executor) -> None:
        """``fresh`` takes the place of the process workers not started yet."""
        waiting = self.processes
        if self._window_share is not None:
            fresh.set_window_share(self._window_share)
        self._outstanding[fresh] = self._outstanding.pop(waiting)
        self._measure[fresh] = self._measure.pop(waiting)
        self.processes = fresh

    def _kept_running(self) -> int:
        """Threads held back by the GIL that go on while the process workers start: none where processes will do many times more.

        The threads deliver about a core between them, however many run; on
        2 cores that is half of what the processes will do, so as many go on
        as the cores they kept busy, rounded up: one where they kept at most
        one (audio epochs +3-8 % against two going on, two pairs of 8 runs;
        the consumer thread that starts the workers then shares the GIL with
        one thread, not two), two where they kept a little more (gil, 1.02 of
        2: one alone ran 5 % slower). On
        16 cores two running threads held the workers' hand-shake (which
        needs the GIL) back 0.29-0.44 s, against 0.02-0.03 s with every
        thread paused; the automatic choice on the suite's gil workload went
        from 0.82 to 0.92 of process workers set by hand
        (`python -m benchmarks.server_check --workload gil`, H200 host).
        """
        if self.cores >= PAUSE_ALL_CORES:
            return 0
        return max(KEEP_RUNNING, math.ceil(self._cores_kept))

    def _kept_importing(self) -> int:
        """Threads held back by the GIL that take tasks while the process workers wait for a zygote's imports.

        On fewer than `PAUSE_ALL_CORES` cores, as many as the cores they
        kept busy, less the one the import takes for a second or more
        (torch: ~1.5 s), and at least `KEEP_RUNNING`: one on 2 cores. There a
        torch map of small tensors (2,048 samples) with two threads going
        on used 1.3-1.4 cores between them and ran its epoch in 0.47-0.49 s,
        against 0.41-0.44 s for the serial loop; one thread alone ran
        0.42-0.46 s. On more cores all go on: not measured there.
        """
        if self.cores >= PAUSE_ALL_CORES:
            return self.threads.workers
        return max(KEEP_RUNNING, min(math.ceil(self._cores_kept), self._usable - 1))

    def _keep_share(self) -> float:
        """The share of their cores the threads judged must keep busy: `KEEP_CORES`, more for scouts.

        The cores lost to waiting on the GIL grow at least with the threads
        that wait: scouts a quarter of the pool may lose a quarter of what
        the pool may (4 of 16: 0.975). On the suite's jpeg workload (PIL
        decode and NumPy, 16 cores) four threads kept 3.35-3.7 of 4 cores
        busy and sixteen 5.9-6.4 of 16; at 0.9 two epochs of three judged
        the whole pool too, ~0.05 s later.
        """
        judged = self._judged_cores()
        return KEEP_CORES if judged >= self._usable else 1.0 - (1.0 - KEEP_CORES) * judged / self._usable

    def _judged_cores(self) -> int:
        """The cores the threads judged for the GIL could keep busy at most."""
        return min(self._judged, self._usable)

    @property
    def _scouting(self) -> bool:
        """The threads judged are the scouts (`first_threads`), fewer than the pool: `_widen` would grow them.

        Only scouts that use under `IO_TOGETHER` of a core become the whole
        pool, so only theirs are checked for time spent runnable, kept off
        the cores by other programs (`_runnable_share`). The whole pool of
        threads that wait on I/O shows such time by itself: sixteen threads
        waking from 10 ms sleeps on 2 cores were runnable 0.8-1.6 cores'
        worth, their stretches were dropped, and the run ended on processes
        instead of the I/O verdict (about one run in two after a test whose
        workers had just exited, on a loaded 2-core machine).
        """
        return self.threads.workers < self.workers

    def _widen(self) -> bool:
        """The scouts (`first_threads`) become the whole pool, their queued tasks spread over it; False if they are it.

        What few threads keep busy says nothing of many: sixteen threads
        that each hold the GIL a fifth of the time need three GILs' worth.
        """
        if not self._scouting or not self.threads.grow(self.workers):
            return False
        for key, task in self.threads.take_queued():  # the scouts' backlog holds the earliest tasks: spread it
            self.threads.submit(key, task)
        return True

    def _cores_note(self) -> str:
        if self._cores_kept is None:
            return ""
        first = f" (the first {self._judged} of {self.workers}, started to judge)" if self._judged < self.workers else ""
        return (f"{self._judged} threads side by side{first} kept {self._cores_kept:.2f} of {self._judged_cores()} cores "
                f"busy (the consumer's thread {self._cores_others:.2f}); ")

    def _thread_bound(self) -> float:
        """Samples/s the threads could deliver at most: their CPU rate on every core they could use (0: unknown).

        Where scouts were judged (`first_threads`), on the cores the whole
        pool could keep busy as the scouts' GIL waits say (`grown_busy`):
        the cores lost to waiting on the GIL grow faster than the threads
        that wait (jpeg, 16 cores: four threads kept 3.25-3.8 of 4 cores
        busy, sixteen 4.7-6.5 of 16). With the bound scaled only by the
        scouts' share (0.93 of 16 cores for 3.73 of 4), processes at
        96-105 % of it still sent two jpeg first runs of three on an H100
        host to a thread phase that sixteen threads lost at 40 % of the
        processes' speed (automatic 0.83-0.87 of processes by hand); unscaled,
        one in three, on one host three in four.
        """
        if self._thread_cpu <= 0 or not self._thread_rows:
            return 0.0
        rate = self._thread_rows / self._thread_cpu
        judged = self._judged_cores()
        if self._cores_kept is not None and judged < self._usable:
            return rate * grown_busy(judged, self._cores_kept, self._usable)
        return rate * self._usable

    def _decide(self) -> None:
        threads, processes = self._measure[self.threads], self._measure[self.processes]
        self.rates = {"thread": threads.per_second, "process": processes.per_second}
        winner = "process" if processes.per_second > PROCESS_MARGIN * threads.per_second else "thread"
        self.decided_after = time.perf_counter() - self._started
        self._settle(winner, f"tried both: threads {threads.per_second:,.0f} samples/s ({threads.cores_busy:.1f} of "
                             f"{self._usable} cores busy), processes {processes.per_second:,.0f} samples/s: "
                             f"{'processes' if winner == 'process' else 'threads'}")

    def _settle(self, winner: str, note: str, measured: bool = True) -> None:
        """``winner`` keeps the work from now on; a ``measured`` verdict (not a failure to start) is passed to ``on_verdict``."""
        if self.trials > 1:
            confirmed = winner == self._previous_winner
            note = f"tried again after {self._retry_reason}: {note}"
            self._retrial_after = self._retrial_after * 2 if confirmed else RETRIAL_AFTER
        self.winner, self.note = winner, note
        self._pause_when_up = self._drain_when_up = False
        self.threads.resume()
        for started in (self._early, self._parked):
            if started is not None:
                started.close()  # started on a first sign the verdict did not bear out
        self._early = self._parked = None
        self._undrain()  # (none where the processes won: they took them once up)
        if (winner == "process" and self._outstanding[self.threads]
                and self.rates.get("process", 0.0) >= ABANDON_RATIO * self.rates.get("thread", math.inf)):
            # threads measured alone hold the next tasks, at a fraction of the processes' speed: those move now
            self._hand_over_after(self.threads.take_queued(), self.threads.abandon_running())
        if winner == "thread":
            self._widen()  # threads that won on I/O as scouts: the whole pool
        self._settled_at = time.perf_counter()
        self._decided_rate = self.rates.get(winner, 0.0) / max(1, self._measure[self._winning()].workers)
        if measured and self._on_verdict is not None:
            trouble = self._on_verdict(winner, dict(self.rates), self._decided_rate, note, self.workers)
            if trouble:
                self.note += f"; {trouble}"
        self._drift = _Drift()
        self.threads.watch_progress(False)
        self._switch.give_back()
        self._close_idle_loser()

    # --------------------------------------------------------------- drift
    def _may_retry(self) -> bool:
        return (self._restart is not None and self._decided_rate > 0
                and time.perf_counter() - self._settled_at >= self._retrial_after)

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
            self._ready = False
            self._warmed = set()
            self._switch.take()
        else:
            self.threads = fresh
            self._ready = True  # the process workers are up: they take the work and are measured first
        self._closed.discard(fresh)
        self._outstanding[fresh] = self._outstanding.pop(loser, 0)
        self._reset_measures()
        self._thread_rows = self._thread_cpu = 0.0  # the threads' bound is measured again too
        self._thread_span, self._thread_tasks = 0.0, 0
        self._thread_cpu_wait = 0.0
        self._baseline = self._warm_baseline = self._cores_kept = None
        self._judging_from = time.perf_counter()
        self._alone_from = self._threads_alone_from = self._alone_baseline = None
        self._threads_again = self._abandoned = False
        self.winner = None  # the rates of the last decision stay in stats().trial until the next one
        self._started = time.perf_counter()
        self.trials += 1
        self.threads.watch_progress(True)

    def _close_idle_loser(self) -> None:
        if self.winner is None:
            return
        loser = self.processes if self.winner == "thread" else self.threads
        if not self._outstanding[loser] and loser not in self._closed:
            self._closed.add(loser)
            loser.close()  # its memory and (for processes) its workers go now
