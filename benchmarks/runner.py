"""Running loaders on workloads: timing, repetitions, checks, the report.

The protocol, per workload:
1. Warm-up: every loader runs one epoch, untimed, and its batches are
   compared with the reference (the per-sample function applied in this
   process), so a loader that is fast because it is wrong is caught.
2. Repetitions: ``reps`` rounds; in each round every loader runs one epoch,
   in an order rotated by one each round (alternating, so drift of the
   machine over time spreads over all loaders instead of favouring one).
3. Each run builds the loader, iterates one epoch and closes it. The clock
   starts before the loader is built, so time to first batch includes
   worker start-up, as a user experiences it. Reported per run:
   - ``first``: seconds from the start to the first batch;
   - ``samples/s``: samples of the epoch / seconds from the start to the
     last batch (start-up included);
   - ``steady``: samples/s over the second half of the epoch's batches,
     when every loader's workers are long up (start-up excluded);
   - ``close``: seconds to release the loader after the last batch;
   - ``cpu``: CPU seconds of this process and its reaped children (the
     workers) over the run, divided by wall time x cores;
   - ``foreign``: CPU used on the machine by processes outside this tree
     during the run (from ``/proc/stat``), as a share of all cores;
   - ``io_wait``: seconds during which some task on the machine waited for
     the disk (Linux pressure stall information), and ``major_faults``:
     pages this tree had to read from disk (imports of modules evicted from
     the page cache, for instance). They explain a slow start that used no
     CPU.
   Other work on the machine (a test suite running beside the benchmark)
   corrupts the numbers, so before each run the runner waits until the
   machine is quiet, and a run during which foreign load exceeded
   `FOREIGN_LIMIT` is repeated (up to `RETRIES` times; the cleanest is kept
   and the report shows the foreign load of what was kept).
   Every run checks exactly-once: the index carried by each sample must
   cover ``0..N-1`` with no gap and no repeat.
4. Summary: median over the repetitions, with min-max as the spread;
   ratios to the serial loop's median, and the fraction of the ideal,
   ``samples_per_s / (cores * serial samples_per_s)``.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import gc
import os
import resource
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from . import loaders as loaders_mod
from . import workloads as workloads_mod

__all__ = ["Measurement", "Summary", "run_suite"]

RUN_TIMEOUT = 300.0  # seconds one run may take before the process dumps its stacks and exits
FOREIGN_LIMIT = 0.10  # share of all cores other processes may use during a run before it is redone
QUIET_LIMIT = 0.05  # the machine counts as quiet below this share of all cores busy
RETRIES = 3
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Measurement:
    """One epoch of one loader."""

    samples: int = 0
    seconds: float = 0.0  # start to last batch
    first: float = 0.0
    steady: float = 0.0  # samples/s over the second half of the batches
    close: float = 0.0
    cpu: float = 0.0  # utilisation of all cores, 0..1
    foreign: float = 0.0  # share of all cores used by processes outside this tree
    io_wait: float = 0.0  # seconds some task on the machine was stalled on I/O (PSI)
    major_faults: int = 0  # pages this process tree read from disk
    exactly_once: bool = False
    problem: str = ""  # what the checks found (missing/duplicate indices, wrong data, leaks)
    detail: str = ""
    why: str = ""

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Summary:
    """All repetitions of one loader on one workload."""

    loader: str
    runs: list = field(default_factory=list)
    warmup: Measurement | None = None
    error: str = ""

    def _median(self, attr):
        values = [getattr(m, attr) for m in self.runs]
        return statistics.median(values) if values else float("nan")

    def _span(self, attr):
        values = [getattr(m, attr) for m in self.runs]
        return (min(values), max(values)) if values else (float("nan"), float("nan"))

    @property
    def sps(self) -> float:
        return self._median("samples_per_s")

    @property
    def sps_span(self):
        return self._span("samples_per_s")

    @property
    def steady(self) -> float:
        return self._median("steady")

    @property
    def first(self) -> float:
        return self._median("first")

    @property
    def first_span(self):
        return self._span("first")

    @property
    def close(self) -> float:
        return self._median("close")

    @property
    def cpu(self) -> float:
        return self._median("cpu")

    @property
    def foreign(self) -> float:
        return self._median("foreign")

    @property
    def foreign_max(self) -> float:
        return self._span("foreign")[1]

    @property
    def io_wait_max(self) -> float:
        return self._span("io_wait")[1]

    @property
    def exactly_once(self) -> bool:
        runs = self.runs + ([self.warmup] if self.warmup else [])
        return bool(runs) and all(m.exactly_once for m in runs) and not self.error

    @property
    def problems(self) -> list[str]:
        runs = ([self.warmup] if self.warmup else []) + self.runs
        return sorted({m.problem for m in runs if m.problem})

    @property
    def detail(self) -> str:
        return self.runs[-1].detail if self.runs else (self.warmup.detail if self.warmup else "")

    @property
    def why(self) -> str:
        return self.runs[-1].why if self.runs else (self.warmup.why if self.warmup else "")


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def _cpu_seconds() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def _io_stall_seconds() -> float:
    """Seconds since boot during which some task waited for I/O (0 where PSI is unavailable)."""
    try:
        with open("/proc/pressure/io") as f:
            return int(f.readline().split("total=")[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


def _major_faults() -> int:
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_majflt + kids.ru_majflt


def _machine_busy_seconds() -> float | None:
    """CPU seconds the whole machine has been busy (all processes), or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    # guest time is already included in user time
    return (sum(fields[:8]) - idle) / _TICK


