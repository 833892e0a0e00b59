"""The thread backend: a pool of threads in the consumer's process.

Right for work that releases the GIL (image decoders, NumPy on large
arrays): no start-up cost, no transport. Each thread has its own task
queue (tasks of one stream shard go to one thread, in order); results go
to one shared queue. An unexpected exception in a thread is returned as a
task error, never lost, and the thread lives on.

Cancel (an epoch nobody reads): its queued tasks leave the queues at once;
a thread on one of its tasks stops before the next sample (`Cancelled`),
and meanwhile new tasks go to threads with nothing to run, one each.

Shutdown: `close` puts a stop marker in every queue and joins the threads
(a thread stuck in user code is abandoned as a daemon after a timeout).
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time

from .._batch_memory import reusing_arrays
from .._blas_limit import OneBlasThread
from .._collector_watch import CollectorWatch
from .._cpu_wait import CpuWaitClock
from .._gc_freeze import GcFreeze
from .._malloc import keep_freed_memory
from .._worker_threads import limit_this_thread
from ..worker import Cancelled, Result, StopHere, TaskError, run_task, splittable
from ._base import Event, Executor, Returned, WorkerClock

__all__ = ["ThreadExecutor"]

_STOP = object()
_names = itertools.count()


class _Running:
    """The task a thread is on: when it started, and how far it got (samples begun)."""

    __slots__ = ("key", "rows", "started", "cpu", "samples", "abandoned", "splits")

    def __init__(self, key, rows: int, splits: bool):
        self.key, self.rows, self.started, self.cpu, self.samples = key, rows, time.perf_counter(), time.thread_time(), 0
        self.abandoned = False  # given back at its next sample (`ThreadExecutor.abandon_running`) ...
        self.splits = splits  # ... keeping the rows done (`feedline.worker.splittable`)


class ThreadExecutor(Executor):
    name = "thread"

    def __init__(self, part, workers: int):
        self.part = part
        self.workers = workers
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.inboxes = [queue.SimpleQueue() for _ in range(workers)]
        self.load = [0] * workers
        self.pending = 0
        self._pieces: collections.deque = collections.deque()  # (key, task): pieces of a batch waiting for a free thread
        self.cancelled: set[int] = set()
        self._pinned = False  # a stream shard was pinned to a thread: the count must not change
        self._shrunk = False  # threads were let go (`shrink`): their slots in the lists below stay, unused
        self.running: list[_Running | None] = [None] * workers
        self.idle = [0.0] * workers  # seconds each thread waited for a task with its inbox empty (not for the GIL)
        self.begun = [0] * workers  # samples each thread began while watched
        self._cpu_clocks: list = []  # each thread's CPU-time clock id (None where the system has none)
        self._wait_clocks: list = []  # each thread's `CpuWaitClock` while it runs (None before and after)
        self.returned: list = []  # (key, Returned): abandoned tasks, for `take_returned`
        self._watched = False  # count each task's samples (for `running_rates`, `abandon_running`)
        self._keep = workers  # threads from this index on wait between samples until `resume` (see `pause_beyond`)
        self._route = workers  # new tasks go to the threads below this index (see `narrow`)
        self._resumed = threading.Event()
        self._resumed.set()
        self._give_back_paused = False  # paused tasks are given back when resumed (`resume(give_back=True)`)
        self._paused: set = set()  # keys of the tasks whose threads wait in a pause now
        self._paused_lock = threading.Lock()
        self.threads = []
        self.arrays = reusing_arrays()  # large batch arrays used again once the consumer lets go
        self._pool = next(_names)
        # Process-wide, so only with FEEDLINE_TUNE_PROCESS=1 (`feedline._process_tuning`); each thread limits its own
        # OpenMP pool either way (`_work`).
        self._gc_freeze = GcFreeze()  # the per-sample Python runs here: keep the collector off the objects already here
        self._collector_watch = CollectorWatch()  # the full collections timed, for the epoch's report
        self._one_blas_thread = OneBlasThread()  # a BLAS pool per call beside a thread per core oversubscribes them
        keep_freed_memory()  # the process workers' heap thresholds: large temporaries not faulted in per sample
        for n, inbox in enumerate(self.inboxes):
            self._start_thread(n, inbox)

    def _start_thread(self, n: int, inbox) -> None:
        thread = threading.Thread(target=self._work, args=(n, inbox), name=f"feedline-{self._pool}-thread-{n}", daemon=True)
        self._wait_clocks.append(None)  # (before it starts: the thread sets its own)
        thread.start()
        self.threads.append(thread)
        try:
            self._cpu_clocks.append(time.pthread_getcpuclockid(thread.ident))
        except (AttributeError, OSError):  # Windows has no per-thread clock id
            self._cpu_clocks.append(None)

    def grow(self, workers: int) -> bool:
        """Add threads up to ``workers`` (tasks pinned to a stream shard keep their thread: affinity is modulo the count)."""
        if workers <= self.workers or self._pinned or self._shrunk:
            return False
        if self._route == self.workers:
            self._route = workers
        for n in range(self.workers, workers):
            self.inboxes.append(queue.SimpleQueue())
            self.load.append(0)
            self.running.append(None)
            self.idle.append(0.0)
            self.begun.append(0)
            self._start_thread(n, self.inboxes[n])
        self.workers = workers
        return True

    def shrink(self, workers: int) -> bool:
        """Keep ``workers`` threads: new tasks go only to them; the others finish what they hold, then end.

        For a growth that did not pay (`WorkerTuner`: threads that waited on
        the GIL, not on I/O, and slowed each other down). A pool that shrank
        does not grow again.
        """
        if not 1 <= workers < self.workers or self._pinned:
            return False
        self._route = min(self._route, workers)
        for inbox in self.inboxes[workers : self.workers]:
            inbox.put(_STOP)  # after the tasks already queued there
        self.workers = workers
        self._shrunk = True
        return True

    def _work(self, n, inbox):
        waits = CpuWaitClock()  # this thread's waits for a CPU: starved by other programs, or waiting on I/O?
        self._wait_clocks[n] = waits
        limit_this_thread()  # one OpenMP (torch intra-op) thread here: the workers are already one per core
        try:
            self._serve(n, inbox, waits)
        finally:
            self._wait_clocks[n] = None
            waits.close()

    def _serve(self, n, inbox, waits: CpuWaitClock):
        streams: dict = {}
        spent: list = []  # the last task's samples, let go of one by one as the next task's are made (`run_task`)
        while True:
            starved = inbox.empty()  # else the wait below is for the GIL or a CPU, not for a task
            if starved:
                spent.clear()  # nothing to make next: the memory goes now
            idle_from = time.perf_counter()
            item = inbox.get()
            if starved:
                self.idle[n] += time.perf_counter() - idle_from
            if item is _STOP:
                return
            key, task = item
            running = self.running[n] = _Running(key, 0 if task.indices is None else len(task.indices),
                                                 splittable(self.part, task))

            def progress(index, running=running, n=n):
                if running.key[0] in self.cancelled:
                    raise Cancelled
                running.samples += 1
                self.begun[n] += 1
                if running.abandoned:
                    raise StopHere
                if n >= self._keep and not self._resumed.is_set():
                    with self._paused_lock:
                        self._paused.add(running.key)
                    self._resumed.wait()  # paused while process workers start (`pause_beyond`)
                    with self._paused_lock:
                        self._paused.discard(running.key)
                    if running.abandoned or self._give_back_paused:
                        raise StopHere

            def unless_cancelled(index, generation=key[0], cancelled=self.cancelled):
                if generation in cancelled:
                    raise Cancelled

            limit_this_thread()  # again where torch was imported since (a no-op otherwise)
            try:
                watched = progress if self._watched else unless_cancelled
                result = run_task(self.part, task, self.arrays, progress=watched, streams=streams, waits=waits,
                                  worker=(n, self.workers, "thread"), spent=spent)
                result.worker = n
                if result.stopped is not None:  # given back with its first rows done: only the rest runs elsewhere
                    result = Returned(task, result.stopped, result.cpu, partial=result)
            except Cancelled:  # nobody will read it (`cancel`): `wait` drops the empty result
                result = Result()
            except StopHere:  # given back before a sample was done, or a task that cannot be split: it runs again whole
                result = Returned(task, running.samples - 1, time.thread_time() - running.cpu)
            except BaseException as exc:  # reported to the consumer, never swallowed
                result = Result(error=TaskError.from_exception(exc))
                result.worker = n
            self.running[n] = None
            self.results.put((n, key, result))

    def submit(self, key, task, affinity=None):
        # While a thread finishes a cancelled task's sample, a task waits for a free thread, as a piece does
        if (task.piece or self._finishing_cancelled()) and affinity is None:
            self.pending += 1
            self._pieces.append((key, task))
            self._give_pieces()
            return
        if affinity is not None:
            self._pinned = True
        if affinity is not None:
            n = affinity % self.workers
        else:
            n = min(range(self._route), key=self.load.__getitem__)
        self.load[n] += 1
        self.pending += 1
        self.inboxes[n].put((key, task))

    def idle_workers(self) -> int:
        return max(0, sum(1 for n in range(self._route) if self.load[n] == 0) - len(self._pieces))

    def _finishing_cancelled(self) -> bool:
        """Whether a thread is inside a sample of a cancelled task (it ends at the sample's end)."""
        return any(r is not None and r.key[0] in self.cancelled for r in self.running[: self._route])

    def _give_pieces(self) -> None:
        """Pieces of a batch (`feedline.engine._tail`) go to threads with nothing to run, one each.

        Queued behind a whole batch on a busy thread, a piece would end the
        epoch there while another thread idles; so they wait here, and the
        consumer hands them out as threads come free (`submit`, `wait`).
        """
        while self._pieces:
            free = [n for n in range(self._route) if self.load[n] == 0]
            if not free:
                if self._pieces[0][1].piece or self._finishing_cancelled():
                    return
                free = [min(range(self._route), key=self.load.__getitem__)]  # held for a free thread no longer: as usual
            key, task = self._pieces.popleft()
            self.load[free[0]] += 1
            self.inboxes[free[0]].put((key, task))

    def wait(self, timeout):
        self._give_pieces()
        events = []
        try:
            item = self.results.get(timeout=timeout) if timeout is None or timeout > 0 else self.results.get_nowait()
        except queue.Empty:
            return events
        while True:
            n, key, result = item
            self.load[n] -= 1
            self.pending -= 1
            if isinstance(result, Returned):
                self.returned.append((key, result))
            elif key[0] not in self.cancelled:
                events.append(Event(key, result))
            try:
                item = self.results.get_nowait()
            except queue.Empty:
                self._give_pieces()
                return events

    def outstanding(self):
        return self.pending

    def watch_progress(self, on: bool) -> None:
        """Count the samples of running tasks (a call per sample) while the automatic choice is undecided."""
        self._watched = on

    def running_rates(self, at_least: float = 0.01) -> list[float]:
        """Samples per second of each task running now for ``at_least`` seconds (begun samples over time)."""
        now, rates = time.perf_counter(), []
        for running in list(self.running):
            if running is not None and now - running.started >= at_least and running.samples:
                rates.append(running.samples / (now - running.started))
        return rates

    def side_by_side(self) -> list[WorkerClock] | None:
        """Each thread's `WorkerClock`, read through its CPU-time clock (POSIX); None without per-thread CPU clocks."""
        readings = []
        for n in range(self.workers):
            clock = self._cpu_clocks[n]
            if clock is None:
                return None
            try:
                cpu = time.clock_gettime(clock)
            except OSError:  # the thread is gone (closing)
                return None
            readings.append(WorkerClock(self.running[n] is not None, cpu, self.idle[n], self.begun[n]))
        return readings

    def runnable_waits(self) -> list[float]:
        """Per thread, seconds it has been runnable but waiting for a CPU so far (Linux; 0.0 elsewhere or not yet started).

        Beside `side_by_side`: threads that use little CPU either wait (on
        I/O, or on the GIL held by a thread that is not theirs) or are kept
        off the cores by other programs; only the last shows here.
        """
        return [0.0 if clock is None else clock.read() for clock in self._wait_clocks[: self.workers]]

    def pause_beyond(self, keep: int) -> None:
        """Threads ``keep`` and up wait before their next sample until `resume` (only while progress is watched).

        For the automatic choice while process workers start beside threads
        that hold the GIL: many such threads keep the consumer thread that
        hands the workers their parts waiting for the GIL. Threads that hold
        the GIL deliver about one core however many run, so the few kept
        running lose little; the lowest-numbered threads hold the earliest
        tasks, the first batch among them.
        """
        if keep < self.workers:
            self._keep = keep
            self._give_back_paused = False
            self._resumed.clear()

    def narrow(self, keep: int) -> None:
        """Threads ``keep`` and up begin no new task until `resume`: their queued tasks move to the first ``keep``.

        For the automatic choice while process workers wait for a zygote's
        imports (a core of its own) beside threads that hold the GIL: such
        threads deliver about one core's worth however many run, and fewer
        deliver more where the work takes and drops the GIL many times a
        sample. Unlike `pause_beyond`, no task stops half-way: with nothing
        to take over yet, the consumer may be waiting for it. Tasks pinned
        to a stream shard never move (nothing narrows then).
        """
        if not 1 <= keep < self.workers or self._pinned or self._shrunk:
            return
        self._route = keep
        for n in range(keep, self.workers):
            while True:
                try:
                    item = self.inboxes[n].get_nowait()
                except queue.Empty:
                    break
                self.load[n] -= 1
                to = min(range(keep), key=self.load.__getitem__)
                self.load[to] += 1
                self.inboxes[to].put(item)

    def resume(self, give_back: bool = False) -> list:
        """Let threads paused by `pause_beyond` or narrowed by `narrow` go on, or (``give_back``) give their tasks back.

        Returns the keys of the tasks whose threads were paused (with ``give_back``, those tasks come back).
        """
        with self._paused_lock:
            paused = list(self._paused)
        self._give_back_paused = give_back
        self._keep = self._route = self.workers
        self._resumed.set()
        return paused

    def abandon_running(self, done_under: float = 1.0) -> list:
        """Give back the running tasks at their next sample (`take_returned` has them once back); returns their keys.

        A task that can be split (`feedline.worker.splittable`) keeps the
        rows it has done, and only the rest runs elsewhere, however far it
        got. Of the others, only those with under ``done_under`` of their
        samples begun: one far along costs less to finish here than to run
        again elsewhere. A task that has no next sample finishes as usual
        instead: its key then arrives as an ordinary result.
        """
        keys = []
        for running in list(self.running):
            if running is not None and (running.splits or not running.rows or running.samples < done_under * running.rows):
                running.abandoned = True
                keys.append(running.key)
        return keys

    def take_returned(self) -> list:
        """The ``(key, Returned)`` pairs given back since the last call."""
        taken, self.returned = self.returned, []
        return taken

    def take_queued(self) -> list:
        """Remove and return the ``(key, task)`` pairs no thread has started, in submission order.

        The automatic choice hands them to process workers once those are
        up, rather than leaving them to the threads it is about to measure
        against (tasks pinned to a stream shard are never queued here in
        that mode: streaming pipelines do not run the trial).
        """
        taken = []
        while self._pieces:
            taken.append(self._pieces.popleft())
            self.pending -= 1
        for n, (key, task) in self._unqueue(lambda key: True):
            taken.append((key, task))
            self.load[n] -= 1
            self.pending -= 1
        return sorted(taken, key=lambda pair: pair[0])

    def cancel(self, generation):
        """Drop ``generation``'s queued tasks now; its running ones stop at their next sample (`Cancelled`)."""
        self.cancelled.add(generation)
        kept_pieces = collections.deque(item for item in self._pieces if item[0][0] != generation)
        self.pending -= len(self._pieces) - len(kept_pieces)  # (pieces count in `pending`, not in a thread's load)
        self._pieces = kept_pieces
        for n, (key, _) in self._unqueue(lambda key: key[0] == generation):
            self.results.put((n, key, Result()))  # counted back in `wait`, dropped there

    def _unqueue(self, wanted) -> list:
        """Remove the queued ``(key, task)`` pairs whose key is ``wanted``, as ``(thread, pair)``; the rest stay, in order."""
        taken = []
        for n, inbox in enumerate(self.inboxes):
            kept = []
            while True:
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP and wanted(item[0]):
                    taken.append((n, item))
                else:
                    kept.append(item)
            for item in kept:
                inbox.put(item)
        return taken

    def close(self):
        self.resume()
        for inbox in self.inboxes:
            inbox.put(_STOP)
        for thread in self.threads:
            thread.join(timeout=2.0)
        self.threads = []
        self.arrays.clear()
        self._gc_freeze.release()
        self._collector_watch.release()
        self._one_blas_thread.release()
