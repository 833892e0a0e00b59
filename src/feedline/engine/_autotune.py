"""The prefetch depth and the worker count, tuned while running (`DepthTuner`, `WorkerTuner`).

Depth: when, within a window of batches, the consumer had to wait *and*
the workers were held back because every prefetch slot was taken, the
depth grows by one batch per worker, up to a memory budget
(`MEMORY_BUDGET` bytes of batches in flight).

Workers: one per core to start with (`feedline.engine._choice`). When the
consumer keeps waiting although the workers' tasks use the CPU less than
half of their time (they wait on files, the network, a remote store),
and the machine's CPUs are idle at least `IDLE_SHARE` of the time (on
Linux, from /proc/stat: tasks that wait for a CPU taken by other programs
also use little CPU, and more workers would not help them), cores are not
what limits them: the worker count doubles (quadruples
when the tasks use under 10 % of a core), up to
`MAX_WORKERS_PER_CORE` per core, `MAX_WORKERS` in all and the memory
budget. Only when the user left ``workers=`` unset, and only for backends
that can add workers while running (threads, processes). The backend is
chosen by `feedline.engine._trial`.
"""

from __future__ import annotations

__all__ = ["DepthTuner", "MAX_WORKERS", "MAX_WORKERS_PER_CORE", "MEMORY_BUDGET", "WorkerTuner"]

MAX_WORKERS_PER_CORE = 8  # workers waiting on I/O: this many per core at most
MAX_WORKERS = 128
IO_CPU_SHARE = 0.5  # tasks using the CPU less than this share of their time wait on something else
IDLE_SHARE = 0.2  # ... and the machine's CPUs idle at least this share of the time: it is not other programs

MEMORY_BUDGET = 1 << 30  # bytes of batches the prefetch depth may keep in flight


class DepthTuner:
    """Raises the prefetch depth while the consumer waits behind full prefetch slots."""

    WINDOW = 16  # batches per decision

    def __init__(self, depth: int, workers: int, enabled: bool):
        self.depth, self.workers, self.enabled = depth, workers, enabled
        self.batch_bytes = None
        self._waited = 0
        self._blocked = 0
        self._seen = 0

    def observe(self, waited: bool, blocked: bool, batch) -> str | None:
        """Record one batch; return a decision (text) when the depth changes."""
        if not self.enabled:
            return None
        if self.batch_bytes is None:
            self.batch_bytes = _nbytes(batch)
        self._seen += 1
        self._waited += waited
        self._blocked += blocked
        if self._seen < self.WINDOW:
            return None
        waited, blocked = self._waited, self._blocked
        self._seen = self._waited = self._blocked = 0
        if waited >= 2 and blocked >= 2:
            limit = max(self.depth, MEMORY_BUDGET // max(1, self.batch_bytes or 1))
            new = min(self.depth + self.workers, limit)
            if new > self.depth:
                old, self.depth = self.depth, new
                return (f"prefetch depth {old} -> {new}: the consumer waited in {waited} of {self.WINDOW} batches "
                        f"while workers were held back by full prefetch slots in {blocked}")
        return None


class WorkerTuner:
    """Doubles the worker count while the consumer waits on workers that wait on I/O (see the module docstring)."""

    WINDOW = 8  # batches per decision: slow batches (I/O) make a long window
    WAIT_SHARE = 0.3  # the consumer waited at least this share of the window's time: input-bound

    def __init__(self, workers: int, cores: int, enabled: bool):
        self.workers, self.cores, self.enabled = workers, cores, enabled
        self.last_reason = ""
        self.busy_windows = 0  # windows that asked for more workers while other programs kept the CPUs busy
        self._seen = 0
        self._start = None  # the epoch's (task CPU, task span, consumer wait, wall) seconds when the window began
        self._idle_start = None  # the machine's (idle, total) CPU time then (None: not known here)

    def observe(self, stats, batch_bytes: int | None) -> int | None:
        """Record one batch (``stats``: the epoch's counters so far); return a new worker count, or None."""
        if not self.enabled:
            return None
        now = (stats.task_cpu_seconds, stats.task_seconds, stats.wait_seconds, stats.wall_seconds)
        if self._start is None or now[3] < self._start[3]:  # first batch, or a new epoch's counters
            self._start, self._seen, self._idle_start = now, 0, machine_idle()
            return None
        self._seen += 1
        if self._seen < self.WINDOW:
            return None
        cpu, span, waited, wall = (b - a for a, b in zip(self._start, now))
        idle_now, idle_then = machine_idle(), self._idle_start
        self._start, self._seen, self._idle_start = now, 0, idle_now
        if wall <= 0 or span <= 0 or waited / wall < self.WAIT_SHARE or cpu / span >= IO_CPU_SHARE:
            return None
        if idle_now is not None and idle_then is not None and idle_now[1] > idle_then[1]:
            if (idle_now[0] - idle_then[0]) / (idle_now[1] - idle_then[1]) < IDLE_SHARE:
                self.busy_windows += 1
                return None  # the CPUs are busy (other programs): more workers would wait for them too
        limit = min(MAX_WORKERS, MAX_WORKERS_PER_CORE * self.cores)
        if batch_bytes:  # two batches in flight per worker must fit the memory budget
            limit = min(limit, max(self.workers, MEMORY_BUDGET // (2 * batch_bytes)))
        new = min((4 if cpu / span < 0.1 else 2) * self.workers, limit)  # nearly no CPU: grow faster
        if new <= self.workers:
            return None
        self.workers = new
        self.last_reason = (f"the consumer waited {waited / wall:.0%} of the time while tasks used the CPU "
                            f"{cpu / span:.0%} of theirs (they wait on I/O)")
        return new


def machine_idle() -> tuple[int, int] | None:
    """The machine's idle and total CPU time so far, in clock ticks (Linux /proc/stat; None elsewhere)."""
    try:
        with open("/proc/stat", "rb") as f:
            fields = [int(v) for v in f.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    return fields[3] + fields[4], sum(fields)  # idle + iowait, of user nice system idle iowait irq softirq steal


def _nbytes(batch) -> int:
    from .._tree import flatten

    _, arrays = flatten(batch)
    return sum(a.nbytes for a in arrays) or 1
