"""Scale: many more process workers than cores.

feedline promises that any process-worker count from 1 to 128 works on any
core count. A 2-core CI machine running 8-64 workers is where big-machine
bugs show: workers still starting when an epoch ends or close() is called,
a listener backlog that fills up, start-up and shutdown races.

Every scenario runs a consumer in a subprocess (its own session and process
group), which reports its phases on stdout. The test bounds each phase, so a
hang fails the test instead of hanging the suite; on failure the consumer's
threads are dumped (faulthandler on SIGUSR1, shown in the failure message)
and its whole process group is killed and its segments removed, so a failed
test leaves nothing behind. Worker pids are found with psutil as the
consumer's descendants (public API only).

Leftovers are checked where they are caused: right after close() inside the
consumer (no child process, no ``feedline_<consumer pid>_`` segment), and
from outside after the consumer exits or is killed (no worker pid alive,
nothing left in the consumer's process group, no segment).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest
from conftest import wait_for

# Bounds (seconds). Start-up costs about 0.15 s per worker on 2 cores (64
# workers: about 10 s), so phases that start workers scale with the count;
# close() itself needs at most a grace second, terminate and kill.
CLOSE_BOUND = 10.0
EXIT_BOUND = 10.0
GONE_BOUND = 10.0  # workers of a consumer that died or exited must be gone within this


def start_bound(workers: int) -> float:
    return 15.0 + 0.5 * workers


# ---------------------------------------------------------------- consumer side
# Run at the top of every consumer script.
PRELUDE = textwrap.dedent(
    """
    import faulthandler, json, os, signal, sys, time
    import numpy as np
    import psutil
    import feedline as fl

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test dumps our threads on a hang
    ME = psutil.Process()
    PREFIX = f"feedline_{os.getpid()}_"

    def say(*words):
        print(*words, flush=True)

    def children():
        from feedline import testing

        helpers = set(testing.helper_pids())  # the fork server lives as long as we do; its children are workers
        pids = []
        for child in ME.children(recursive=True):
            try:
                if child.pid not in helpers and child.status() != psutil.STATUS_ZOMBIE:
                    pids.append(child.pid)
            except psutil.NoSuchProcess:
                pass
        return sorted(pids)

    def segments():
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(PREFIX))

    def timed_close(pipe):
        # Report before and after close(), so the test can bound close() alone. What is
        # left is looked at the moment close() returns (it waits for its workers), and
        # again a little later, to tell "left behind" from "late".
        say("CLOSING")
        started = time.monotonic()
        pipe.close()
        took = time.monotonic() - started
        kids, segs = children(), segments()
        time.sleep(1.0 if kids or segs else 0)
        report = {"seconds": took, "children": kids, "segments": segs, "children_1s_later": children(), "segments_1s_later": segments()}
        say("CLOSED", json.dumps(report))

    def values(batches):
        return [int(v) for batch in batches for v in np.asarray(batch).reshape(-1)]
    """
)


# ---------------------------------------------------------------- test side
def segments_of(consumer_pid: int) -> list[str]:
    prefix = f"feedline_{consumer_pid}_"
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(prefix))


def is_live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def group_members(pgid: int) -> list[int]:
    """Live processes in process group ``pgid`` (the consumer and its workers)."""
    members = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid and is_live(pid):
                members.append(pid)
        except OSError:
            pass
    return members


class Consumer:
    """A consumer script in its own session; phases are read from its stdout with bounds."""

    def __init__(self, code: str, *args: str, cwd):
        env = dict(os.environ)
        env.pop("PYTHONSTARTUP", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + textwrap.dedent(code), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
            start_new_session=True,  # its pid is its process group: killpg reaches every worker
        )
        self.pid = self.proc.pid
        self.seen: set[int] = set()  # every descendant pid observed
        self.lines: queue.Queue = queue.Queue()
        self.output: list[str] = []
        self.errors: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(self.proc.stdout, self.lines), daemon=True),
            threading.Thread(target=self._read, args=(self.proc.stderr, None), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read(self, stream, lines):
        for line in stream:
            if lines is None:
                self.errors.append(line)
            else:
                self.output.append(line)
                lines.put(line.rstrip("\n"))
        if lines is not None:
            lines.put(None)  # EOF

    def descendants(self) -> list[int]:
        try:
            pids = [c.pid for c in psutil.Process(self.pid).children(recursive=True) if is_live(c.pid)]
        except psutil.NoSuchProcess:
            pids = []
        self.seen.update(pids)
        return pids

    def expect(self, tag: str, timeout: float, what: str) -> str:
        """The rest of the next stdout line starting with ``tag``; fail if it does not come in time."""
        deadline = time.monotonic() + timeout
        while True:
            self.descendants()
            try:
                line = self.lines.get(timeout=min(0.2, max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                line = ""
            if line == "" and time.monotonic() >= deadline:
                self.fail(f"{what}: no {tag!r} within {timeout:.0f} s (hung)")
            if line is None:
                self.proc.wait(timeout=5)
                self.fail(f"{what}: the consumer exited with {self.proc.returncode} before {tag!r}")
            if line == tag or line.startswith(tag + " "):
                return line[len(tag) + 1 :]

    def expect_json(self, tag: str, timeout: float, what: str):
        return json.loads(self.expect(tag, timeout, what))

    def wait_exit(self, timeout: float, what: str) -> int:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            self.descendants()
            if time.monotonic() >= deadline:
                self.fail(f"{what}: the consumer did not exit within {timeout:.0f} s (hung)")
            time.sleep(0.05)
        return self.proc.returncode

    def stderr(self) -> str:
        return "".join(self.errors)[-6000:]

    def fail(self, message: str):
        if self.proc.poll() is None:  # show where it hangs
            try:
                os.kill(self.pid, signal.SIGUSR1)
                time.sleep(0.5)
            except OSError:
                pass
        self.kill_tree()
        stdout = "\n".join(line.rstrip("\n")[:200] for line in self.output[-10:])
        pytest.fail(f"{message}\n--- consumer stdout (last lines):\n{stdout}\n--- consumer stderr:\n{self.stderr()}", pytrace=False)

    def kill_tree(self):
        """SIGKILL the consumer and every process it started; remove its segments."""
        self.descendants()
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        for pid in self.seen:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        wait_for(lambda: not any(is_live(p) for p in self.seen) and not group_members(self.pid), 10)
        for name in segments_of(self.pid):
            try:
                os.unlink(f"/dev/shm/{name}")
            except FileNotFoundError:
                pass
        for reader in self._readers:
            reader.join(timeout=2)

    def assert_nothing_left(self, workers, what: str):
        """From outside, after the consumer is gone: no worker, no group member, no segment."""
        assert wait_for(lambda: not any(is_live(p) for p in workers), GONE_BOUND), (
            f"{what}: workers {[p for p in workers if is_live(p)]} still alive {GONE_BOUND:.0f} s later"
        )
        assert wait_for(lambda: not group_members(self.pid), GONE_BOUND), (
            f"{what}: processes {group_members(self.pid)} of the consumer's group still alive"
        )
        assert wait_for(lambda: not segments_of(self.pid), 5), f"{what}: segments left: {segments_of(self.pid)}"


@pytest.fixture
def consumers(no_leaks, tmp_path):
    """Start consumers with ``consumers(code, *args)``; each is killed with its tree at teardown."""
    started: list[Consumer] = []

    def start(code: str, *args: str) -> Consumer:
        consumer = Consumer(code, *args, cwd=tmp_path)
        started.append(consumer)
        return consumer

    yield start
    for consumer in started:
        consumer.kill_tree()


def check_closed(report: dict, what: str) -> None:
    print(f"{what}: close() took {report['seconds']:.2f} s")
    assert report["children"] == [], (
        f"{what}: close() returned with worker processes still running: {report['children']} "
        f"(1 s later: {report['children_1s_later']})"
    )
    assert report["segments"] == [], (
        f"{what}: close() returned leaving segments: {report['segments']} (1 s later: {report['segments_1s_later']})"
    )


# ------------------------------------------------------ 1. close at many workers
EPOCH_THEN_CLOSE = """
workers = int(sys.argv[1])
pipe = fl.from_arrays(np.arange(200)).map(lambda x: 3 * x + 1, backend="process", workers=workers).batch(10)
batches = [np.array(b) for b in pipe]
say("EPOCH", json.dumps({"values": values(batches), "sizes": [len(b) for b in batches], "workers": children()}))
timed_close(pipe)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workers", [8, 16, 32, 64])
def test_close_returns_and_leaves_nothing_with_many_workers(workers, consumers):
    """Every sample once and in order, close() returns, then no worker and no segment is left."""
    consumer = consumers(EPOCH_THEN_CLOSE, str(workers))
    epoch = consumer.expect_json("EPOCH", start_bound(workers), f"epoch at {workers} workers")
    assert epoch["values"] == [3 * i + 1 for i in range(200)], "samples lost, repeated or out of order"
    assert epoch["sizes"] == [10] * 20
    assert 1 <= len(epoch["workers"]) <= workers, f"expected up to {workers} workers, saw {len(epoch['workers'])}"
    consumer.expect("CLOSING", 5, "after the epoch")
    closed = consumer.expect_json("CLOSED", CLOSE_BOUND, f"close() at {workers} workers")
    check_closed(closed, f"{workers} workers")
    assert consumer.wait_exit(EXIT_BOUND, "exit after close()") == 0, consumer.stderr()
    consumer.assert_nothing_left(consumer.seen, f"{workers} workers, after exit")


