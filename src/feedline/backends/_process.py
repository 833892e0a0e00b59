"""The process backend: worker processes started as fresh interpreters.

Why not ``multiprocessing.Process``: with ``spawn`` (Windows, macOS, and
what we use everywhere) it re-imports the parent's ``__main__``, which
re-runs a script that has no ``if __name__ == "__main__":`` guard. Our
workers are plain ``python -c`` subprocesses that import only feedline and
receive the pipeline by value (cloudpickle), so one code path serves every
OS, and what passes on Linux is what a Windows user gets.

Protocol:
- Start: the executor opens a `Listener` (a Unix socket, a named pipe on
  Windows) with a random auth key, starts N subprocesses and writes each a
  bootstrap record on stdin. A helper thread accepts connections and does
  the handshake (hello in, the pickled `WorkerPart` out, once it is known);
  every other step happens in the consumer's thread inside `submit`/`wait`,
  so there is no lock (the two threads share only a queue of connections).
  A worker answers ready; tasks are dispatched to ready workers as soon as
  each is up (the first batch does not wait for the slowest worker).
- Warm start (only when feedline chose processes itself, see `_runtime`):
  while no worker is ready, `wait` runs the next waiting task in the
  consumer's thread instead of idling, so the first batch does not wait for
  interpreter start-up. A task is taken out of the backlog before it runs,
  so it is never also sent to a worker.
- Work: each task goes to the ready worker with the fewest outstanding
  tasks (or, for a stream shard, always the same worker); a worker runs its
  tasks in order and returns each result with its batch in a shared-memory
  slot (`feedline.transport._slots`). There is no per-sample message.
- Back-pressure: the iterator keeps at most the prefetch depth of tasks
  outstanding; released slots go back to their worker with the next call.
- Death: a worker that exits is noticed at once (EOF on its connection, or
  its process gone while starting). Its outstanding tasks are sent again to
  a replacement, so every index is still delivered exactly once; the task
  it was running counts an attempt, and after `MAX_ATTEMPTS` the task fails
  with an error naming the sample (read from the worker's status word in
  shared memory) and the exit signal. Names of segments the dead worker had
  not yet handed over are swept.
- Shutdown: ``("stop",)`` to each worker, a grace period, then terminate and
  kill; the listener closes and the accept thread is woken. Workers also
  exit by themselves when the consumer dies (see `_worker`).
"""

from __future__ import annotations

import collections
import itertools
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Client, Listener, wait as wait_connections

import cloudpickle
import numpy as np

from .._errors import WorkerError
from .._plan import Result, run_task
from ..transport._shm import Segment, segment_prefix, sweep, unlink
from ..transport._slots import SlotReader
from ._base import Event, Executor, requeue
from ._worker import _BLAS_VARS

__all__ = ["MAX_ATTEMPTS", "ProcessExecutor"]

