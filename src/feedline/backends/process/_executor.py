"""The process backend's executor: workers in their own processes, batches back through shared memory.

On Linux and macOS each worker is forked by the fork server (`_forkserver`),
a clean interpreter that imported NumPy and feedline once; on Windows, or
with ``FEEDLINE_FORKSERVER=0``, it is a fresh interpreter (``python -c``).
Either way ``multiprocessing``'s spawn, which would re-run an unguarded
``__main__``, is never used: workers hold no user state, import only
feedline (and the modules the pipeline names) and get the pipeline by value
(cloudpickle). Starting a worker and its handle are `_workers`; where they
connect and the poll set over their pipes, `_connections`; the hand-shake,
`_handshake`. The protocol, in short (the full story is in
docs/architecture.md, "Protocols"):
- Start: an accept thread does the handshake (`Hello` in, `SendPart` out);
  everything else runs in the consumer's thread in `submit`/`wait`, so
  there is no lock. Tasks go to a worker as soon as it answers `Ready`.
  Held (``held=True``), workers that said hello wait for `release`.
- Work and back-pressure: `TaskPool` late binding within the prefetch
  window; each batch comes back in a shared-memory slot, released later
  (copied and released at once past `SlotViews`' bound of batches out).
- Cancel: the backlog's tasks of the generation are dropped, and a word in
  each worker's status segment names it, so a worker stops such a task
  before its next sample and answers it empty. A worker that may still be
  inside such a sample takes no new task until it answered; the others
  take the next epoch's tasks at once, one at a time meanwhile.
- Death: EOF on a worker's pipe; its tasks go to a replacement, the one it
  was running counts an attempt (`MAX_ATTEMPTS`), nothing is lost or doubled.
- Time limit (``map(timeout=...)``): while the consumer waits, it reads each
  busy worker's status words (sample, start time); a worker past the limit
  is killed and handled as a death, except that its task runs again with the
  stuck sample marked (`Task.timed_out`) instead of counting an attempt.
- Shutdown: `Stop`, a grace period, terminate, kill; nothing of ours waits
  without a bound, and workers exit by themselves if the consumer dies.
"""

from __future__ import annotations

import collections
import itertools
import os
import subprocess
import sys
import threading
import time

from ..._errors import SharedMemoryFull, WorkerError
from ..._forking import use_forkserver
from ..._switch_interval import SwitchHold, short_switch_interval
from ...transport._shm import Segment, SegmentGone, bounded_room, segment_prefix, sweep, unlink
from ...transport._slots import SlotReader, SlotViews, mapped_bound
from ...transport._transfer import SharedArrays, check_picklable, dumps_for_workers
from ...worker import Result, TaskError
from ...worker._protocol import Done, PartError, Ready, Release, RunTask, Stop
from ...worker._wire import decode, encode
from .._base import Event, Executor, PartNotPicklable
from .._pool import MAX_ATTEMPTS, TaskPool
from ._connections import Readable
from ._forkserver import ForkedProcess
from ._handshake import Handshake
from ._main import status_ring
from ._preload import libraries_to_preload, preload_allowed
from ._workers import START_TIMEOUT, Worker, describe_exit, start_process

__all__ = ["MAX_ATTEMPTS", "ProcessExecutor"]

_worker_ids = itertools.count()


