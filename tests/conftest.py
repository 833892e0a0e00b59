"""Shared fixtures: every test is checked for leaked workers, threads and segments."""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
import time

import pytest

# The automatic choice remembers its verdicts across runs (feedline.engine._remembered); tests that
# iterate the same work would otherwise start on an earlier test's (or run's) verdict. Its own tests turn it on.
os.environ["FEEDLINE_REMEMBER"] = "0"

BACKENDS = ["serial", "thread", "process"]


def memory_files(prefix: str, pids=None) -> set[str]:
    """Memory files (memfd: segments made where /dev/shm was full) named ``prefix...`` that processes ``pids`` (all: None) hold.

    They are listed nowhere but in their holders' descriptors, and go with
    the last of them, so this is where a memory file can leak.
    """
    if pids is None:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()] if os.path.isdir("/proc") else []
    found = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("/memfd:" + prefix):
                found.add(target.split(" ")[0])  # "/memfd:<name> (deleted)"
    return found


def feedline_segments() -> set[str]:
    """Shared-memory segments of this test process (Linux lists them in /dev/shm), files it spilled, memory files its workers hold."""
    from feedline import testing

    prefix = f"feedline_{os.getpid()}_"
    found = set()
    for folder in testing.segment_folders():
        try:
            found |= {os.path.join(folder, n) for n in os.listdir(folder) if n.startswith(prefix)}
        except (FileNotFoundError, NotADirectoryError):
            pass
    return found | memory_files(prefix, [os.getpid(), *child_pids()])


def child_pids() -> set[int]:
    """Live (non-zombie) child processes of this test process, and of its fork servers.

    Process workers are forked by feedline's fork server (a long-lived helper,
    `feedline.testing.helper_pids`), so they count as ours; the server does not.
    """
    from feedline import testing

    helpers = set(testing.helper_pids())
    parents = {os.getpid()} | helpers
    children = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, ppid = fields[0], int(fields[1])
        if ppid in parents and state != "Z":
            children.add(int(entry))
    return children - helpers


def rss_anon_bytes(pid: int) -> int:
    """Private (anonymous) resident memory of ``pid``: what a pickled copy of data would cost."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/<pid>/status")


def leaves(tree) -> list:
    """Every array leaf of a batch, in a fixed order (dict keys sorted)."""
    import numpy as np

    if isinstance(tree, dict):
        return [leaf for key in sorted(tree) for leaf in leaves(tree[key])]
    if isinstance(tree, (tuple, list)):
        return [leaf for item in tree for leaf in leaves(item)]
    return [np.asarray(tree)]


def snapshot(batch):
    """Bytes, dtype and shape of every leaf: equal snapshots are bit-identical batches."""
    return [(a.dtype.str, a.shape, a.tobytes()) for a in leaves(batch)]


def feedline_threads() -> set[threading.Thread]:
    """feedline's threads, but for the fork server's reader, which lives as long as the server, and its delayed start."""
    return {t for t in threading.enumerate() if t.name.startswith("feedline") and not t.name.startswith("feedline-forkserver")}


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux: /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition, timeout: float, interval: float = 0.02) -> bool:
    """True once ``condition()`` holds, polled for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return condition()


def switch_interval_holds() -> int:
    """Holds on feedline's shorter GIL switch interval: each is released by its owner."""
    from feedline import testing

    return testing.switch_interval_holds()


def switch_intervals_while_iterating(batches) -> tuple[list, list[float]]:
    """Lists of ``batches``' values, and the GIL switch intervals a watcher thread read meanwhile (every ~2 ms)."""
    seen, stop = [], threading.Event()

    def watch():
        while not stop.is_set():
            seen.append(sys.getswitchinterval())
            time.sleep(0.002)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        out = [b.tolist() for b in batches]
    finally:
        stop.set()
        watcher.join()
    return out, seen