MAX_ATTEMPTS = 3  # a task that kills its worker this many times fails instead of looping
PER_WORKER = 2  # default tasks per worker (one running, one queued); the runtime sets its share of the window
START_TIMEOUT = 60.0  # seconds a worker may take to import and connect
_worker_ids = itertools.count()
# glibc's default heap thresholds make a fresh interpreter hand temporaries of a
# few hundred KB back to the OS after every call and fault them in again (story 4:
# 851k page faults and 2.3 s of kernel time per epoch). Forked workers inherit a
# grown heap; ours start fresh, so keep freed memory up to these bounds per worker.
# Other C libraries ignore the variables; the user's own settings win.
_MALLOC_VARS = {"MALLOC_TRIM_THRESHOLD_": str(128 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}
_WORKER_CODE = "from feedline.backends._worker import main; main()"


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class _Worker:
    __slots__ = ("id", "position", "proc", "conn", "ready", "outstanding", "reader", "status", "started")

    def __init__(self, wid, position, proc, reader):
        self.id, self.position, self.proc, self.reader = wid, position, proc, reader
        self.conn = None
        self.ready = False
        self.outstanding: collections.OrderedDict = collections.OrderedDict()
        self.status = None
        self.started = time.monotonic()

    def current_index(self) -> int:
        """The sample the worker was on (from its status word), or -1."""
        if self.status is None:
            return -1
        return int(np.ndarray((2,), np.int64, buffer=self.status.buf)[1])


class ProcessExecutor(Executor):
    name = "process"

    def __init__(self, part_bytes: bytes | None, workers: int, describe_index=None, local_part=None):
        # part_bytes may be set after construction: workers are spawned first so
        # that pickling (and sharing large arrays) overlaps their start-up.
        self._part_bytes = part_bytes
        self.part_known = threading.Event()
        if part_bytes is not None:
            self.part_known.set()
        # Warm start: while no worker is ready, the consumer runs tasks itself
        # (see `_run_locally`); None keeps all user code out of this process.
        self.local_part = local_part
        self.per_worker = PER_WORKER
        self.workers = workers
        self.describe_index = describe_index or (lambda index: None)
        self.prefix = segment_prefix()
        self.authkey = os.urandom(32)
        self.listener = Listener(authkey=self.authkey)
        self.accepted: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self.wake_w = _wake_pipe()
        self.closing = False
        self.released: collections.deque = collections.deque()
        self.backlog: collections.deque = collections.deque()
        self.attempts: dict = collections.Counter()
        self.failures: list = []  # Events for tasks that cannot be redone
        self.cancelled: set[int] = set()
        self.pool: list[_Worker | None] = [None] * workers
        self.by_id: dict[int, _Worker] = {}
        self.restarts = 0  # workers replaced after dying with work in hand
        self.start_failures = 0  # workers that died before becoming ready
        self.shard_positions: dict = {}  # (epoch, shard) -> raw position after the last result
        self.acceptor = threading.Thread(target=self._accept_loop, name="feedline-accept", daemon=True)
        self.acceptor.start()
        for position in range(workers):
            self._spawn(position)

    @property
    def part_bytes(self) -> bytes | None:
        return self._part_bytes

    @part_bytes.setter
    def part_bytes(self, value: bytes) -> None:
        self._part_bytes = value
        self.part_known.set()  # the accept thread may now hand the pipeline to waiting workers

    # ----------------------------------------------------------------- start
    def _spawn(self, position: int) -> None:
        wid = next(_worker_ids)
        env = dict(os.environ)
        for var in _BLAS_VARS:
            env.setdefault(var, "1")  # one BLAS thread per worker: N workers x N threads thrash
        for var, value in _MALLOC_VARS.items():
            env.setdefault(var, value)
        proc = subprocess.Popen([sys.executable, "-c", _WORKER_CODE], stdin=subprocess.PIPE, env=env)
        boot = {
            "worker_id": wid,
            "parent_pid": os.getpid(),
            "prefix": self.prefix,
            "address": self.listener.address,
            "authkey": self.authkey,
            "sys_path": list(sys.path),
        }
        try:
            proc.stdin.write(pickle.dumps(boot))
            proc.stdin.close()
        except OSError:
            pass  # it died at once; noticed as a failed start
        worker = _Worker(wid, position, proc, SlotReader(wid, self.released))
        self.pool[position] = worker
        self.by_id[wid] = worker

    def _accept_loop(self) -> None:
        while not self.closing:
            try:
                conn = self.listener.accept()  # authenticates with the key, or raises
            except Exception:  # closed, a failed handshake, or a worker dying mid-connect
                if self.closing:
                    return
                continue
            if self.closing:
                conn.close()
                return
            # The handshake happens here, not in the consumer's thread, so a
            # consumer busy with a warm-start task does not hold workers back.
            try:
                if not conn.poll(START_TIMEOUT):
                    raise EOFError
                hello = cloudpickle.loads(conn.recv_bytes())
                self.part_known.wait()
                if self.closing:
                    conn.close()
                    return
                conn.send(("part", self._part_bytes))
            except (EOFError, OSError):
                conn.close()  # it died before saying hello; the start-up check sees its exit
                continue
            self.accepted.put((conn, hello))
            self.wake_w.send_bytes(b"w")

    def _take_accepted(self) -> None:
        while True:
            try:
                conn, (kind, wid, pid, status_name) = self.accepted.get_nowait()
            except queue.Empty:
                return
            worker = self.by_id.get(wid)
            if worker is None:
                conn.close()
                continue
            worker.conn = conn
            worker.status = Segment.attach(status_name)
            unlink(status_name)

    def _run_locally(self) -> Event | None:
        """Warm start: run the next waiting task in this thread while no worker is ready.

        Workers are fresh interpreters and take 0.1-0.3 s to start; the
        consumer would only wait meanwhile. Tasks are pure functions of their
        indices, so the batch is the same whoever computes it, and a task
        taken from the backlog here is never sent to a worker (exactly once).
        Enabled only when feedline chose the process backend itself (it has
        already run the user's code here for the GIL probe).
        """
        if self.local_part is None:
            return None
        for worker in [w for w in self.pool if w is not None and w.conn is not None and not w.ready]:
            try:  # a starting worker's only messages are "ready" and "part_error"
                if worker.conn.poll(0):
                    self._on_message(worker, cloudpickle.loads(worker.conn.recv_bytes()))
            except (EOFError, OSError):
                self._on_death(worker)
        if any(w is not None and w.ready for w in self.pool):
            return None
        for number, (key, task, affinity) in enumerate(self.backlog):
            if affinity is None and key[0] not in self.cancelled:
                del self.backlog[number]
                break
        else:
            return None
        result = run_task(self.local_part, task)
        result.worker = -1  # the consumer
        return Event(key, result)

    # ------------------------------------------------------------- dispatch
    def submit(self, key, task, affinity=None):
        self.backlog.append((key, task, affinity))
        self._dispatch()

    def _dispatch(self) -> None:
        self._send_releases()
        kept = collections.deque()
        while self.backlog:
            key, task, affinity = self.backlog.popleft()
            if key[0] in self.cancelled:
                continue
            if affinity is not None:
                worker = self.pool[affinity % self.workers]
                if worker is None or not worker.ready:
                    kept.append((key, task, affinity))
                    continue
            else:
                # Late binding: a worker holds at most its share of the prefetch
                # window; the rest wait here and go to whichever worker frees up
                # first, so a worker that is up first cannot take the whole window
                # and the end of the epoch stays balanced.
                ready = [w for w in self.pool if w is not None and w.ready and len(w.outstanding) < self.per_worker]
                if not ready:
                    kept.append((key, task, affinity))
                    continue
                worker = min(ready, key=lambda w: len(w.outstanding))
            worker.outstanding[key] = task
            try:
                worker.conn.send(("task", key, task))
            except OSError:
                pass  # its death is handled when wait() sees the EOF
        self.backlog = kept

    def _send_releases(self) -> None:
        if not self.released:
            return
        by_worker = collections.defaultdict(list)
        while self.released:
            wid, slot = self.released.popleft()
            by_worker[wid].append(slot)
        for wid, slots in by_worker.items():
            worker = self.by_id.get(wid)
            if worker is not None and worker.ready:
                try:
                    worker.conn.send(("release", slots))
                except OSError:
                    pass

    # ------------------------------------------------------------- collect
    def wait(self, timeout):
        events, self.failures = self.failures, []
        if events:
            return events
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._take_accepted()
            local = self._run_locally()
            if local is not None:
                self._dispatch()
                return [local]
            conns = {w.conn: w for w in self.pool if w is not None and w.conn is not None}
            starting = [w for w in self.pool if w is not None and not w.ready]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = remaining
            if starting:
                step = 0.05 if step is None else min(step, 0.05)
            ready = wait_connections(list(conns) + [self.wake_r], timeout=step)
            for conn in ready:
                if conn is self.wake_r:
                    self.wake_r.recv_bytes()
                    continue
                worker = conns[conn]
                received = time.perf_counter()
                try:
                    message = cloudpickle.loads(conn.recv_bytes())
                except (EOFError, OSError):
                    self._on_death(worker)
                    continue
                new = self._on_message(worker, message)
                for event in new:
                    event.result.transport = time.perf_counter() - received
                events.extend(new)
            for worker in starting:
                if worker.proc.poll() is not None and self.pool[worker.position] is worker and worker.conn is None:
                    self._on_death(worker)
                elif time.monotonic() - worker.started > START_TIMEOUT and worker.conn is None:
                    raise WorkerError(f"a process worker did not start within {START_TIMEOUT:.0f} s; is the machine overloaded?")
            events.extend(self.failures)
            self.failures = []
            self._dispatch()
            if events or (deadline is not None and time.monotonic() >= deadline):
                return events

    def _on_message(self, worker: _Worker, message) -> list:
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            return []
        if kind == "part_error":
            self.close()
            raise WorkerError(
                "a process worker could not load the pipeline (its functions are unpickled "
                "in a fresh interpreter, so every module they use must be importable there):\n"
                + message[1]
            )
        _, key, result, fields = message
        result.worker = worker.position
        task = worker.outstanding.pop(key, None)
        self.attempts.pop(key, None)
        if task is not None and task.shard is not None:
            self.shard_positions[(task.epoch, task.shard)] = result.consumed
        if fields is not None:
            payload = worker.reader.open(fields)
            if key[0] in self.cancelled:
                return []  # dropping the views releases the slot
            result.payload = payload
        if key[0] in self.cancelled:
            return []
        return [Event(key, result)]

    def _on_death(self, worker: _Worker) -> None:
        if self.pool[worker.position] is not worker:
            return
        if worker.conn is not None:
            worker.conn.close()
        try:
            code = worker.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            worker.proc.kill()
            code = worker.proc.wait()
        index = worker.current_index()
        sweep(f"{self.prefix}w{worker.id}_")
        self.by_id.pop(worker.id, None)
        self.pool[worker.position] = None
        if self.closing:
            return
        how = describe_exit(code)
        if not worker.ready and not worker.outstanding and worker.conn is None:
            # Died while starting, before any work: a broken environment, not a bad sample.
            self.start_failures += 1
            if self.start_failures > MAX_ATTEMPTS * self.workers:
                self.close()
                raise WorkerError(f"process workers keep dying while starting ({how}); see their error output above")
            self._spawn(worker.position)
            return
        self.restarts += 1
        redo = list(worker.outstanding.items())
        if redo:
            first_key, first_task = redo[0]
            self.attempts[first_key] += 1
            if self.attempts[first_key] >= MAX_ATTEMPTS:
                redo = redo[1:]
                where = self.describe_index(index) if index >= 0 else None
                sample = f"sample {index}" + (f" ({where})" if where else "") if index >= 0 else f"task {first_task.number}"
                message = (
                    f"a process worker died {MAX_ATTEMPTS} times on {sample} ({how}); the sample "
                    "probably crashes the decoder or exhausts memory. Remove or repair it, or run "
                    "with backend='thread' to see the error in-process."
                )
                self.failures.append(Event(first_key, Result(error={
                    "index": index if index >= 0 else None, "where": where, "stage": "worker",
                    "type": "WorkerError", "message": message, "traceback": "", "exception": None,
                    "worker_exit": how,
                })))
        self._spawn(worker.position)
        requeue(self.backlog, redo, worker.position, self.shard_positions)

    def outstanding(self):
        return sum(len(w.outstanding) for w in self.pool if w is not None) + len(self.backlog)

    def cancel(self, generation):
        self.cancelled.add(generation)
        self.backlog = collections.deque(item for item in self.backlog if item[0][0] != generation)

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self.pool if w is not None]

    # ------------------------------------------------------------- shutdown
    def close(self):
        if self.closing:
            return
        self.closing = True
        self.part_known.set()  # an accept thread waiting for the pipeline gives up
        workers = [w for w in self.pool if w is not None]
        for w in workers:
            if w.conn is not None:
                try:
                    w.conn.send(("stop",))
                except OSError:
                    pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            if w.conn is None:
                w.proc.terminate()  # still starting: nothing to finish
                continue
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.terminate()
        for w in workers:
            try:
                w.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            if w.conn is not None:
                w.conn.close()
        try:  # wake the accept thread so it can exit
            Client(self.listener.address).close()
        except OSError:
            pass
        self.listener.close()
        self.acceptor.join(timeout=1.0)
        while True:  # connections accepted but never taken over
            try:
                conn, _ = self.accepted.get_nowait()
            except queue.Empty:
                break
            conn.close()
        for w in workers:
            sweep(f"{self.prefix}w{w.id}_")
        self.pool = [None] * self.workers
        self.by_id.clear()


def _wake_pipe():
    from multiprocessing.connection import Pipe

    return Pipe(duplex=False)