class ProcessExecutor(Executor):
    name = "process"

    def __init__(self, part, workers: int, held: bool = False):
        """Start ``workers`` workers; ``held``: they start and connect, and get the pipeline only at `release`.

        Held, a worker's fork and hand-shake can go by while the automatic
        choice still judges the threads (`feedline.engine._trial`), and
        only the pipeline's unpickling is left once it decides. Held and
        forked from the fork server, the pickling (which copies large
        arrays into shared memory) and the forks run in a thread of their
        own (`feedline-held-start`), so the consumer is not kept from its
        threads' batches: `connecting` meanwhile, a failure raised by the
        next `release` or `wait`.
        """
        try:
            check_picklable(part)  # cheap, and before any worker starts
        except Exception as e:
            raise PartNotPicklable(str(e)) from e
        self._part_bytes = None
        self._held = held
        self.tasks = TaskPool()  # backlog, late binding, attempts, cancelled generations
        self.workers = workers
        self.describe_index = part.source.where
        self.timeout = part.timeout  # seconds a sample may run (map(timeout=...)), or None
        self.prefix = segment_prefix()
        self.by_id: dict[int, Worker] = {}
        self.handshake = Handshake(workers, self.by_id, self._release_switch_if_up)  # listener and accept thread
        self.readable = Readable(self.handshake.wake_r)  # the workers' pipes and the wake pipe, registered once each
        self.views = SlotViews(mapped_bound())  # batches out as views of slots; past its bound they are copied
        self._releasing: collections.defaultdict = collections.defaultdict(list)  # worker id -> slots to hand back
        self.pool: list[Worker | None] = [None] * workers
        self._pinned = False  # a stream shard was pinned to a worker: the count must not change
        self.restarts = 0  # workers replaced after dying with work in hand
        self._cancelled_through = -1  # the newest cancelled generation (`cancel`), as each worker's status word says
        self.start_failures = 0  # workers that died before becoming ready
        self._switch = SwitchHold()  # while any worker starts (`feedline._switch_interval`); the accept thread gives it back too
        self.handshake.start()
        self.shared = SharedArrays()
        self.libraries: tuple[str, ...] = ()  # imported once by a zygote of the fork server, for every worker
        self._starting: threading.Thread | None = None  # held: pickles (copies large arrays) and forks beside the consumer
        self._start_error: BaseException | None = None
        forked = use_forkserver()
        if forked and held:  # the consumer goes on with its threads' batches meanwhile; `release` waits for nothing
            self._starting = threading.Thread(target=self._start_held, args=(part,), name="feedline-held-start", daemon=True)
            self._starting.start()
            return
        if forked:
            self._start_forked(part)
        else:
            for position in range(workers):
                self._spawn(position)
            self._pickle(part)  # pickling (and sharing large arrays) overlaps the interpreters' start-up
        if not held:
            self.release()

    def _start_forked(self, part) -> None:
        """Pipeline first: the fork server's zygote imports the libraries it names before any worker forks."""
        self._pickle(part)
        if preload_allowed():
            self.libraries = libraries_to_preload(self._part_bytes)
        for position in range(self.workers):
            if self.closing:
                return
            self._spawn(position)

    def _start_held(self, part) -> None:
        try:
            self._start_forked(part)
        except BaseException as e:  # raised by `release` and `wait`, where the automatic choice reports it
            self._start_error = e
            return
        if not self._held:
            self.release()  # asked for while pickling: it found no pipeline to send

    def _pickle(self, part) -> None:
        try:
            self._part_bytes = dumps_for_workers(part, self.shared)
        except SharedMemoryFull:  # a source array found no room in /dev/shm: not a pickling problem, and it says what to do
            self.close()
            raise
        except Exception as e:
            self.close()
            raise PartNotPicklable(str(e)) from e

    def release(self) -> None:
        """The pipeline goes to every worker: those waiting for it now, the others as they say hello."""
        self._check_started()
        self._held = False
        if self._part_bytes is None:
            return  # still pickling (`__init__` releases once it is done)
        self.handshake.release(self._part_bytes)

    def connecting(self) -> bool:
        """Held workers not all waiting for the pipeline yet (the automatic choice judges no stretch meanwhile)."""
        return self._held and (self.still_starting() or self.handshake.waiting_count() < sum(w is not None for w in self.pool))

    def still_starting(self) -> bool:
        """Held workers whose pipeline is still being pickled (its large arrays copied) or who are not all forked yet."""
        return self._starting is not None and self._starting.is_alive()

    def _check_started(self) -> None:
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            raise error

    @property
    def part_bytes(self) -> bytes | None:
        """The pickled part as sent to each worker (None while it is being pickled)."""
        return self._part_bytes

    def set_window_share(self, tasks: int) -> None:
        self.tasks.per_worker = tasks

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until every worker answered `Ready`; False on timeout (the trial asks with 0, tests and benchmarks wait).

        Tasks finished meanwhile are held for the next `wait`, once this returns, so that every `Ready` is read.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        finished: list = []
        try:
            while True:
                finished += self.wait(0)  # takes new connections and Ready messages (and, first, what was held)
                if not self.still_starting() and not any(w is not None and not w.ready for w in self.pool):
                    return True
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                finished += self.wait(0.05 if remaining is None else min(0.05, remaining))
        finally:
            self.tasks.hold(finished)

    # ----------------------------------------------------------------- start
    def _spawn(self, position: int) -> None:
        self._switch.take()  # until every worker is up: the GIL comes back sooner beside busy threads
        wid = next(_worker_ids)
        boot = {
            "worker_id": wid,
            "parent_pid": os.getpid(),
            "prefix": self.prefix,
            "address": self.handshake.address,
            "authkey": self.handshake.authkey,
            "sys_path": list(sys.path),
        }
        worker = Worker(wid, position, start_process(boot, self.libraries), SlotReader(wid, self.views))
        self.pool[position] = worker
        self.by_id[wid] = worker

    def _adopt(self, worker: Worker, conn, hello) -> None:
        """``worker``'s connection, now that it has the pipeline (`Handshake.take`): polled, its status segment mapped."""
        worker.conn = conn
        self.readable.add(conn, worker)
        try:
            worker.status = Segment.attach(hello.status_segment)
        except SegmentGone:  # it exited right after saying hello (its status segment was a memory file)
            self._lost(worker)
            return
        unlink(hello.status_segment)
        worker.ring = status_ring(worker.status.buf)
        worker.mark_cancelled(self._cancelled_through)

    # ------------------------------------------------------------- dispatch
    def submit(self, key, task, affinity=None):
        if affinity is not None:
            self._pinned = True
        self.tasks.add(key, task, affinity)
        self._dispatch()

    def batch_room(self) -> int | None:
        """``/dev/shm``'s size where batches have nowhere else to go (`transport._shm.bounded_room`)."""
        return bounded_room()

    @property
    def workers_elsewhere(self) -> bool:
        return True

    def grow(self, workers: int) -> bool:
        """Start workers up to ``workers``; they take tasks once ready (not for stream shards pinned to workers)."""
        if workers <= self.workers or self._pinned or self.closing:
            return False
        self.pool.extend([None] * (workers - self.workers))
        for position in range(self.workers, workers):
            self._spawn(position)
        self.workers = workers
        return True

    def _dispatch(self) -> None:
        self._take_releases()
        self.tasks.dispatch(self._pick, self._send)
        self._send_releases()  # those no task carried

    def _pick(self, key, task, affinity) -> Worker | None:
        if affinity is not None:
            worker = self.pool[affinity % self.workers]
            return worker if worker is not None and worker.ready else None
        # A worker still inside a cancelled task's sample takes nothing new until it answers: the next epoch's first
        # tasks go to the workers that can start them now, and meanwhile those take one at a time, so that the next
        # task goes to whichever worker is free first (the one finishing, after its sample, or another).
        finishing = any(w is not None and w.busy_finishing() for w in self.pool)
        return self.tasks.least_loaded(self.pool, lambda w: w.ready and not w.busy_finishing(),
                                       lambda w: w.live_outstanding(self.tasks.live), piece=task.piece or finishing)

    def _send(self, worker: Worker, key, task) -> None:
        worker.outstanding[key] = task
        try:  # the slots it may reuse ride along: one message, one wake-up of the worker, instead of two
            worker.conn.send_bytes(encode(RunTask(key, task, self._releasing.pop(worker.id, []), (worker.position, self.workers))))
        except OSError:
            pass  # its death is handled when wait() sees the EOF

    def _take_releases(self) -> None:
        """Slots the consumer let go since the last dispatch: into each worker's ring, else its next message."""
        for wid, slot in self.views.take():
            worker = self.by_id.get(wid)
            if worker is None or worker.ring is None or not worker.ring.push(slot):
                self._releasing[wid].append(slot)

    def _send_releases(self) -> None:
        """A `Release` to each worker whose freed slots no task carried."""
        for wid, slots in self._releasing.items():
            worker = self.by_id.get(wid)
            if worker is not None and worker.ready:
                try:
                    worker.conn.send_bytes(encode(Release(slots)))
                except OSError:
                    pass
        self._releasing.clear()

    # ------------------------------------------------------------- collect
    def wait(self, timeout):
        self._check_started()
        events = self.tasks.take_held()
        if events:
            return events
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.handshake.take(self._adopt)
            self._take_releases()  # before blocking: a worker on a full /dev/shm may be waiting for one (`SlotWriter._handed_back`)
            self._send_releases()
            starting = [w for w in self.pool if w is not None and not w.ready]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            events.extend(self._read_messages(self._poll_step(remaining, bool(starting))))
            self._check_starting(starting)
            if self.timeout is not None:
                self._stop_stuck()
            events.extend(self.tasks.take_held())
            self._dispatch()
            if events or (deadline is not None and time.monotonic() >= deadline):
                return events

    def _poll_step(self, remaining: float | None, starting: bool) -> float | None:
        """How long one look at the connections may block: short while workers start or samples have a time limit."""
        step = remaining
        if starting:
            step = 0.05 if step is None else min(step, 0.05)
        if self.timeout is not None:  # look at running samples a few times per limit
            poll = min(0.5, max(0.01, self.timeout / 4))
            step = poll if step is None else min(step, poll)
        return step

    def _read_messages(self, step: float | None) -> list:
        """The finished tasks among the messages that arrive within ``step`` seconds (and the accept thread's wake-ups)."""
        events = []
        for conn, worker in self.readable.wait(step):
            if worker is None:  # the wake pipe: the accept thread took a connection
                self.handshake.wake_r.recv_bytes()
                continue
            received = time.perf_counter()
            try:
                message = decode(conn.recv_bytes())
            except (EOFError, OSError):
                self._on_death(worker)
                continue
            new = self._on_message(worker, message)
            for event in new:
                event.result.transport = time.perf_counter() - received
            events.extend(new)
        return events

    def _check_starting(self, starting: list) -> None:
        """A starting worker that died is replaced, one that takes too long is an error; the interval goes back once all are up."""
        for worker in starting:
            if worker.proc.poll() is not None and self.pool[worker.position] is worker and worker.conn is None:
                self._on_death(worker)
            elif time.monotonic() - worker.started > START_TIMEOUT and worker.conn is None:
                raise WorkerError(f"a process worker did not start within {START_TIMEOUT:.0f} s; is the machine overloaded?")
        if starting and self._switch.held:
            self._release_switch_if_up()

    def _release_switch_if_up(self) -> None:
        """Give the shorter switch interval back once every worker has the pipeline, or is held and waiting for it.

        Not at `Ready`: nothing may poll the workers until the next epoch, and the user's threads would run at the
        short interval meanwhile. Whoever waits for work later holds the interval itself (`Executor.workers_elsewhere`).
        """
        # (waiting while the pipeline is pickled is still starting: it is sent at once after)
        waiting = self.handshake.waiting_ids() if self._held else set()
        if all(w is None or w.ready or w.has_part or w.id in waiting for w in list(self.pool)):
            self._switch.give_back()

    def _on_message(self, worker: Worker, message) -> list:
        if isinstance(message, Ready):
            worker.ready = True
            return []
        if isinstance(message, PartError):
            self.close()
            raise WorkerError(
                "a process worker could not load the pipeline (its functions are unpickled "
                "in a fresh interpreter, so every module they use must be importable there):\n"
                + message.traceback
            )
        if not isinstance(message, Done):
            raise WorkerError(f"a process worker sent an unexpected message: {type(message).__name__}")
        key, result, fields = message.key, message.result, message.fields
        result.worker = worker.position
        if fields is not None:
            try:
                result.payload = worker.reader.open(fields)
            except SegmentGone:  # a new slot in a memory file died with its worker: the task is not done
                self._lost(worker)
                return []
        task = worker.outstanding.pop(key, None)
        if task is not None:
            self.tasks.finished(key, task, result.consumed)
        if not self.tasks.live(key):
            return []  # dropping the result's views releases the slot
        return [Event(key, result)]

    def _lost(self, worker: Worker) -> None:
        """``worker`` exited before the consumer mapped what it handed over: the death path runs its tasks again."""
        worker.proc.kill()  # it is gone already, or no use: what it sends cannot be read
        self._on_death(worker)

    def _stop_stuck(self) -> None:
        """Kill each worker whose sample has run past the limit; its task runs again without that sample."""
        now, limit = time.monotonic_ns(), int(self.timeout * 1e9)
        for worker in list(self.pool):
            if worker is None or not worker.outstanding:
                continue
            current = worker.current_sample()
            if current is None or now - current[2] <= limit:
                continue
            worker.proc.kill()  # SIGKILL: a sample stuck in a system call would not run a SIGTERM handler
            self._on_death(worker, stuck=current)

    def _on_death(self, worker: Worker, stuck: tuple | None = None) -> None:
        """A worker's pipe reached EOF (or ``stuck``: it was killed on ``(task number, index, start)``)."""
        if self.pool[worker.position] is not worker:
            return
        if worker.conn is not None:
            self.readable.remove(worker.conn)  # before close: its descriptor number may be reused at once
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
        if stuck is not None:
            _leave_out(redo, *stuck[:2])  # no attempt counted: the stuck sample is not run again
        elif redo:
            first_key, first_task = redo[0]
            if self.tasks.blame(first_key) >= MAX_ATTEMPTS:
                redo = redo[1:]
                where = self.describe_index(index) if index >= 0 else None
                sample = f"sample {index}" + (f" ({where})" if where else "") if index >= 0 else f"task {first_task.number}"
                message = (
                    f"a process worker died {MAX_ATTEMPTS} times on {sample} ({how}); the sample "
                    "probably crashes the decoder or exhausts memory. Remove or repair it, or run "
                    "with backend='thread' to see the error in-process."
                )
                if self.tasks.live(first_key):  # (a cancelled task's failure is nobody's)
                    self.tasks.hold([Event(first_key, Result(error=TaskError.crash(
                        message, how, index=index if index >= 0 else None, where=where,
                    )))])
        self._spawn(worker.position)
        self.tasks.requeue(redo, worker.position)

    def outstanding(self):
        return sum(len(w.outstanding) for w in self.pool if w is not None) + len(self.tasks)

    def cancel(self, generation):
        """Drop ``generation``'s backlog; its tasks sent to workers stop before their next sample (the status word)."""
        self.tasks.cancel(generation)
        self._cancelled_through = max(self._cancelled_through, generation)
        for worker in self.pool:
            if worker is not None and worker.status is not None:
                worker.mark_cancelled(self._cancelled_through)

    def take_queued(self) -> list:
        """The backlog's tasks no worker holds yet (late binding: past each worker's share of the window), in key order."""
        taken = []
        while (pair := self.tasks.take_unpinned()) is not None:
            taken.append(pair)
        return sorted(taken, key=lambda pair: pair[0])

    def workers_forked(self) -> bool:
        return not self.still_starting() and all(w.proc.known.is_set() for w in self.pool if w is not None and isinstance(w.proc, ForkedProcess))

    def worker_pids(self) -> list[int]:
        return [w.proc.pid for w in self.pool if w is not None]

    # ------------------------------------------------------------- shutdown
    @property
    def closing(self) -> bool:
        """`close` has begun: no worker starts from then on, and the hand-shake sends none the pipeline."""
        return self.handshake.closing

    def close(self):
        if self.closing:
            return
        self.handshake.closing = True
        if self.still_starting() and self._starting is not threading.current_thread():
            self._starting.join()  # it forks no worker once closing is set: the ones it forked are closed below
        with short_switch_interval():  # its waits for the workers' exits get the GIL back sooner beside busy threads
            self._close()

    def _close(self):
        self.handshake.stop_waiting()  # held workers, never given the pipeline: they stop as told (or are terminated below)
        workers = [w for w in self.pool if w is not None]
        for w in workers:
            if w.conn is not None:
                try:
                    w.conn.send_bytes(encode(Stop()))
                except OSError:
                    pass
        deadline = time.monotonic() + 1.0
        for w in workers:
            if not w.ready:
                # Still starting (forking, connecting, or unpickling the pipeline, whose imports can take seconds):
                # nothing to finish, and Stop would be read only after the imports.
                w.proc.terminate()
                continue
            try:
                w.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                w.proc.terminate()
        for w in workers:
            if isinstance(w.proc, ForkedProcess) and not w.proc.known.is_set():
                continue  # not forked yet (its zygote imports): terminated as it is, its exit reaped by the zygote
            try:
                w.proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
            if w.conn is not None:
                w.conn.close()
        self.handshake.close()  # the accept thread sees `closing` and exits
        for w in workers:
            sweep(f"{self.prefix}w{w.id}_")
        self.pool = [None] * self.workers
        self.by_id.clear()
        self.shared.close()
        self._switch.give_back()


def _leave_out(redo, number: int, index: int) -> None:
    """Mark ``index`` as timed out in the task that holds it (task ``number`` if it does), so its rerun skips it."""
    holding = [task for _, task in redo if task.indices is not None and index in task.indices]
    for task in sorted(holding, key=lambda task: task.number != number)[:1]:
        task.timed_out = task.timed_out + (index,)