# ----------------------------------------- the interpreter exits without close()
UNCLOSED = """
pipe = fl.from_arrays(np.arange(200)).map(lambda x: 3 * x + 1, backend="process", workers=16).batch(10)
say("EPOCH", json.dumps({"values": values(pipe), "workers": children()}))
say("EXITING")
# No close(): the interpreter's exit (atexit) must stop the workers and free shared memory.
"""


@pytest.mark.timeout(90)
def test_interpreter_exits_without_close_at_16_workers(consumers):
    consumer = consumers(UNCLOSED)
    epoch = consumer.expect_json("EPOCH", start_bound(16), "epoch at 16 workers")
    assert epoch["values"] == [3 * i + 1 for i in range(200)]
    consumer.expect("EXITING", 5, "after the epoch")
    returncode = consumer.wait_exit(EXIT_BOUND, "interpreter exit with an unclosed 16-worker pipeline")
    assert returncode == 0, consumer.stderr()
    consumer.assert_nothing_left(consumer.seen, "unclosed pipeline, after exit")


# ------------------------------------------------- 2. repeated start/close cycles
CYCLES = """
for cycle in range(5):
    pipe = fl.from_arrays(np.arange(120)).map(lambda x: x * 7, backend="process", workers=16).batch(8)
    say("EPOCH", json.dumps({"cycle": cycle, "values": values(pipe)}))
    timed_close(pipe)
"""


