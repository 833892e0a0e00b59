"""The prefetch depth and the worker count, tuned while running (`DepthTuner`, `WorkerTuner`).

Depth: when, within a window of batches, the consumer had to wait *and*
the workers were held back because every prefetch slot was taken, the
depth grows by one batch per worker, up to a memory budget
(`MEMORY_BUDGET` bytes of batches in flight). Once, after the first
window: tasks shorter than `SHORT_TASK`, while the consumer spent at
least `WAITING` of its time since the first batch waiting, get
`QUEUED_WORK` seconds of them queued per worker.

Workers: one per core to start with (`feedline.engine._choice`); only
when the user left ``workers=`` unset, and only for backends that can add
workers while running (threads, processes). A window is short: two
batches and one task per worker, from the first batch on (start-up left
out), so work clearly off the CPU (tasks under `CLEAR_IO_SHARE` of a core)
is judged within about one task's time; other work over
`WorkerTuner.WINDOW` batches (on a loaded machine, CPU-bound tasks can
look half idle for a moment). When the
consumer waited at least `WorkerTuner.WAIT_SHARE` of the window, the
tasks used the CPU less than `IO_CPU_SHARE` of their time (they wait on
files, the network, a remote store), and the machine's CPUs were idle at
least `IDLE_SHARE` of it (on Linux, from /proc/stat: tasks that wait for
a CPU taken by other programs also use little CPU, and more workers would
not help them), the count grows at once to what would keep every core
busy at that CPU share (tasks at 3 % of a core: 33 workers per core), at
least doubling, up to `MAX_WORKERS_PER_CORE` per core, `MAX_WORKERS` and
the memory budget. Windows are judged only while one backend runs the
work (`Executor.steady`): while the automatic choice's trial runs, and
until the loser's last task is back, the window starts again at every
batch: threads that hold the GIL, measured in the trial, each use a small
share of a core as threads that wait on I/O do, and the tuner would hand
their count, grown, to the process workers that win. A backend that
cannot add workers yet is asked again at every batch. After a growth, one
window settles and the next is compared with the last one before, on the
workers' rate (workers x rows per task-second: per task, so batches that
arrive in bursts, in order, do not skew it). A growth that raised it less
than `WorkerTuner.GAIN` stops further growth, and the decision says so (a
shared lock, a connection limit, the server or the GIL limits the work,
not the worker count); so does one after which the consumer got under
`WorkerTuner.KEEP_DELIVERED` of the samples a second it got before. Such
a growth is undone where the backend can let workers go (threads:
`Executor.shrink`): threads that wait on the GIL look like threads that
wait on I/O from their clocks, and more of them slow each other down,
each even looking faster per task while fewer samples arrive. Process
workers stay. Windows last `WorkerTuner.MIN_SECONDS` at least: rates over a few scheduler ticks are noise.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

__all__ = ["DepthTuner", "MAX_WORKERS", "MAX_WORKERS_PER_CORE", "MEMORY_BUDGET", "WorkerTuner"]

MAX_WORKERS_PER_CORE = 8  # workers waiting on I/O: this many per core at most
MAX_WORKERS = 128
IO_CPU_SHARE = 0.5  # tasks using the CPU less than this share of their time wait on something else
CLEAR_IO_SHARE = 0.2  # ... and under this share, clearly: judged on a short window (a loaded machine blurs the rest)
IDLE_SHARE = 0.2  # ... and the machine's CPUs idle at least this share of the time: it is not other programs

SHORT_TASK = 0.005  # seconds: tasks shorter than this get more of them queued per worker (DepthTuner)
QUEUED_WORK = 0.004  # seconds of short tasks queued per worker: covers the consumer's reply on a busy machine
MAX_SHARE = 8  # tasks queued per worker at most, from the short-task rule
WAITING = 0.3  # ... and only when the consumer waited at least this share of its time since the first batch
MEMORY_BUDGET = 1 << 30  # bytes of batches the prefetch depth may keep in flight
ROOM_SHARE = 0.5  # ... and at most this share of a bounded medium they pass through, less `SPARE_SLOTS` per worker
SPARE_SLOTS = 2  # batches' worth each worker may hold beside those in flight (slots it made before its own came back)


class DepthTuner:
    """Raises the prefetch depth while the consumer waits behind full prefetch slots."""

    WINDOW = 16  # batches per decision

    def __init__(self, depth: int, workers: int, enabled: bool, messages=None, room=None):
        self.depth, self.workers, self.enabled = depth, workers, enabled
        self._messages = messages  # () -> whether a task is a message to another process now (None: always)
        self._room = room  # () -> bytes batches in flight must fit in (`Executor.batch_room`), or None
        self.batch_bytes = None
        self.task_batches = 1  # whole batches one task holds (several from the second epoch: `Plan.groups_batches`)
        self._waited = 0
        self._blocked = 0
        self._seen = 0
        self._short_checked = False  # the short-task rule runs once, after the first window
        self._base = None  # the consumer's (wait, wall) seconds at the first batch

    def _cover_short_tasks(self, stats, waited: int) -> str | None:
        """Tasks of a few ms: queue `QUEUED_WORK` seconds of them per worker, so a worker never waits for its next one.

        A worker gets its next task only after the consumer has taken a
        result and answered; on a busy machine that round trip can take as
        long as a 1 ms task. Only where a task is a message to another
        process: threads take theirs from an in-process queue, and a deeper
        queue only keeps more batches alive (batches that no longer fit the
        caches, memory handed back and forth less warm).
        """
        if self._messages is not None and not self._messages():
            return None
        waited_since = stats.wait_seconds - self._base[0]  # since the first batch: the workers' start-up left out
        wall = stats.wall_seconds - self._base[1]
        if stats.tasks <= 0 or wall <= 0 or waited_since < WAITING * wall:
            return None  # a consumer that does not wait for data gains nothing from a deeper queue
        per_task = stats.task_seconds / stats.tasks
        if per_task <= 0 or per_task >= SHORT_TASK:
            return None
        share = min(MAX_SHARE, math.ceil(QUEUED_WORK / per_task))
        new = min(max(self.depth, share * self.workers), self._limit())
        if new <= self.depth:
            return None
        old, self.depth = self.depth, new
        return (f"prefetch depth {old} -> {new}: tasks take {per_task * 1e3:.1f} ms, so each worker keeps "
                f"{QUEUED_WORK * 1e3:.0f} ms of them queued (the consumer waited in {waited} of {self.WINDOW} batches)")

    def observe(self, waited: bool, blocked: bool, batch, stats=None) -> str | None:
        """Record one batch (``stats``: the epoch's counters so far); return a decision (text) when the depth changes."""
        if not self.enabled:
            return None
        if self.batch_bytes is None:
            self.batch_bytes = _nbytes(batch)
        if self._base is None and stats is not None:
            self._base = (stats.wait_seconds, stats.wall_seconds)  # at the first batch
        self._seen += 1
        self._waited += waited
        self._blocked += blocked
        if self._seen < self.WINDOW:
            return None
        waited, blocked = self._waited, self._blocked
        self._seen = self._waited = self._blocked = 0
        if stats is not None and not self._short_checked:
            self._short_checked = True
            decision = self._cover_short_tasks(stats, waited)
            if decision is not None:
                return decision
        if waited >= 2 and blocked >= 2:
            new = min(self.depth + self.workers, self._limit())
            if new > self.depth:
                old, self.depth = self.depth, new
                return (f"prefetch depth {old} -> {new}: the consumer waited in {waited} of {self.WINDOW} batches "
                        f"while workers were held back by full prefetch slots in {blocked}")
        return None


    def _limit(self) -> int:
        """The deepest the tuner goes: `MEMORY_BUDGET` of batches, and `ROOM_SHARE` of a bounded medium they pass through.

        Process workers with memory files and the spill folder turned off
        have only ``/dev/shm``: 12 MiB of it, 1 MiB batches, two workers,
        the depth raised 4 -> 6 on a loaded machine (the short-task rule),
        and with the slots each worker makes before its own come back the
        epoch ended in `SharedMemoryFull` (a CI run). Never below the depth
        it started at (that one is the user's or the runtime's).
        """
        batch = max(1, self.batch_bytes or 1)
        budget = MEMORY_BUDGET
        room = self._room() if self._room is not None else None
        if room is not None:
            budget = min(budget, int(ROOM_SHARE * room) - SPARE_SLOTS * self.workers * batch)
        return max(self.depth, budget // (batch * self.task_batches))

    def task_room(self) -> int | None:
        """Bytes the batches of one task may take so that the window fits a bounded medium (`ROOM_SHARE`); None: unbounded.

        The depth counts tasks, so a task of several batches multiplies what
        the window holds: 12 MiB of ``/dev/shm``, 1 MiB batches, two
        workers, four batches a task from the second epoch (the grid learned
        from a map of a few us a sample) needed 16 slots where 11 fit, and
        one run in ~20 ended in `SharedMemoryFull` with a worker waiting for
        its own slots (a CI run). Each worker's `SPARE_SLOTS` count at a
        task's size too.
        """
        room = self._room() if self._room is not None else None
        if room is None:
            return None
        return int(ROOM_SHARE * room) // (self.depth + SPARE_SLOTS * self.workers)


class WorkerTuner:
    """More workers while the consumer waits on workers that wait on I/O; undoes a growth that did not help (module docstring)."""

    MIN_BATCHES = 2  # batches per window at least; a window also spans one task per worker (`_window_done`) ...
    MIN_SECONDS = 0.02  # ... and this long: rates over less than a few scheduler ticks are noise (0.3 ms batches)
    WINDOW = 8  # batches per window when the tasks are not clearly off the CPU (`CLEAR_IO_SHARE`)
    WAIT_SHARE = 0.3  # the consumer waited at least this share of the window's time: input-bound
    GAIN = 1.1  # a growth must raise the workers' rate this much, else the count goes back where it was ...
    KEEP_DELIVERED = 0.95  # ... and keep the samples the consumer got a second at least this share of what they were

    def __init__(self, workers: int, cores: int, enabled: bool, idle=None):
        self.workers, self.cores, self.enabled = workers, cores, enabled
        self._idle = idle or machine_idle  # () -> the machine's (idle, total) CPU time so far, or None (`machine_idle`)
        self.last_reason = ""
        self.stopped = ""  # why the count no longer grows ("" while it may)
        self.busy_windows = 0  # windows that asked for more workers while other programs kept the CPUs busy
        self._seen = 0
        self._start = None  # the epoch's counters when the window began (see `_counters`)
        self._idle_start = None  # the machine's (idle, total) CPU time then (None: not known here)
        self._asked = None  # (count asked for, count before, the workers' and the delivered samples/s before) until granted
        self._grown = None  # (count before, the workers' and the delivered samples/s before) of a growth not yet judged
        self._settling = False  # the window right after a growth: new workers start, old tasks drain; not judged

    def observe(self, stats, batch_bytes: int | None, steady: bool = True) -> int | None:
        """Record one batch (``stats``: the epoch's counters so far); return a new worker count, or None.

        ``steady``: only the backend that keeps the work runs tasks (else the window starts again, nothing asked).
        """
        if not self.enabled or self.stopped:
            return None
        now = _counters(stats)
        if not steady or self._start is None or now[3] < self._start[3]:  # a trial, the first batch, or a new epoch
            self._begin_again(now)
            return None
        self._seen += 1
        if self._asked is not None and self.workers >= self._asked[0]:
            self._settle(now)
            return None
        if not self._window_done(now):
            # the backend could not add workers yet (e.g. while the backend trial runs): ask again at once
            return self._still_asked()
        window = _Window(*(b - a for a, b in zip(self._start, now)))
        if self._wants_longer_window(window):
            return self._still_asked()  # not clearly waiting on I/O: a longer window
        idle_then = self._idle_start
        self._restart(now)
        return self._judge(window, idle_then, stats, batch_bytes)

    def _judge(self, window: _Window, idle_then, stats, batch_bytes: int | None) -> int | None:
        """A finished window: undo a growth that did not help, or ask for more workers, or None."""
        if self._settling:
            self._settling = False
            return None
        if window.wall <= 0 or window.span <= 0:
            return None
        rate = self.workers * _rows(stats, window.tasks) / window.span  # what the pool delivers while every worker has a task
        delivered = window.rows / window.wall  # what the consumer got (it waited: the workers set it)
        if self._grown is not None:
            undone = self._judge_growth(rate, delivered)
            if undone is not None:
                return undone
        self._asked = None
        return self._ask_for_more(window, idle_then, rate, delivered, batch_bytes)

    def _begin_again(self, now) -> None:
        """A trial, the first batch or a new epoch: a new window, nothing asked for and no growth left to judge."""
        self._restart(now)
        self._asked = self._grown = None
        self._settling = False

    def _settle(self, now) -> None:
        """The count asked for was granted at the last batch: one window to settle, then a judgement.

        In the settling window new workers start and old tasks drain, so it is not judged.
        """
        self._grown, self._asked, self._settling = self._asked[1:], None, True
        self._restart(now)

    def _still_asked(self) -> int | None:
        """The count asked for and not yet granted (asked again), or None."""
        return None if self._asked is None else self._asked[0]

    def _wants_longer_window(self, window: _Window) -> bool:
        """Whether a short window is not enough: the tasks are not clearly off the CPU and nothing is being judged."""
        return (self._seen < self.WINDOW and not self._settling and self._grown is None
                and window.cpu >= CLEAR_IO_SHARE * window.span)

    def _judge_growth(self, rate: float, delivered: float) -> int | None:
        """The count before the last growth if it did not raise the workers' rate or kept fewer samples coming; else None.

        Undone where the backend can: threads that waited on the GIL, not on
        I/O, slowed each other down (their per-task rate can even look higher
        while fewer samples a second arrive). Either way the count grows no more.
        """
        before, before_rate, before_delivered = self._grown
        self._grown = None
        helped = not (rate < self.GAIN * before_rate or delivered < self.KEEP_DELIVERED * before_delivered)
        if helped:
            return None
        self.stopped = self.last_reason = (
            f"growing it from {before} changed the workers' rate {rate / before_rate - 1:+.0%} ({before_rate:.0f} "
            f"-> {rate:.0f} samples/s) and the samples delivered {delivered / max(before_delivered, 1e-9) - 1:+.0%}"
            "; something else limits them (a shared lock or connection limit, the server, the GIL)")
        return before

    def _ask_for_more(self, window: _Window, idle_then, rate: float, delivered: float, batch_bytes: int | None) -> int | None:
        """A larger count when the consumer waited on tasks that wait on I/O while the CPUs were idle; else None."""
        if window.waited / window.wall < self.WAIT_SHARE or window.cpu / window.span >= IO_CPU_SHARE:
            return None
        if _busy(idle_then, self._idle_start):
            self.busy_windows += 1
            return None  # the CPUs are busy (other programs): more workers would wait for them too
        new = min(self._wanted(window.cpu / window.span), self._limit(batch_bytes))
        if new <= self.workers:
            return None
        self._asked = (new, self.workers, rate, delivered)
        self.last_reason = (f"the consumer waited {window.waited / window.wall:.0%} of the time while tasks used the CPU "
                            f"{window.cpu / window.span:.0%} of theirs (they wait on I/O)")
        return new

    def _wanted(self, cpu_share: float) -> int:
        """Workers that would keep every core busy at this CPU share per task; at least twice as many as now."""
        return max(2 * self.workers, math.ceil(self.cores / max(cpu_share, 1e-3)))

    def _limit(self, batch_bytes: int | None) -> int:
        limit = min(MAX_WORKERS, MAX_WORKERS_PER_CORE * self.cores)
        if batch_bytes:  # two batches in flight per worker must fit the memory budget
            limit = min(limit, max(self.workers, MEMORY_BUDGET // (2 * batch_bytes)))
        return limit

    def _window_done(self, now) -> bool:
        """At least `MIN_BATCHES` batches, one task per worker (about one task's time) and `MIN_SECONDS`."""
        return (self._seen >= self.MIN_BATCHES and now[4] - self._start[4] >= self.workers
                and now[3] - self._start[3] >= self.MIN_SECONDS)

    def _restart(self, now) -> None:
        self._start, self._seen, self._idle_start = now, 0, self._idle()


def machine_idle() -> tuple[int, int] | None:
    """The machine's idle and total CPU time so far, in clock ticks (Linux /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[3] + fields[4], sum(fields)  # idle + iowait, of user nice system idle iowait irq softirq steal


class _Window(NamedTuple):
    """What changed over a `WorkerTuner` window: the differences of two `_counters` readings."""

    cpu: float  # task CPU seconds
    span: float  # task span seconds
    waited: float  # seconds the consumer waited
    wall: float  # seconds the window lasted
    tasks: int
    rows: int  # samples delivered


def _counters(stats) -> tuple:
    """(task CPU, task span, consumer wait, wall) seconds, tasks and samples delivered so far in the epoch."""
    return stats.task_cpu_seconds, stats.task_seconds, stats.wait_seconds, stats.wall_seconds, stats.tasks, stats.samples


def _rows(stats, tasks: int) -> int:
    """Rows of the epoch's last ``tasks`` tasks (their records, newest last)."""
    return sum(span[4] for span in itertools.islice(reversed(stats.task_spans), tasks))


def _busy(then, now) -> bool:
    """Whether the machine's CPUs were idle less than `IDLE_SHARE` of the time between two `machine_idle` readings."""
    if then is None or now is None or now[1] <= then[1]:
        return False
    return (now[0] - then[0]) / (now[1] - then[1]) < IDLE_SHARE


def _nbytes(batch) -> int:
    from .._tree import flatten

    _, arrays = flatten(batch)
    return sum(a.nbytes for a in arrays) or 1
