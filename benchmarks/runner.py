"""Running loaders on workloads: timing, repetitions, checks. The one loop.

The protocol, per workload:
1. Reference: every sample's output digest (`workloads.digests`), computed
   here, one by one, with the workload's per-sample function.
2. Warm-up: every loader runs one epoch, untimed, and each of its rows is
   compared with the reference (bit-identical for loaders that run the
   shared function; shape and dtype for native loaders, which run their own
   ops), so a loader that is fast because it is wrong is caught. In quick
   mode there is no separate warm-up: the one timed run is checked.
3. Repetitions: ``reps`` rounds; in each round every loader runs one epoch,
   in a seeded shuffled order (`round_order`), so drift of the machine over
   time spreads over all loaders instead of favouring one, and no loader
   always runs right after the same one.
4. Each run builds the loader, iterates one epoch and closes it. The clock
   starts before the loader is built, so time to first batch includes
   worker start-up, as a user experiences it. Reported per run:
   - ``first``: seconds from the start to the first batch;
   - ``samples/s``: samples of the epoch / seconds from the start to the
     last batch (start-up included);
   - ``steady``: samples/s over the second half of the epoch's batches,
     when every loader's workers are long up (start-up excluded);
   - ``close``: seconds to release the loader after the last batch;
   - ``cpu``: CPU seconds of this process and its reaped children (the
     workers; the runner waits up to 3 s for them to exit) over the run,
     divided by wall time x cores;
   - ``peak_pss`` / ``peak_rss``: the largest sum, over this process and
     all its descendants, of PSS (proportional set size: a page shared by
     N processes counts 1/N in each, so the sum counts it once: fair to fork,
     whose children share the parent's pages, and to shared-memory batches,
     which USS would leave out) and of RSS (which counts a shared page once
     per process), sampled every 0.5 s by a thread (psutil);
     ``added_pss``: peak PSS minus the tree's PSS just before the run (what
     the loader added);
   - ``foreign``: CPU used on the machine by processes outside this tree
     during the run (from ``/proc/stat``), as a share of all cores;
   - ``io_wait``: seconds during which some task on the machine waited for
     the disk (Linux pressure stall information), and ``major_faults``:
     pages this tree had to read from disk. They explain a slow start that
     used no CPU.
   Other work on the machine (a test suite running beside the benchmark)
   corrupts the numbers, so before each run the runner waits until the
   machine is quiet, and a run during which foreign load exceeded
   `FOREIGN_LIMIT` is repeated (up to `RETRIES` times; the cleanest is kept
   and the report shows the foreign load of what was kept).
   Every run checks exactly-once (the index carried by each sample must
   cover ``0..N-1`` with no gap and no repeat) and that nothing is left
   behind after close: no child process, no new /dev/shm segment, no
   feedline thread.
5. Summary: median over the repetitions, with min-max as the spread;
   ratios to the serial loop's median, and the fraction of the ideal,
   ``samples_per_s / (cores * serial samples_per_s)``.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import gc
import multiprocessing
import os
import random
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

__all__ = ["Measurement", "Summary", "TreeMemory", "as_json", "measure", "run_one", "run_suite", "threads_rate"]

RUN_TIMEOUT = 300.0  # seconds one run may take before the process dumps its stacks and exits
FOREIGN_LIMIT = 0.10  # share of all cores other processes may use during a run before it is redone
QUIET_LIMIT = 0.05  # the machine counts as quiet below this share of all cores busy
RETRIES = 2
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
    peak_pss: float = float("nan")  # bytes: largest sum of PSS over the process tree during the run
    peak_rss: float = float("nan")  # bytes: the same for RSS
    added_pss: float = float("nan")  # bytes: peak_pss minus the tree's PSS before the run
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
    def peak_pss(self) -> float:
        return self._median("peak_pss")

    @property
    def peak_rss(self) -> float:
        return self._median("peak_rss")

    @property
    def added_pss(self) -> float:
        return self._median("added_pss")

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
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime + _helper_cpu_seconds()


def _helper_pids() -> set[int]:
    """feedline's fork servers: long-lived children whose own children are feedline's process workers."""
    if "feedline" not in sys.modules:
        return set()
    from feedline import testing

    return set(testing.helper_pids())


def _helper_cpu_seconds() -> float:
    """CPU of the fork servers, of the workers they reaped, and of their workers still running.

    None of it is in RUSAGE_CHILDREN until a server exits (and a server
    that outlives the process measuring it never is), so a loader's CPU
    would otherwise leave out its process workers and count them as other
    programs' load.
    """
    total = 0.0
    for pid in _helper_pids():
        fields = _stat_fields(pid)
        if fields is None:
            continue
        total += _ticks(fields[11:15])  # utime, stime, cutime, cstime (the reaped workers)
        for child in _children(pid):
            child_fields = _stat_fields(child)
            if child_fields is not None:
                total += _ticks(child_fields[11:13])  # a worker still running: utime, stime
    return total


def _stat_fields(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name (field 3 onwards), or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _children(pid: int) -> list[int]:
    """The live children of ``pid`` (Linux: every thread's ``children`` list)."""
    kids = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(v) for v in f.read().split()]
        except OSError:
            continue
    return kids


