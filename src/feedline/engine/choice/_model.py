"""The cost model of the automatic choice and its pure controller: observations in, a verdict out.

`predict` gives each candidate's delivered samples/s from what was measured
on the running pipeline; `decide` turns the observations of one moment into
a `Verdict` under a `Policy`. Neither reads a clock, does I/O or touches an
executor: `feedline.engine._trial.BackendTrial` gathers the observations
and carries the verdict out. The equations are in docs/automatic_choice.md.
"""

from __future__ import annotations

import dataclasses
import enum
import math

from ._phase import Phase
from ._policy import Policy

__all__ = ["Action", "Measured", "Observations", "Rates", "Stretch", "Verdict", "busy_with_one_gil", "decide",
           "grown_busy", "predict"]

EARLY_SAMPLES, EARLY_THREADS = 2, 2  # the plain verdict needs this many samples begun by each of up to this many threads


def busy_with_one_gil(threads: int, held: float) -> float:
    """Cores ``threads`` keep busy when each holds the GIL ``held`` of its working time, on exponential holds.

    One GIL is a single server with a finite population (the machine
    repairman queue): a thread works free of the GIL for a while, then
    waits for it and holds it. The GIL is busy ``1 - p0`` of the time,
    ``p0`` the chance that no thread holds or waits for it; each thread's
    cycle is one unit of CPU, so the threads keep ``(1 - p0) / held`` cores
    busy, never more than ``threads`` and never more than ``1 / held``.
    Summed in logarithms: the terms overflow floats past ~170 threads.

    >>> round(busy_with_one_gil(2, 0.5), 3)
    1.6
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

    The hold of the GIL is solved from the judged threads with the queue of
    `busy_with_one_gil` (exponential holds queue more than steady ones, so
    the hold found is the shortest that fits: an upper bound on what the
    grown pool keeps busy), and the result is never above the judged
    threads' own share of ``grown`` cores.

    >>> grown_busy(4, 4.0, 16), grown_busy(4, 1.0, 16)
    (16.0, 1.0)
    """
    share = min(1.0, kept / judged) * grown
    if judged >= grown or kept >= judged * (1.0 - 1e-6):
        return share
    if kept <= 1.0:
        return min(share, 1.0)  # one GIL's worth: many threads keep no more busy
    low, high = 1e-9, 1.0 - 1e-9  # the hold: busy falls as it grows
    for _ in range(60):
        middle = (low + high) / 2
        if busy_with_one_gil(judged, middle) > kept:
            low = middle
        else:
            high = middle
    return min(share, busy_with_one_gil(grown, low))


def busy_while_working(cpu: float, idle: float, span: float, workers: int) -> float:
    """Cores ``workers`` threads would keep busy all working, from ``span`` seconds of their clocks.

    ``cpu`` and ``idle`` are their summed CPU seconds and seconds waiting
    with no task in the stretch. A wait for the GIL between two tasks is
    working time here (the thread has a task queued), as it is not in a
    task's own span: short tasks of GIL-bound Python then read as one core,
    not as every thread's core.

    >>> busy_while_working(cpu=1.0, idle=0.0, span=1.0, workers=8)  # eight threads, one GIL
    1.0
    >>> busy_while_working(cpu=1.0, idle=4.0, span=1.0, workers=8)  # half of their time with nothing to do
    2.0
    """
    working = workers * span - idle
    return workers * cpu / working if working > 0 else 0.0


@dataclasses.dataclass(frozen=True)
class Stretch:
    """The threads side by side over one stretch of wall time, every one of them busy throughout."""

    span: float  # seconds
    kept: float  # cores the threads kept busy: the sum of their CPU clocks over the span
    usable: float  # cores they could use: their count, the pool's cores, less what the consumer's thread used
    begun: int = 0  # samples the threads began in it
    others: float = 0.0  # cores the consumer's thread used meanwhile
    runnable: float = 0.0  # cores' worth of time the threads were runnable but waiting for a CPU (other programs)


@dataclasses.dataclass(frozen=True)
class Measured:
    """Tasks one backend ran: how many, their summed span, and the samples/s of the whole pool."""

    tasks: int = 0
    span: float = 0.0
    per_second: float = 0.0
    cores_busy: float = 0.0
    done: bool = False  # a task per worker and `Policy.evidence_span` of work per worker