@pytest.mark.timeout(150)
def test_repeated_start_close_cycles_at_16_workers_are_exact_and_leave_nothing(consumers):
    consumer = consumers(CYCLES)
    for cycle in range(5):
        epoch = consumer.expect_json("EPOCH", start_bound(16), f"cycle {cycle}: epoch")
        assert epoch["cycle"] == cycle
        assert epoch["values"] == [7 * i for i in range(120)], f"cycle {cycle}: samples lost, repeated or out of order"
        consumer.expect("CLOSING", 5, f"cycle {cycle}")
        check_closed(consumer.expect_json("CLOSED", CLOSE_BOUND, f"cycle {cycle}: close()"), f"cycle {cycle}")
    assert consumer.wait_exit(EXIT_BOUND, "exit after 5 cycles") == 0, consumer.stderr()
    consumer.assert_nothing_left(consumer.seen, "after 5 cycles")


# ------------------------------------------- 3. close while workers are starting
CLOSE_EARLY = """
when = sys.argv[1]
pipe = fl.from_arrays(np.arange(640)).map(lambda x: x + 5, backend="process", workers=32).batch(10)
it = iter(pipe)
if when == "after_first_batch":
    say("FIRST", json.dumps(values([next(it)])))
started, deadline = children(), time.monotonic() + 10
while not started and time.monotonic() < deadline:  # the fork server forks them as it gets to it: close once one is up
    time.sleep(0.002)
    started = children()
say("STARTED", json.dumps(started))
timed_close(pipe)
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("when", ["right_after_iter", "after_first_batch"])
def test_close_while_32_workers_are_starting_returns_and_leaves_nothing(when, consumers):
    consumer = consumers(CLOSE_EARLY, when)
    if when == "after_first_batch":
        first = consumer.expect_json("FIRST", start_bound(32), "first batch at 32 workers")
        assert first == list(range(5, 15))
    started = consumer.expect_json("STARTED", start_bound(32), "starting 32 workers")
    assert started, "no worker process was started"
    consumer.expect("CLOSING", 5, "before close()")
    check_closed(consumer.expect_json("CLOSED", CLOSE_BOUND, f"close() {when.replace('_', ' ')}"), when)
    assert consumer.wait_exit(EXIT_BOUND, "exit after close()") == 0, consumer.stderr()
    consumer.assert_nothing_left(consumer.seen, f"close {when}, after exit")


# ------------------------------------------------ 4. the consumer is SIGKILLed
RUN_UNTIL_KILLED = """
mode, ran = sys.argv[1], sys.argv[2]