def _ticks(values) -> float:
    return sum(int(v) for v in values) / os.sysconf("SC_CLK_TCK")


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


def threads_rate(fn, items, threads: int, n: int) -> tuple[float, float]:
    """Calls/s of ``fn`` over ``n`` items of ``items`` (cycled) on ``threads`` threads started together.

    Returns ``(rate, foreign)``: the share of the cores other processes used
    meanwhile (0 where /proc/stat is unavailable). For the decoder
    micro-benchmarks (`decoders`, `audio decoders`).
    """
    share = n // threads
    barrier = threading.Barrier(threads + 1)

    def work(offset):
        barrier.wait()
        for k in range(share):
            fn(items[(offset + k) % len(items)])

    pool = [threading.Thread(target=work, args=(t * share,)) for t in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    b0, c0, t0 = _machine_busy_seconds(), _cpu_seconds(), time.perf_counter()
    for t in pool:
        t.join()
    wall = time.perf_counter() - t0
    b1 = _machine_busy_seconds()
    foreign = 0.0 if b0 is None or b1 is None else max(0.0, (b1 - b0) - (_cpu_seconds() - c0)) / (wall * cores())
    return share * threads / wall, foreign


def _shm_names() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def _live_children() -> list[int]:
    """Live children of this process, and of feedline's fork servers (whose children are workers)."""
    helpers = _helper_pids()
    parents, found = {os.getpid()} | helpers, []
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
        if int(fields[1]) not in parents or fields[0] == "Z" or int(entry) in helpers:
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


def steady_rate(stamps: list[float], counts: list[int], start: float | None = None) -> float:
    """Samples/s over the second half of an epoch's batches: least-squares slope.

    The slope of cumulative samples against arrival time, over the batches
    from the middle of the epoch on, when start-up is long over. A fit, not
    first-to-last, because parallel loaders deliver batches in bursts (two
    workers finish at nearly the same moment), which makes any two-point
    estimate depend on where a burst falls. NaN with fewer than 8 batches,
    and NaN when the second half arrived within 10 % of the epoch (measured
    from ``start``): the loader had computed it ahead during a long start-up,
    so the slope measures the consumer, not the loader.
    """
    if len(stamps) < 8:
        return float("nan")
    half = len(stamps) // 2
    if start is not None and stamps[-1] - stamps[half] < 0.1 * (stamps[-1] - start):
        return float("nan")
    t = np.asarray(stamps[half:]) - stamps[half]
    cum = np.cumsum(counts)[half:]
    if t[-1] <= 0:
        return float("nan")
    slope = np.polyfit(t, cum, 1)[0]
    return float(slope)


class TreeMemory(threading.Thread):
    """Samples the memory of this process and all its descendants every ``interval`` s (psutil).

    One sample of a parent that has TensorFlow, torch and Grain loaded costs
    ~18 ms of CPU (the kernel walks thousands of mappings for smaps_rollup),
    so the default interval is 0.5 s (~4 % of one core, taken from every
    loader alike; at 0.1 s it cost ~18 % and slowed the parallel loaders more
    than the serial loop). A sample is also taken at the start and the end.

    ``peak_pss`` and ``peak_rss`` are the largest sums seen; ``start_pss`` the
    first sample. PSS (each page divided by the number of processes sharing
    it) is read from ``/proc/PID/smaps_rollup``; a process that exits between listing and
    reading is skipped. Every third sample also records the /dev/shm files
    the tree has mapped (``shm``), so a segment left behind after close can be
    told from one another program on the machine created.
    """

    def __init__(self, interval: float = 0.5):
        super().__init__(name="bench-memory", daemon=True)
        import psutil

        self._psutil = psutil
        self.interval = interval
        self.peak_pss = self.peak_rss = 0.0
        self.start_pss = float("nan")
        self.shm: set[str] = set()
        self._count = 0
        self._stop_event = threading.Event()
        self._me = psutil.Process()
        self.sample()
        self.start_pss = self.peak_pss

    def _mapped_shm(self, pid: int) -> None:
        try:
            with open(f"/proc/{pid}/maps", "rb") as f:
                text = f.read()
        except OSError:
            return
        at = text.find(b"/dev/shm/")
        while at >= 0:
            end = text.find(b"\n", at)
            self.shm.add(text[at + 9 : end if end >= 0 else None].split(b" ")[0].decode(errors="replace"))
            at = text.find(b"/dev/shm/", at + 9)

    def sample(self) -> None:
        pss = rss = 0
        try:
            procs = [self._me] + self._me.children(recursive=True)
        except self._psutil.Error:
            procs = [self._me]
        maps = self._count % 3 == 0
        self._count += 1
        for p in procs:
            try:
                info = p.memory_full_info()
            except (self._psutil.Error, OSError):
                continue
            pss += info.pss
            rss += info.rss
            if maps:
                self._mapped_shm(p.pid)
        self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stop_event.set()
        self.join()
        self._count = 0
        self.sample()


def _settle_children(limit: float = 3.0) -> list[int]:
    """Reap exited workers (so their CPU time counts); the children still alive after ``limit`` s."""
    deadline = time.monotonic() + limit
    while True:
        multiprocessing.active_children()  # joins multiprocessing's finished children
        alive = _live_children()
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def _own_leftovers(new: set[str], mapped: set[str]) -> list[str]:
    """The new /dev/shm names that are this tree's: mapped by it during the run, or named for this process."""
    prefix = f"feedline_{os.getpid()}_"
    return sorted(n for n in new if n in mapped or n.startswith(prefix))


def reference(w: workloads_mod.Workload) -> list:
    """Every sample's expected row digest (`workloads.digests`), computed here, one by one."""
    return [workloads_mod.digests(workloads_mod.collate([w.sample(i)]))[0] for i in range(len(w))]


def _check(batch, idx, expected: list, exact: bool) -> str:
    """'' if every row of ``batch`` matches the reference for its index, else what differs."""
    got = workloads_mod.digests(tuple(batch[:-1]) + (idx,))
    for k, i in enumerate(idx):
        if not 0 <= i < len(expected):
            continue  # reported by the exactly-once check
        want = expected[i]
        if got[k][0] != want[0]:
            return f"sample {i}: shapes/dtypes {got[k][0]}, expected {want[0]}"
        if exact and got[k][1] != want[1]:
            return f"sample {i}: values differ from the reference"
    return ""


def measure(loader, w: workloads_mod.Workload, expected: list | None = None, exact: bool = True) -> Measurement:
    """One epoch of ``loader`` on ``w``: build, iterate, close, check."""
    m = Measurement()
    gc.collect()
    ids, stamps, counts = [], [], []
    wrong = []
    shm0 = _shm_names()
    memory = TreeMemory()
    faulthandler.dump_traceback_later(RUN_TIMEOUT, exit=True)
    try:
        busy0 = _machine_busy_seconds()
        io0, faults0 = _io_stall_seconds(), _major_faults()
        cpu0 = _cpu_seconds()
        memory.start()
        t0 = time.perf_counter()
        with loader(w) as run:
            m.detail, m.why = run.detail, run.why
            for batch in run.batches:
                now = time.perf_counter()
                idx = np.array(batch[-1], dtype=np.int64).reshape(-1)  # a copy: a view would pin a shared-memory slot
                stamps.append(now)
                counts.append(len(idx))
                ids.append(idx)
                if expected is not None and len(wrong) < 3:
                    problem = _check(batch, idx, expected, exact)
                    if problem:
                        wrong.append(problem)
                del batch
            t_last = time.perf_counter()
            m.detail, m.why = run.detail, run.why  # again: feedline's automatic choice may have switched backend mid-epoch
            run = None  # the loader's iterator (its queues, semaphores, segments) must not outlive the epoch
        t_closed = time.perf_counter()
        memory.stop()
        alive = _settle_children()
        cpu = _cpu_seconds() - cpu0
        busy = _machine_busy_seconds()
        m.io_wait, m.major_faults = _io_stall_seconds() - io0, _major_faults() - faults0
    finally:
        faulthandler.cancel_dump_traceback_later()
        if memory.is_alive():
            memory.stop()
    m.samples = sum(counts)
    m.seconds = (stamps[-1] if stamps else t_last) - t0
    m.first = stamps[0] - t0 if stamps else float("nan")
    m.close = t_closed - t_last
    m.cpu = cpu / max(t_closed - t0, 1e-9) / cores()
    m.peak_pss, m.peak_rss = memory.peak_pss, memory.peak_rss
    m.added_pss = memory.peak_pss - memory.start_pss
    if busy0 is not None:
        m.foreign = max(0.0, (busy - busy0) - cpu) / max(t_closed - t0, 1e-9) / cores()
    m.steady = steady_rate(stamps, counts, t0)
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
        problems.append(f"output differs from the reference ({wrong[0]})")
    leaked = _own_leftovers(_shm_names() - shm0, memory.shm)
    deadline = time.monotonic() + 1.0
    while leaked and time.monotonic() < deadline:  # some loaders unlink from a background thread
        gc.collect()
        time.sleep(0.1)
        leaked = _own_leftovers(_shm_names() - shm0, memory.shm)
    if leaked:
        problems.append(f"{len(leaked)} /dev/shm entries left after close: {leaked[:3]}")
    if alive:
        problems.append(f"{len(alive)} child processes alive 3 s after close")
    threads = [t.name for t in threading.enumerate() if t.name.startswith("feedline") and t.name != "feedline-forkserver"]
    if threads:
        problems.append(f"threads alive after close: {threads[:3]}")
    m.problem = "; ".join(problems)
    return m


def _line(m: Measurement) -> str:
    return (f"{m.samples_per_s:10.0f} samples/s  steady {m.steady:10.0f}  first {m.first:6.3f} s  "
            f"close {m.close:5.3f} s  cpu {m.cpu:4.0%}  PSS {m.peak_pss / 2**20:6.0f} MiB "
            f"(+{m.added_pss / 2**20:5.0f})  foreign {m.foreign:4.0%}  io wait {m.io_wait:5.2f} s  "
            f"major faults {m.major_faults:5d}  {m.problem or 'ok'}")


def run_one(w: workloads_mod.Workload, s: Summary, expected: list | None, max_wait: float, retries: int,
            log=print) -> Measurement | None:
    """One epoch of loader ``s.loader`` on ``w``, redone while other processes disturb it; None if it failed.

    A loader that raises is recorded in ``s.error`` (and its traceback
    printed) and not run again; the other loaders still run.
    """
    if s.error:
        return None
    best = None
    exact = s.loader not in w.native or s.loader in w.native_exact
    for attempt in range(1 + retries):
        wait_quiet(max_wait, log)
        try:
            m = measure(loaders_mod.find(s.loader, w), w, expected, exact)
        except Exception as e:  # noqa: BLE001 - any failure of a loader is a result to report
            s.error = f"{type(e).__name__}: {str(e)[:300]}"
            log(f"[{w.name}] {s.loader} FAILED: {s.error}")
            traceback.print_exc(file=sys.stderr)
            return None
        if best is None or m.foreign < best.foreign:
            best = m
        if m.foreign <= FOREIGN_LIMIT:
            break
        log(f"    {s.loader}: other processes used {m.foreign:.0%} of the cores during the run; "
            f"{'running it again' if attempt < retries else 'keeping the cleanest run'}")
    return best


def round_order(names: list, rep: int) -> list:
    """The loaders of round ``rep`` in a shuffled order, the same for every run of the benchmark.

    Not a rotation: rotated, a loader always ran right after the same
    one, and what a run leaves behind slows the next (on the store
    workload, 2 cores: feedline runs right after the serial loop 1,580-1,710
    samples/s, after another feedline loader 1,900; the automatic choice,
    always behind the serial loop, read 0.86 of the hand setting in two
    full runs against 0.98-0.99 of it in alternating pairs).
    """
    order = list(names)
    random.Random(rep).shuffle(order)
    return order


def run_suite(workload_names, loader_names, quick: bool, reps: int, warmup: bool, log=print,
              max_wait: float = 120.0, retries: int = RETRIES) -> dict:
    """Run every loader on every workload; return the results by workload.

    ``loader_names`` may name generic loaders and native ones; each workload
    runs those that apply to it (`loaders.applies`) and records why the
    others were skipped. Without ``warmup`` the timed runs are checked.
    """
    results = {}
    for wname in workload_names:
        t = time.perf_counter()
        w = workloads_mod.build(wname, quick)
        log(f"[{wname}] {w.description} (data ready in {time.perf_counter() - t:.1f} s)")
        names, skipped = [], {}
        for n in loader_names:
            why = loaders_mod.applies(n, w)
            if why:
                skipped[n] = why
            else:
                names.append(n)
        for n, why in skipped.items():
            if n in w.native or n in loaders_mod.LOADERS or n in w.skipped:
                log(f"[{wname}] {n}: skipped ({why})")
        loaders_mod.prepare(names)  # imports (torch, TensorFlow, Grain) happen here, not inside a timed run
        wait_quiet(max_wait, log)
        per_sample = workloads_mod.per_sample_seconds(w)
        if per_sample is not None:
            log(f"[{wname}] per-sample function: {per_sample * 1e3:.2f} ms (median, this process)")
        t = time.perf_counter()
        expected = reference(w)
        log(f"[{wname}] reference output computed in {time.perf_counter() - t:.2f} s")
        summaries = {n: Summary(n) for n in names}
        if warmup:
            for name in names:
                m = run_one(w, summaries[name], expected, max_wait, retries, log)
                if m is not None:
                    summaries[name].warmup = m
                    log(f"[{wname}] warm-up {name:17s} {_line(m)}")
        for rep in range(reps):
            for name in round_order(names, rep):
                m = run_one(w, summaries[name], None if warmup else expected, max_wait, retries, log)
                if m is not None:
                    summaries[name].runs.append(m)
                    log(f"[{wname}] rep {rep + 1}/{reps} {name:17s} {_line(m)}")
        results[wname] = {"workload": w, "per_sample": per_sample, "summaries": summaries, "skipped": skipped}
    return results


def as_json(results) -> dict:
    """Raw numbers, for later tooling (charts, comparisons)."""
    out = {}
    for wname, r in results.items():
        out[wname] = {
            "description": r["workload"].description,
            "per_sample_seconds": r["per_sample"],
            "skipped": r["skipped"],
            "loaders": {
                name: {
                    "detail": s.detail,
                    "error": s.error,
                    "warmup": dataclasses.asdict(s.warmup) if s.warmup else None,
                    "runs": [dataclasses.asdict(m) | {"samples_per_s": m.samples_per_s} for m in s.runs],
                }
                for name, s in r["summaries"].items()
            },
        }
    return out