@dataclasses.dataclass(frozen=True)
class Observations:
    """What the trial knows at one moment; only the fields its phase reads need be set."""

    phase: Phase
    cores: int  # cores usable here (the cgroup quota and affinity, not the CPUs in the box)
    pool: int  # threads or process workers asked for
    threads: int  # threads running (the scouts, while fewer than the pool)
    # JUDGING_THREADS: the stretch since every thread was busy, and since every one was past its first sample
    whole: Stretch | None = None
    warm: Stretch | None = None
    beside_start: bool = False  # the fork server imports, or held workers connect, beside the threads
    # every phase: the threads' tasks so far
    thread_rows: float = 0.0
    thread_cpu: float = 0.0  # CPU seconds of their tasks (GIL waits left out)
    thread_span: float = 0.0  # seconds their tasks ran, summed
    thread_wanted: float = 0.0  # CPU seconds used or runnable-waited for (other programs' load counts as use)
    thread_tasks: int = 0
    io_shortcut: bool = True  # threads that wait on I/O may win at once (not after grown ones met the GIL)
    # the judged verdict on the GIL, once given
    cores_kept: float | None = None
    judged: int = 0  # threads the verdict judged
    # MEASURING_*: processes' warm tasks, every process task (cold ones too), threads alone and their stretch
    processes: Measured = Measured()
    first_tasks: Measured = Measured()
    threads_alone: Measured = Measured()
    alone: Stretch | None = None

    @property
    def usable(self) -> int:
        """Cores the pool could keep busy at most."""
        return min(self.pool, self.cores)

    @property
    def scouting(self) -> bool:
        return self.threads < self.pool

    @property
    def judged_cores(self) -> int:
        return min(self.judged, self.usable)

    @property
    def cpu_rate(self) -> float:
        """Samples per CPU second of the threads' tasks (0: none yet)."""
        return self.thread_rows / self.thread_cpu if self.thread_cpu > 0 and self.thread_rows else 0.0

    @property
    def held_back(self) -> bool:
        """The judged threads kept under `Policy.held_share` of their cores busy (no verdict: as if held back)."""
        return self.cores_kept is None


@dataclasses.dataclass(frozen=True)
class Rates:
    """Predicted delivered samples/s of each candidate at the pool's size (0: not known yet)."""

    serial: float
    threads: float
    threads_bound: float  # the most the threads could deliver: their CPU rate on every core one GIL lets them use
    processes: float


def predict(obs: Observations) -> Rates:
    """Each candidate's delivered samples/s from the threads' CPU rate, the GIL's share and the cores here.

    serial = r; threads x n = r * B(n); processes x n = the measured rate,
    else r * min(n, C); where r is samples per CPU second, C the usable
    cores and B(n) the cores n threads keep busy: what they kept, scaled
    from the judged threads by one GIL's queue (`grown_busy`).

    >>> obs = Observations(Phase.MEASURING_PROCESSES, cores=16, pool=16, threads=16, thread_rows=100,
    ...                    thread_cpu=1.0, cores_kept=1.0, judged=4)
    >>> predict(obs)
    Rates(serial=100.0, threads=100.0, threads_bound=100.0, processes=1600.0)
    """
    rate = obs.cpu_rate
    judged = obs.judged_cores
    if obs.cores_kept is not None and judged < obs.usable:
        bound = rate * grown_busy(judged, obs.cores_kept, obs.usable)
    else:
        bound = rate * obs.usable
    if obs.cores_kept is None:
        busy = obs.usable
    elif judged < obs.usable:
        busy = grown_busy(judged, obs.cores_kept, obs.usable)
    else:
        busy = obs.cores_kept
    processes = obs.processes.per_second or obs.first_tasks.per_second or rate * obs.usable
    return Rates(serial=rate, threads=rate * busy, threads_bound=bound, processes=processes)


class Action(enum.Enum):
    WAIT = "no verdict yet"
    DROP_STRETCH = "the stretch says nothing: judge a new one"
    WIDEN = "the scouts become the whole pool, judged anew"
    START_PROCESSES = "start the process workers and measure them"
    MEASURE_THREADS = "measure the threads alone"
    THREADS = "threads keep the work"
    PROCESSES = "processes keep the work"