def wait_quiet(max_wait: float, log=print) -> float:
    """Wait (up to ``max_wait`` s) until other processes leave the cores idle; return the load seen last."""
    if max_wait <= 0 or _machine_busy_seconds() is None:
        return 0.0
    deadline = time.monotonic() + max_wait
    warned = False
    while True:
        b0, c0, t0 = _machine_busy_seconds(), _cpu_seconds(), time.perf_counter()
        time.sleep(0.3)
        load = max(0.0, (_machine_busy_seconds() - b0) - (_cpu_seconds() - c0)) / ((time.perf_counter() - t0) * cores())
        if load < QUIET_LIMIT or time.monotonic() > deadline:
            if warned:
                log(f"    ... machine {'quiet' if load < QUIET_LIMIT else f'still {load:.0%} busy; going ahead'}")
            return load
        if not warned:
            log(f"    machine busy ({load:.0%} of the cores used by other processes): waiting up to {max_wait:.0f} s")
            warned = True


def _feedline_segments() -> list[str]:
    prefix = f"feedline_{os.getpid()}_"
    try:
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))
    except FileNotFoundError:
        return []


def _live_children() -> list[int]:
    me, found = os.getpid(), []
    try:
        entries = os.listdir("/proc")
    except FileNotFoundError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) != me or fields[0] == "Z":
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            cmdline = b""
        if b"resource_tracker" in cmdline:
            continue  # multiprocessing's helper, started once by the first spawn DataLoader; not a leak
        found.append(int(entry))
    return found


def steady_rate(stamps: list[float], counts: list[int]) -> float:
    """Samples/s over the second half of an epoch's batches: least-squares slope.

    The slope of cumulative samples against arrival time, over the batches
    from the middle of the epoch on, when start-up is long over. A fit, not
    first-to-last, because parallel loaders deliver batches in bursts (two
    workers finish at nearly the same moment), which makes any two-point
    estimate depend on where a burst falls. NaN with fewer than 8 batches.
    """
    if len(stamps) < 8:
        return float("nan")
    half = len(stamps) // 2
    t = np.asarray(stamps[half:]) - stamps[half]
    cum = np.cumsum(counts)[half:]
    if t[-1] <= 0:
        return float("nan")
    slope = np.polyfit(t, cum, 1)[0]
    return float(slope)


def reference(w: workloads_mod.Workload) -> np.ndarray:
    """Every sample's expected output row, computed here, one by one."""
    if w.fn is None:
        return w.data
    return np.stack([w.fn(w.read(i))[0] for i in range(len(w))])


def measure(loader, w: workloads_mod.Workload, expected: np.ndarray | None = None) -> Measurement:
    """One epoch of ``loader`` on ``w``: build, iterate, close, check."""
    m = Measurement()
    gc.collect()
    ids, stamps, counts = [], [], []
    wrong = 0
    faulthandler.dump_traceback_later(RUN_TIMEOUT, exit=True)
    try:
        busy0 = _machine_busy_seconds()
        io0, faults0 = _io_stall_seconds(), _major_faults()
        cpu0 = _cpu_seconds()
        t0 = time.perf_counter()
        with loader(w) as run:
            m.detail, m.why = run.detail, run.why
            for x, idx in run.batches:
                now = time.perf_counter()
                idx = np.array(idx)  # a copy: holding a view would pin a shared-memory slot
                stamps.append(now)
                counts.append(len(idx))
                ids.append(idx)
                if expected is not None and not np.array_equal(np.asarray(x), expected[idx]):
                    wrong += 1
            t_last = time.perf_counter()
        t_closed = time.perf_counter()
        cpu = _cpu_seconds() - cpu0
        busy = _machine_busy_seconds()
        m.io_wait, m.major_faults = _io_stall_seconds() - io0, _major_faults() - faults0
    finally:
        faulthandler.cancel_dump_traceback_later()
    m.samples = sum(counts)
    m.seconds = (stamps[-1] if stamps else t_last) - t0
    m.first = stamps[0] - t0 if stamps else float("nan")
    m.close = t_closed - t_last
    m.cpu = cpu / max(t_closed - t0, 1e-9) / cores()
    if busy0 is not None:
        m.foreign = max(0.0, (busy - busy0) - cpu) / max(t_closed - t0, 1e-9) / cores()
    m.steady = steady_rate(stamps, counts)
    problems = []
    seen = np.concatenate(ids) if ids else np.empty(0, np.int64)
    n = len(w)
    counts_per_index = np.bincount(seen[(seen >= 0) & (seen < n)], minlength=n) if len(seen) else np.zeros(n, int)
    missing, repeated = int((counts_per_index == 0).sum()), int((counts_per_index > 1).sum())
    outside = int(((seen < 0) | (seen >= n)).sum())
    m.exactly_once = missing == 0 and repeated == 0 and outside == 0 and len(seen) == n
    if not m.exactly_once:
        problems.append(f"exactly-once failed: {missing} missing, {repeated} repeated, {outside} out of range")
    if wrong:
        problems.append(f"{wrong} batches differ from the reference output")
    time.sleep(0.05)  # let exiting workers be reaped before looking for leftovers
    leaked = _feedline_segments()
    if leaked:
        problems.append(f"shared-memory segments left after close: {leaked[:3]}")
    children = _live_children()
    if children:
        problems.append(f"{len(children)} child processes alive after close")
    threads = [t.name for t in threading.enumerate() if t.name.startswith("feedline")]
    if threads:
        problems.append(f"threads alive after close: {threads[:3]}")
    m.problem = "; ".join(problems)
    return m