def work(x):
    mark = os.path.join(ran, str(os.getpid()))
    if not os.path.exists(mark):  # one file per worker that has run a sample
        open(mark, "w").close()
    time.sleep(0.002)
    return x

data = np.arange(400_000, dtype=np.int64).reshape(100_000, 4)  # 3 MB: shared with the workers
pipe = fl.from_arrays(data).map(work, backend="process", workers=16).batch(8)
it = iter(pipe)
if mode == "starting":
    say("STARTED")
    time.sleep(120)
say("RUNNING", json.dumps(values([next(it)])))
while True:
    for batch in pipe:
        pass
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("workers_state", ["starting", "running"])
def test_sigkilled_consumer_with_16_workers_leaves_no_worker_or_segment(workers_state, consumers, tmp_path):
    ran = tmp_path / "ran"
    ran.mkdir()
    consumer = consumers(RUN_UNTIL_KILLED, workers_state, str(ran))

    def running_workers():
        return {int(p.name) for p in ran.iterdir()}

    if workers_state == "starting":
        consumer.expect("STARTED", start_bound(16), "iter() at 16 workers")
        assert wait_for(lambda: len(consumer.descendants()) >= 16, 10, 0.01), (
            f"expected 16 worker processes, found {consumer.descendants()}"
        )
    else:
        assert consumer.expect_json("RUNNING", start_bound(16), "first batch at 16 workers") == list(range(32))
        assert wait_for(lambda: len(running_workers()) >= 16, start_bound(16)), (
            f"only {len(running_workers())} of 16 workers ever ran a sample"
        )
        assert running_workers() <= set(consumer.descendants()), "a pid that ran samples is not the consumer's child"
    workers = consumer.descendants()  # captured before the kill
    assert len(workers) >= 16, workers
    assert segments_of(consumer.pid), "expected the consumer's segments (its shared array) before the kill"
    killed = time.monotonic()
    consumer.proc.kill()
    consumer.proc.wait(timeout=10)
    consumer.assert_nothing_left(workers, f"consumer SIGKILLed with {workers_state} workers")
    print(f"consumer SIGKILLed ({workers_state}, 16 workers): all gone after {time.monotonic() - killed:.2f} s")


def _helpers_between(consumer_pid: int, workers) -> set[int]:
    """The processes between the consumer and its workers (the fork server, zygotes): each worker's parent chain."""
    helpers = set()
    for pid in workers:
        try:
            parent = psutil.Process(pid).ppid()
            while parent not in (consumer_pid, 0, 1):
                helpers.add(parent)
                parent = psutil.Process(parent).ppid()
        except psutil.NoSuchProcess:
            continue
    return helpers