@dataclasses.dataclass(frozen=True)
class Verdict:
    action: Action
    why: str = ""
    rates: dict = dataclasses.field(default_factory=dict)
    kept: float | None = None  # the cores the judged stretch showed busy (a verdict on the GIL: kept from now on)
    others: float = 0.0

    @property
    def settles(self) -> bool:
        return self.action in (Action.THREADS, Action.PROCESSES)


WAIT = Verdict(Action.WAIT)


def decide(obs: Observations, policy: Policy) -> Verdict:
    """The verdict for ``obs`` under ``policy``: the I/O shortcut first, then the phase's own question.

    >>> from feedline.engine.choice import DEFAULT_POLICY
    >>> gil = Stretch(span=0.03, kept=1.0, usable=2.0, begun=8)
    >>> decide(Observations(Phase.JUDGING_THREADS, cores=2, pool=2, threads=2, warm=gil, whole=gil),
    ...        DEFAULT_POLICY).action
    <Action.START_PROCESSES: 'start the process workers and measure them'>
    """
    io = _waiting_on_io(obs, policy)
    if io.settles:
        return io
    if obs.phase is Phase.JUDGING_THREADS:
        return _judge_threads(obs, policy)
    if obs.phase is Phase.MEASURING_PROCESSES:
        return _judge_processes(obs, policy)
    if obs.phase is Phase.MEASURING_THREADS:
        return _judge_threads_alone(obs, policy)
    return WAIT


def _waiting_on_io(obs: Observations, policy: Policy) -> Verdict:
    """Thread tasks using under `io_share` of a core, and all together under `io_together`, wait on I/O: threads."""
    running = obs.threads
    if (obs.phase is Phase.SETTLED or not obs.io_shortcut or obs.thread_tasks < running
            or obs.thread_span < running * policy.evidence_span or obs.thread_wanted >= policy.io_share * obs.thread_span):
        return WAIT
    share = obs.thread_wanted / obs.thread_span
    if running * share >= policy.io_together:
        return WAIT  # side by side they may use a core between them: the GIL's share, not I/O
    return Verdict(Action.THREADS, f"thread tasks used {share:.0%} of a core while they ran: they wait on I/O, "
                                   "not on the GIL, so processes cannot do better: threads",
                   {"thread": obs.pool * obs.thread_rows / obs.thread_span})


def _keep_share(obs: Observations, policy: Policy) -> float:
    """The share the judged threads must keep busy: `keep_share`, more for scouts (the GIL's cost grows with the pool)."""
    judged = min(obs.threads, obs.usable)
    return policy.keep_share if judged >= obs.usable else 1.0 - (1.0 - policy.keep_share) * judged / obs.usable


def _judged_stretch(obs: Observations, policy: Policy) -> Stretch | None:
    """The stretch a verdict may rest on now, or None: past the first samples (cold), else the whole one."""
    whole, warm = obs.whole, obs.warm
    long_enough = whole is not None and whole.span >= policy.evidence_span
    if warm is not None and warm.span >= policy.early_span and not obs.beside_start:
        few = warm.begun < EARLY_SAMPLES * min(obs.threads, EARLY_THREADS)
        if not long_enough and (few or warm.kept >= policy.held_share * warm.usable):
            return None  # not plain yet: the whole stretch's time decides
        return warm
    if long_enough and warm is None:
        return whole  # first samples that run long: the whole stretch
    if long_enough and not obs.beside_start:
        if whole.kept < _keep_share(obs, policy) * whole.usable:
            return None  # the cold first samples in it may be what held them: `early_span` past them decides
        return whole
    return None