def run_suite(workload_names, loader_names, quick: bool, reps: int, warmup: bool, log=print, max_wait: float = 120.0, retries: int = RETRIES) -> dict:
    """Run every loader on every workload; return the results by workload."""
    results = {}
    for wname in workload_names:
        w = workloads_mod.build(wname, quick)
        wait_quiet(max_wait, log)
        per_sample = workloads_mod.per_sample_seconds(w)
        log(f"[{wname}] {w.description}")
        if per_sample is not None:
            log(f"[{wname}] per-sample function: {per_sample * 1e3:.2f} ms (median, this process)")
        t = time.perf_counter()
        expected = reference(w)
        log(f"[{wname}] reference output computed in {time.perf_counter() - t:.2f} s")
        names = [n for n in loader_names if loaders_mod.applies(n, w)]
        loaders_mod.prepare(names)  # imports (torch) happen here, not inside a timed run
        summaries = {n: Summary(n) for n in names}

        def one(name, check):
            s = summaries[name]
            if s.error:
                return None
            best = None
            for attempt in range(1 + retries):
                wait_quiet(max_wait, log)
                try:
                    m = measure(loaders_mod.LOADERS[name], w, expected if check else None)
                except Exception as e:  # a loader that fails is reported, the others still run
                    s.error = f"{type(e).__name__}: {e}"
                    log(f"[{wname}] {name} FAILED: {s.error}")
                    traceback.print_exc(file=sys.stderr)
                    return None
                if best is None or m.foreign < best.foreign:
                    best = m
                if m.foreign <= FOREIGN_LIMIT:
                    break
                log(f"    {name}: other processes used {m.foreign:.0%} of the cores during the run; "
                    f"{'running it again' if attempt < retries else 'keeping the cleanest run'}")
            return best

        if warmup:
            for name in names:
                m = one(name, check=True)
                if m is not None:
                    summaries[name].warmup = m
                    log(f"[{wname}] warm-up {name:17s} {m.samples_per_s:10.0f} samples/s  first {m.first:6.3f} s  "
                        f"cpu {m.cpu:4.0%}  io wait {m.io_wait:5.2f} s  major faults {m.major_faults:5d}  {m.problem or 'ok'}")
        for rep in range(reps):
            order = names[rep % len(names):] + names[: rep % len(names)]
            for name in order:
                m = one(name, check=False)
                if m is not None:
                    summaries[name].runs.append(m)
                    log(
                        f"[{wname}] rep {rep + 1}/{reps} {name:17s} {m.samples_per_s:10.0f} samples/s  "
                        f"steady {m.steady:10.0f}  first {m.first:6.3f} s  close {m.close:5.3f} s  "
                        f"cpu {m.cpu:4.0%}  foreign {m.foreign:4.0%}  io wait {m.io_wait:5.2f} s  "
                        f"major faults {m.major_faults:5d}  {m.problem or 'ok'}"
                    )
        results[wname] = {"workload": w, "per_sample": per_sample, "summaries": summaries}
    return results


def as_json(results) -> dict:
    """Raw numbers, for later tooling (charts, comparisons)."""
    out = {}
    for wname, r in results.items():
        out[wname] = {
            "description": r["workload"].description,
            "per_sample_seconds": r["per_sample"],
            "loaders": {
                name: {
                    "detail": s.detail,
                    "error": s.error,
                    "runs": [dataclasses.asdict(m) | {"samples_per_s": m.samples_per_s} for m in s.runs],
                }
                for name, s in r["summaries"].items()
            },
        }
    return out