def wait_until_clean(before_segments, before_children, before_threads, before_holds=0, timeout=10.0):
    """Wait for resources to go back to what they were; return what is left."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        leaks = {
            "segments": feedline_segments() - before_segments,
            "processes": child_pids() - before_children,
            "threads": {t.name for t in feedline_threads() - before_threads},
            "switch interval holds": max(0, switch_interval_holds() - before_holds),
        }
        if not any(leaks.values()):
            # What outlived a full collection is alive: later collections need not walk it again. Once a test has
            # imported TensorFlow, Ray or Lightning the heap holds ~750,000 objects and each full collection takes
            # ~0.3 s, paid by every later test that checks for leaks. (The test process's collector, not a user's.)
            gc.freeze()
            return {}
        if time.monotonic() > deadline:
            return {k: v for k, v in leaks.items() if v}
        time.sleep(0.05)


@pytest.fixture
def no_leaks():
    """Fail the test if it leaves a feedline segment, worker process, thread or switch-interval hold behind.

    Tests must close their pipelines (``with pipe:`` or ``pipe.close()``) or
    drop them; the fixture collects garbage before checking.
    """
    before = (feedline_segments(), child_pids(), feedline_threads(), switch_interval_holds())
    yield
    leaks = wait_until_clean(*before)
    assert not leaks, f"leaked resources: {leaks}"


@pytest.fixture
def cpus_held_by_other_programs():
    """The test's thread (and the threads it starts) on two CPUs, each kept busy by twelve spinning programs.

    How a machine shared with other jobs looks to a pipeline: its threads are
    runnable but wait for a CPU. Linux only (``os.sched_setaffinity``); the
    affinity is restored and the spinners killed afterwards (list `no_leaks`
    before this fixture, so that it checks after they are gone).
    """
    if not hasattr(os, "sched_setaffinity"):
        pytest.skip("pins threads to CPUs with Linux's sched_setaffinity")
    import subprocess
    import sys

    saved = os.sched_getaffinity(0)
    two = set(sorted(saved)[:2])
    pin = lambda: os.sched_setaffinity(0, two)  # noqa: E731 - run in each spinner before it starts
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=pin) for _ in range(12 * len(two))]
    os.sched_setaffinity(0, two)  # this thread, and the worker threads it starts (they inherit it)
    try:
        time.sleep(0.2)  # every spinner running
        yield
    finally:
        os.sched_setaffinity(0, saved)
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Run the test once per backend."""
    return request.param


def damage_after_sos(data: bytes) -> bytes:
    """Flip 16 bytes well after the SOS marker, at the first place where libjpeg-turbo notices.

    JPEG has no checksum: some damage still reads as valid compressed data
    and no decoder can tell (the module docs say so). This picks damage
    that libjpeg-turbo does report, deterministically for a given image.
    """
    import simplejpeg

    sos = data.index(b"\xff\xda")
    body = len(data) - sos
    for fraction in (0.5, 0.6, 0.7, 0.4, 0.8, 0.3, 0.55, 0.65, 0.45, 0.75):
        start = sos + int(body * fraction)
        damaged = bytearray(data)
        for k in range(start, start + 16):
            damaged[k] ^= 0x5A
        try:
            simplejpeg.decode_jpeg(bytes(damaged), strict=True)
        except ValueError as e:
            if "Premature end" not in str(e):
                return bytes(damaged)
    raise AssertionError("no damage after SOS that libjpeg-turbo reports; change the test image")


@pytest.fixture(autouse=True, scope="module")
def collect_what_the_module_left():
    """After each test module, the objects `wait_until_clean` froze go back to the collector, which runs once.

    An object that was alive at a freeze and became cyclic garbage later (a module's fixture, a pipeline a test
    kept in a global) is never collected while frozen, and would keep what it holds, such as the mappings of
    shared-memory batch slots, for the rest of the run.
    """
    yield
    gc.unfreeze()
    gc.collect()


@pytest.fixture(autouse=True, scope="session")
def interruptible_children():
    """Programs the tests start see Ctrl-C as a user's program does.

    A test run started with SIGINT ignored (``nohup``, ``cmd &`` in a script
    without job control, some CI runners) passes SIG_IGN on to every child:
    an ignored signal survives exec, a handler does not. The Ctrl-C tests
    would then wait in vain. Restoring Python's handler here gives children
    the default disposition again.
    """
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield



@pytest.fixture
def switch_interval(monkeypatch):
    """The consumer's GIL switch interval set to Python's default (5 ms) for the test, and put back after.

    With ``FEEDLINE_TUNE_PROCESS=1``: feedline shortens the interval only where the user opted in
    (`feedline._process_tuning`); `test_process_settings` checks that it is left alone otherwise.

    Skips where a pipeline that another test left alive (not closed, not yet collected) still holds
    feedline's shorter interval: the test could not tell whose hold it sees.
    """
    gc.collect()
    if switch_interval_holds():
        pytest.skip("a pipeline left by another test holds feedline's shorter GIL switch interval")
    monkeypatch.setenv("FEEDLINE_TUNE_PROCESS", "1")
    saved = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield sys.getswitchinterval()
    sys.setswitchinterval(saved)