@pytest.mark.timeout(90)
def test_sigkilled_consumer_segments_go_while_its_fork_server_is_slow_to_follow(consumers, tmp_path):
    """The workers of a dead consumer remove its names without waiting for their parent (fork server, zygote) to exit.

    On a busy machine the fork server and the zygote can take seconds to notice the
    consumer's death; they are stopped here for as long as it takes.
    """
    ran = tmp_path / "ran"
    ran.mkdir()
    consumer = consumers(RUN_UNTIL_KILLED, "running", str(ran))
    consumer.expect_json("RUNNING", start_bound(16), "first batch at 16 workers")
    workers = {int(p.name) for p in ran.iterdir()}
    helpers = _helpers_between(consumer.pid, workers)
    assert helpers, f"expected the workers {sorted(workers)} to be forked by a fork server or a zygote"
    assert segments_of(consumer.pid), "expected the consumer's segments (its shared array) before the kill"
    for pid in helpers:
        os.kill(pid, signal.SIGSTOP)
    try:
        consumer.proc.kill()
        consumer.proc.wait(timeout=10)
        assert wait_for(lambda: not segments_of(consumer.pid), 5), (
            f"segments left while the fork server was slow to follow the consumer: {segments_of(consumer.pid)}"
        )
    finally:
        for pid in helpers:
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
    consumer.assert_nothing_left(consumer.seen | workers, "consumer SIGKILLed, fork server stopped")


# ------------------------------------------------------- 5. workers die at scale
KILL_THREE = """
ran = sys.argv[1]

def work(x):
    mark = os.path.join(ran, str(os.getpid()))
    if not os.path.exists(mark):
        open(mark, "w").close()
    time.sleep(0.01)
    return x

n = 800
pipe = fl.from_arrays(np.arange(n)).map(work, backend="process", workers=16).batch(8)
got, victims, killed_at = [], [], None
for k, batch in enumerate(pipe):
    got.extend(values([batch]))
    if killed_at is None and k >= 3:
        alive = children()
        busy = sorted(int(p) for p in os.listdir(ran) if int(p) in alive)
        if len(busy) >= 3:
            victims = busy[:3]
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            killed_at = k
say("EPOCH", json.dumps({"values": got, "victims": victims, "killed_at": killed_at, "batches": k + 1,
                         "victims_alive": [p for p in victims if p in children()]}))
timed_close(pipe)
"""


@pytest.mark.timeout(90)
def test_three_workers_killed_mid_epoch_at_16_workers_lose_no_sample(consumers, tmp_path):
    ran = tmp_path / "ran"
    ran.mkdir()
    consumer = consumers(KILL_THREE, str(ran))
    epoch = consumer.expect_json("EPOCH", start_bound(16) + 30, "epoch with 3 workers killed")
    assert len(epoch["victims"]) == 3, "fewer than 3 workers ever ran samples: nothing was tested"
    assert epoch["killed_at"] < epoch["batches"] - 10, f"killed at batch {epoch['killed_at']} of {epoch['batches']}: not mid-epoch"
    assert epoch["victims_alive"] == [], f"killed workers {epoch['victims_alive']} still running"
    got = epoch["values"]
    assert sorted(got) == list(range(800)), (
        f"lost {sorted(set(range(800)) - set(got))[:20]}, repeated {sorted({v for v in got if got.count(v) > 1})[:20]}"
    )
    assert got == list(range(800)), "every sample arrived once, but out of order"
    # close() and leftovers are protected by the tests above; here the consumer is just stopped.


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="abstract socket addresses are Linux's")
def test_closing_gives_up_waking_a_listener_whose_queue_is_full():
    # close() wakes the accept thread by connecting once. A Linux listener's abstract address reads back as bytes,
    # and that went to multiprocessing's client, which connects with no time limit: where workers still connecting
    # had filled the queue after the accept thread left, close() waited for ever (16 workers on 2 cores, ~1 run in 30)
    import socket
    from multiprocessing.connection import Listener

    from feedline.backends.process._connections import listen_address as _listen_address
    from feedline.backends.process._connections import wake_listener as _wake_listener

    listener = Listener(_listen_address(), backlog=1)
    assert isinstance(listener.address, bytes)
    queued = []
    try:
        while len(queued) < 64:  # nobody accepts: connect until the queue is full
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            queued.append(sock)
            try:
                sock.connect(listener.address)
            except BlockingIOError:
                break
        waker = threading.Thread(target=_wake_listener, args=(listener.address,), daemon=True)
        waker.start()
        waker.join(timeout=10)
        assert not waker.is_alive(), "waking the listener blocked close"
    finally:
        for sock in queued:
            sock.close()
        listener.close()
