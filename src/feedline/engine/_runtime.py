"""The machinery behind a pipeline: its executor, the prefetch depth, the active epoch.

A runtime is built the first time a pipeline is iterated and lives until
``pipe.close()``, ``with pipe:`` ends, the pipeline is garbage collected, or
the interpreter exits (an ``atexit`` hook closes every live runtime). Its
workers persist across epochs.

Only one epoch iterator is active per runtime: starting another (a new
``iter(pipe)``) supersedes the old one, whose outstanding tasks are
cancelled; using the old iterator afterwards raises a clear error.
"""

from __future__ import annotations

import atexit
import itertools
import time
import weakref
from typing import Callable

import cloudpickle

from .. import _startup
from .._errors import FeedlineError
from .._switch_interval import short_switch_interval
from ..backends import PartNotPicklable, check_not_loading, check_sendable, load_process_backend, make_executor
from . import _remembered as remembered_choice
from ._autotune import MAX_WORKERS, MAX_WORKERS_PER_CORE, DepthTuner, WorkerTuner
from ._bulk_trial import SerialOrThreads
from ._choice import choose, default_workers
from ._memory import FREE_SHARE, memory_readers
from ._trial import BackendTrial, NotStarted
from .choice import first_threads

__all__ = ["Runtime"]

_live: "weakref.WeakSet[Runtime]" = weakref.WeakSet()