def _judge_threads(obs: Observations, policy: Policy) -> Verdict:
    """Threads side by side: keep them (they keep the cores busy), start processes (the GIL holds them), or wait."""
    stretch = _judged_stretch(obs, policy)
    if stretch is None:
        return WAIT
    kept, usable = stretch.kept, stretch.usable
    if kept < policy.io_together:  # they wait, and not on the GIL (its holder runs)
        if obs.scouting and kept + stretch.runnable >= policy.io_together:
            return Verdict(Action.DROP_STRETCH, "other programs kept the threads off the cores")
        if obs.scouting:
            return Verdict(Action.WIDEN, "the scouts wait, and not on the GIL: the whole pool waits with them")
        return WAIT  # the I/O shortcut decides once their tasks are in, or `verdict_due`
    if obs.beside_start and kept >= policy.held_share * usable:
        return WAIT  # beside the workers' start only the plain GIL verdict
    keep = _keep_share(obs, policy)
    if not obs.scouting and stretch.span < policy.close_call_span and policy.close_call_share * usable <= kept < keep * usable:
        return WAIT  # within reach of keeping the work: a longer stretch decides
    if kept < keep * usable:
        return Verdict(Action.START_PROCESSES, f"kept {kept:.2f} of {usable:.2f} usable cores busy, under "
                                               f"{keep:.0%}: the GIL holds them", kept=kept, others=stretch.others)
    if obs.scouting:
        return Verdict(Action.WIDEN, "the scouts kept their cores busy: the whole pool is judged", kept=kept,
                       others=stretch.others)
    return Verdict(Action.THREADS, "the work releases the GIL, so processes could add little: threads",
                   {"thread": stretch.begun / stretch.span}, kept=kept, others=stretch.others)


def _judge_processes(obs: Observations, policy: Policy) -> Verdict:
    """Processes measured alone against the most the threads could reach: processes at once, or threads measured."""
    bound = predict(obs).threads_bound
    few = min(obs.pool, policy.scouts)
    first = obs.first_tasks
    held = obs.cores_kept is not None and obs.cores_kept < policy.held_share * obs.judged_cores
    if held and bound and first.tasks >= few and first.span >= few * policy.evidence_span \
            and first.per_second >= policy.sure_ratio * bound:
        return Verdict(Action.PROCESSES, f"processes' first {first.tasks} tasks {first.per_second:,.0f} samples/s, "
                                         f"{first.per_second / bound:.0%} of the most {obs.usable} threads could "
                                         f"reach ({bound:,.0f} samples/s at their CPU rate): processes",
                       {"thread": bound, "process": first.per_second})
    processes = obs.processes
    if not processes.done:
        return WAIT
    at_once = policy.near_bound if obs.cores_kept is None or held else policy.process_margin
    if bound and processes.per_second >= at_once * bound:
        return Verdict(Action.PROCESSES, f"processes {processes.per_second:,.0f} samples/s, "
                                         f"{processes.per_second / bound:.0%} of the most {obs.usable} threads could "
                                         f"reach ({bound:,.0f} samples/s at their CPU rate): processes",
                       {"thread": bound, "process": processes.per_second})
    return Verdict(Action.MEASURE_THREADS, "threads might win: measured alone")


def _judge_threads_alone(obs: Observations, policy: Policy) -> Verdict:
    """Threads measured alone: they lose early if their busy cores cannot reach the processes, else on their rate."""
    processes, threads = obs.processes.per_second, obs.threads_alone
    alone = obs.alone
    if alone is not None and alone.span >= policy.evidence_span and obs.cpu_rate:
        reach = alone.kept * obs.cpu_rate
        if processes > policy.process_margin * reach:
            return Verdict(Action.PROCESSES, f"tried both: {obs.threads} threads alone kept {alone.kept:.1f} of "
                                             f"{obs.usable} cores busy, {reach:,.0f} samples/s at their CPU rate; "
                                             f"processes {processes:,.0f} samples/s: processes",
                           {"thread": reach, "process": processes})
    if not threads.done:
        return WAIT
    rate, busy = threads.per_second, threads.cores_busy
    if alone is not None and alone.span >= policy.evidence_span and alone.begun:
        # Wall time, every thread busy: threads that take turns on one GIL wait for it between tasks, outside
        # any task's span, so their tasks one by one look as fast as a thread alone.
        rate, busy = alone.begun / alone.span, alone.kept
    rates = {"thread": rate, "process": processes}
    won = processes > policy.process_margin * rate
    return Verdict(Action.PROCESSES if won else Action.THREADS,
                   f"tried both: threads {rate:,.0f} samples/s ({busy:.1f} of {obs.usable} "
                   f"cores busy), processes {processes:,.0f} samples/s: {'processes' if won else 'threads'}", rates)