class Runtime:
    """Executor plus bookkeeping for one pipeline object.

    Attributes:
        plan: the compiled plan it runs.
        backend, workers, decision: what runs the work, and why.
        cores: cores the workers can use (the report's denominator).
        depth: tasks that may be outstanding (the prefetch window).
        tuner: raises ``depth`` while the consumer waits behind a full window.
        executor: the backend's `feedline.backends.Executor`.
        closed: True once `close` ran.
    """

    def __init__(self, plan):
        check_not_loading()  # a worker loading its pipeline imported a module that runs one: workers without end
        _startup.runtime_built(self)  # iterating now: a server started meanwhile would take a core from its threads
        self.plan = plan
        self.memory_key = ""  # the automatic choice's key in the remembered verdicts (`_remembered`), once it has one
        # Set-up makes blocking calls (cgroup files, pickling, spawning): each waits for the GIL to come back,
        # 5 ms at a time beside busy Python threads unless the interval is shorter (`feedline._switch_interval`).
        with short_switch_interval():  # a process executor holds its own until its workers are ready
            backend, workers = self._start_executor(plan)
        self.cores = self.executor.cores
        self.depth = plan.depth or max(2, 2 * self.workers)  # two tasks per worker: one running, one queued
        self.tuner = DepthTuner(self.depth, self.workers, enabled=plan.depth is None and self.executor.prefetches,
                                messages=lambda: self.backend in ("process", "ray"), room=lambda: self.executor.batch_room())
        self.worker_tuner = WorkerTuner(self.workers, self.cores, enabled=plan.workers is None and backend in ("auto", "thread", "process", "serial-or-thread"))
        self.set_depth(self.depth)
        self._generations = itertools.count()
        self._active = None  # weakref to the current iterator
        self._supersede = None  # weak method: tells the current iterator it was superseded
        self._latest_stats = None
        self._depth_before_growth: int | None = None  # the prefetch depth before the worker tuner's last growth
        self.learned_chunk: int | None = None  # samples per task of the next epoch, measured (see _state.measured_chunk)
        self.row_seconds: float | None = None  # task seconds per row on the last epoch: which of the next's last batches to cut (_tail)
        self.consumer_inside = False  # a consumer waits in next() for a batch now (`iterating`)
        self.consumer_left = 0.0  # when a consumer last came back from next() (perf_counter)
        self.closed = False
        _live.add(self)

    def _start_executor(self, plan) -> tuple[str, int]:
        """Choose the backend and worker count (``self.reason`` says why) and start ``self.executor``."""
        _startup.before_run(plan)  # e.g. the fork server starts while the pipeline is pickled
        backend, workers, self.reason = choose(plan)
        if backend == "auto":
            self.executor = _auto_executor(plan, workers, self)
        elif backend == "serial-or-thread":
            self.executor = SerialOrThreads(make_executor("serial", plan.part, 1, cores=default_workers()),
                                            make_executor("thread", plan.part, workers, cores=default_workers()))
        else:
            try:
                self.executor = make_executor(backend, plan.part, workers, cores=default_workers(), ray=plan.ray)
            except PartNotPicklable as e:
                raise _pickling_error(plan, e.__cause__ or e) from (e.__cause__ or e)
        return backend, workers

    @property
    def workers(self) -> int:
        """Workers running the work now: the executor's count, the one place it is kept."""
        return self.executor.workers

    @property
    def backend(self) -> str:
        """The backend running the work now (the automatic choice may switch once, early on)."""
        return self.executor.name

    @property
    def decision(self) -> str:
        """Why this backend and worker count: the choice, and what the executor measured."""
        return f"{self.reason}; {self.executor.note}" if self.executor.note else self.reason

    @property
    def trial(self) -> dict:
        """Samples/s each backend delivered in the automatic choice's trial (empty if none ran)."""
        return dict(self.executor.rates) if isinstance(self.executor, (BackendTrial, SerialOrThreads)) else {}

    def set_depth(self, depth: int) -> None:
        """Change the prefetch depth; each worker may hold its share of it."""
        self.depth = depth
        self.executor.set_window_share(max(1, -(-depth // self.workers)))

    def observe_workers(self, stats) -> str | None:
        """Let the worker tuner see the epoch's counters after a batch; add workers if it asks and the executor can.

        Returns the decision (text) when the worker count changed.
        """
        old = self.workers
        wanted = self.worker_tuner.observe(stats, self.tuner.batch_bytes, steady=self.executor.steady)
        if wanted is not None and wanted < old:  # a growth that did not pay: undone where the backend can let workers go
            if self.executor.shrink(wanted):
                self._follow_workers()
                self._remember_workers()
                if self._depth_before_growth is not None:  # the depth the growth raised goes back too
                    self.set_depth(max(self._depth_before_growth, 2 * self.workers))
                    self.tuner.depth = self.depth
                return f"workers {old} -> {self.workers}: {self.worker_tuner.last_reason}"
            self.worker_tuner.workers = old
            return f"worker count stays at {old}: {self.worker_tuner.last_reason}"
        cap = ""
        if wanted is not None and wanted > old:
            wanted, cap = self._capped_by_memory(old, wanted)
            if wanted <= old:  # no room for one more process worker: the count stays, and stops growing
                self.worker_tuner.workers = old
                self.worker_tuner.stopped = self.worker_tuner.last_reason + cap
                return f"worker count stays at {old}: {self.worker_tuner.stopped}"
        depth = self.depth
        if wanted is None or not self.executor.grow(wanted):
            if wanted is not None:
                self.worker_tuner.workers = old  # this backend cannot add workers (yet): ask again later
            return None
        self._depth_before_growth = depth
        self._follow_workers()
        self._remember_workers()
        return f"workers {old} -> {self.workers}: {self.worker_tuner.last_reason}{cap}"

    def _capped_by_memory(self, old: int, wanted: int) -> tuple[int, str]:
        """Process workers: only as many more as `FREE_SHARE` of the available memory holds (`feedline.engine._memory`).

        Returns the count and, where it is capped, why (for this decision only:
        the tuner asks again with the same reason, and the cap is measured anew).
        """
        if self.backend != "process":
            return wanted, ""
        readers = memory_readers.current()
        each, room = readers.private_bytes(self.executor.worker_pids()), readers.available()
        if not each or room is None:
            return wanted, ""
        fit = old + int(FREE_SHARE * room // each)
        if fit >= wanted:
            return wanted, ""
        return max(fit, old), (f" (capped at {max(fit, old)}, not {wanted}: each process worker holds "
                               f"{each / 2**20:,.0f} MiB of its own and {room / 2**20:,.0f} MiB are available)")

    def _remember_workers(self) -> None:
        """The automatic choice's next run starts at the count the tuner settled on (`feedline.engine._remembered`)."""
        if self.memory_key and self.executor.settled:
            trouble = remembered_choice.note_workers(self.memory_key, self.backend, self.workers)
            if trouble and trouble not in self.reason:
                self.reason += f"; {trouble}"

    def _follow_workers(self) -> None:
        """The tuners and the prefetch window follow the executor's worker count (grown by the tuner, or by Ray)."""
        self.worker_tuner.workers = self.tuner.workers = self.workers
        self.set_depth(max(self.depth, 2 * self.workers))
        self.tuner.depth = self.depth

    def begin(self, iterator, on_superseded: Callable[[], None]) -> int:
        """Make ``iterator`` the active one (superseding the previous); return its generation."""
        self._check_open()
        if self.tuner.workers != self.workers:  # the executor added workers itself (Ray: a node joined)
            self._follow_workers()
        previous = self._supersede() if self._supersede is not None else None
        if previous is not None:
            previous()
        self._active = weakref.ref(iterator)
        self._supersede = weakref.WeakMethod(on_superseded)  # never keeps an abandoned iterator alive
        return next(self._generations)

    def iterating(self, within: float) -> bool:
        """Whether a consumer iterates it: an epoch under way, the consumer in ``next()`` now or back within ``within`` seconds.

        Read from other threads (`feedline._startup`, a start after set-up). A pipeline partly
        consumed and kept (a batch looked at before training) does not
        count: its workers hold finished batches and take no core, and a
        serial one runs only inside ``next()``.
        """
        recent = self.consumer_inside or time.perf_counter() - self.consumer_left < within
        return recent and not self.closed and self.executor.outstanding() > 0

    def publish(self, stats) -> None:
        """The stats of the most recent epoch (``pipe.stats()`` reads them, even mid-way)."""
        self._latest_stats = stats

    def latest_stats(self):
        """The active epoch's stats, else the last finished epoch's, else None."""
        active = self._active() if self._active is not None else None
        return active.stats() if active is not None else self._latest_stats

    def _check_open(self) -> None:
        if self.closed:
            raise FeedlineError("this pipeline was closed; build it again (or iterate a new pipeline) to start workers")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.executor.close()
        _live.discard(self)


@atexit.register
def _close_all() -> None:
    for runtime in list(_live):
        runtime.close()


def _auto_executor(plan, workers: int, runtime):
    """Threads at once, processes as they start, both measured (see `feedline.engine._trial`)."""
    cores = default_workers()
    try:
        check_sendable(plan.part)  # now: the trial starts the process workers only if the threads hold the GIL
    except PartNotPicklable as e:
        cause = e.__cause__ or e
        runtime.reason += f"; threads: the pipeline cannot be sent to processes ({type(cause).__name__}: {str(cause)[:160]})"
        return make_executor("thread", plan.part, workers, cores=cores)

    def restart(kind: str, count: int):  # starts the process workers; also the loser of a trial run again
        return make_executor(kind, plan.part, count, cores=cores)

    key, remembered = _recall(plan, workers, cores, runtime)
    runtime.memory_key = key

    def on_verdict(winner: str, rates: dict, per_worker: float, why: str, count: int) -> str | None:
        return remembered_choice.record(key, winner, rates, per_worker, why, count) if key else None

    if remembered is not None:
        count = workers
        if remembered.workers and plan.workers is None:  # the count the worker tuner left (a count set by hand stays)
            count = max(1, min(remembered.workers, MAX_WORKERS, MAX_WORKERS_PER_CORE * cores))
            if count != workers:  # the choice's "N workers (one per available core)" would contradict the count
                runtime.reason = f"{count} workers (where the worker tuner left them in an earlier run; {workers} is one per core)"
        threads = (make_executor("thread", plan.part, count, cores=cores) if remembered.winner == "thread"
                   else NotStarted(count, "thread", cores))
        try:
            return BackendTrial(threads, lambda: restart("process", count), count, restart,
                                remembered=remembered, on_verdict=on_verdict)
        except Exception as e:  # the remembered winner cannot start now: the trial decides
            threads.close()
            runtime.reason += f"; the remembered processes could not start ({type(e).__name__}: {str(e)[:160]}): a trial"
    load_process_backend()  # not in the consumer while the threads are judged: its imports hold the GIL
    threads = make_executor("thread", plan.part, first_threads(workers, cores), cores=cores)
    return BackendTrial(threads, lambda: restart("process", workers), workers, restart, on_verdict=on_verdict,
                        park=lambda: make_executor("process", plan.part, workers, cores=cores, held=True))


def _recall(plan, workers: int, cores: int, runtime) -> tuple:
    """(the key of ``plan``'s work on this machine, the verdict remembered for it or None); ("", None) when off."""
    if remembered_choice.choices_file() is None:
        return "", None
    try:
        key = remembered_choice.work_key(plan, workers, cores)
    except Exception as e:  # a step whose code cannot be looked into: the trial runs, as it would without a memory
        runtime.reason += f"; not remembered (its work could not be fingerprinted: {type(e).__name__}: {str(e)[:120]})"
        return "", None
    return key, remembered_choice.recall(key)


def _pickling_error(plan, error: BaseException) -> TypeError:
    culprits = []
    for op in plan.part.ops:
        try:
            cloudpickle.dumps(op.function)
        except Exception as e:
            culprits.append(f"{op.name!r} ({type(e).__name__}: {e})")
    what = "map/filter function " + ", ".join(culprits) if culprits else "the pipeline's source or functions"
    return TypeError(
        f"{what} cannot be sent to worker processes: {error}. Functions travel with cloudpickle; "
        "objects such as open files, locks, sockets or database connections cannot. Create them "
        "inside the function (lazily, once per worker), or use backend='thread'."
    )
