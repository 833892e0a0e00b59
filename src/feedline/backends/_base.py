"""The interface every execution backend implements, with its capabilities declared.

The consumer (`feedline.engine`) calls `submit` for each task (at most the
prefetch depth outstanding) and `wait` to collect finished ones in any
order. Task keys are ``(generation, task number)``; the generation tells
an abandoned epoch's tasks apart, and `cancel` stops them on every backend:
queued ones at once, running ones at their next sample. What an
executor can do beyond that is an attribute or method here with a neutral
default, never guessed with ``hasattr``: among them the mechanisms the
automatic choice (`feedline.engine._trial`) drives while it tries two
backends, in three groups: watching the workers side by side
(`watch_progress`, `side_by_side`, `runnable_waits`, `running_rates`),
steering the pool (`pause_beyond`, `narrow`, `resume`) and handing tasks
over to another executor (`take_queued`, `abandon_running`,
`take_returned`). An executor without one gives the neutral answer: nothing
seen, nothing steered, nothing taken back, so its tasks finish where they are.
"""

from __future__ import annotations

import contextlib
import os
from typing import NamedTuple

from .._errors import FeedlineError

__all__ = ["Event", "Executor", "PartNotPicklable", "Returned", "WorkerClock", "check_not_loading", "in_worker", "loading_pipeline",
           "mark_worker"]

WORKER_VAR = "FEEDLINE_WORKER"  # set in every process worker and Ray actor (and so in what they start)


def mark_worker() -> None:
    """Mark this process as a feedline worker: describing a pipeline here starts no fork server ahead of time."""
    os.environ[WORKER_VAR] = "1"


def in_worker() -> bool:
    """True in a process worker or Ray actor (a user module that builds a pipeline at import runs there too)."""
    return bool(os.environ.get(WORKER_VAR))


_loading = False  # a worker is unpickling the pipeline it was sent (`loading_pipeline`)


@contextlib.contextmanager
def loading_pipeline():
    """While a worker unpickles its pipeline: iterating one then is refused (`check_not_loading`)."""
    global _loading
    _loading = True
    try:
        yield
    finally:
        _loading = False


def check_not_loading() -> None:
    """Refuse to run a pipeline while this worker unpickles the one it was sent: its workers would do the same.

    A worker unpickles the map's function by importing the module that
    defines it; a module that also iterates a pipeline when it is imported
    (a script imported as a module, its run code not under
    ``if __name__ == "__main__":``) would start workers of its own there,
    each of which imports the module again: a fork bomb (each level two
    workers, hundreds of processes within minutes). Python's ``spawn``
    refuses the same with a ``RuntimeError``; so does this, and the worker
    reports it to the consumer as the reason the pipeline could not load.

    Raises:
        FeedlineError: a pipeline is iterated while this worker loads its own.
    """
    if _loading:
        raise FeedlineError(
            "feedline: a pipeline was iterated while a feedline worker was loading the pipeline it was sent: the "
            "worker imports the module that defines the map's function, and that module iterates a pipeline when it "
            "is imported, so every worker would start workers of its own, without end. Put the code that runs the "
            'pipeline under `if __name__ == "__main__":` in that module, or define the function in a module that '
            "runs nothing when imported.")


class Event(NamedTuple):
    """A finished task: its key ``(generation, task number)`` and `Result`."""

    key: tuple
    result: object


class WorkerClock(NamedTuple):
    """One worker as `Executor.side_by_side` reads it now: its totals so far (differences of two readings tell a stretch)."""

    busy: bool  # on a task now
    cpu: float  # CPU seconds it has used
    idle: float  # seconds it waited for a task
    begun: int  # samples it began while progress was watched (`Executor.watch_progress`)


class Returned(NamedTuple):
    """A task given back unfinished (`Executor.abandon_running`, `Executor.resume`); its first ``rows`` samples took ``cpu`` seconds.

    ``partial``: None, and the whole task runs again elsewhere; or the
    `Result` holding the batch of those first ``rows`` samples, and only
    the rest runs elsewhere (`feedline.worker.StopHere`); where the two
    parts do not join exactly, the whole task runs again.
    """

    task: object
    rows: int
    cpu: float
    partial: object = None


class PartNotPicklable(Exception):
    """The pipeline could not be pickled for workers in other processes; the cause is chained."""


class Executor:
    """Runs tasks for one pipeline; workers live as long as the executor.

    Attributes:
        name: the backend's name, as given to ``map(backend=...)``.
        workers: how many tasks may run at once.
        cores: cores the workers can use (the machine's, or a Ray cluster's).
        note: how the worker count was arrived at, for the report (or "").
        restarts: workers replaced after dying with work in hand, so far.
        prefetches: tasks run ahead of the consumer, so the prefetch depth
            matters (False for the serial backend, which runs each task when
            it is collected).
        settled: the backend running the work is decided (False while an
            automatic choice still tries backends: tasks are not sized then).
    """

    name = "base"
    workers = 1
    cores = 1
    note = ""
    restarts = 0
    prefetches = True

    def submit(self, key: tuple, task, affinity: int | None = None) -> None:
        """Queue ``task``; ``affinity`` pins tasks of one stream shard to one worker."""
        raise NotImplementedError

    def wait(self, timeout: float | None) -> list[Event]:
        """Finished tasks (possibly none if ``timeout`` passed)."""
        raise NotImplementedError

    def outstanding(self) -> int:
        """Tasks submitted and not yet returned by `wait`."""
        raise NotImplementedError

    def cancel(self, generation: int) -> None:
        """Stop the tasks of ``generation``: nobody will read them (its epoch iterator was closed, dropped or superseded).

        Queued tasks are dropped at once; running ones stop before their
        next sample (`feedline.worker.Cancelled`) and free their worker and
        slots; results that still arrive are dropped. Generations only grow,
        and a runtime cancels a generation before it starts the next, so a
        cancelled generation is never newer than a live one (executors that
        tell workers "everything up to G is cancelled" rely on it).
        """

    def set_window_share(self, tasks: int) -> None:
        """At most ``tasks`` may be handed to one worker at once (executors that bind tasks late use it)."""

    def worker_pids(self) -> list[int]:
        """Process ids of the workers (empty for in-process backends)."""
        return []

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until every worker can take tasks; False on timeout (benchmarks and tests)."""
        return True

    def grow(self, workers: int) -> bool:
        """Run ``workers`` workers from now on (more than now); False if this backend cannot add workers."""
        return False

    def connecting(self) -> bool:
        """Whether workers started ``held`` are still starting, short of waiting for the pipeline (see `release`)."""
        return False

    def release(self) -> None:
        """Hand the pipeline to workers started ``held`` (they take tasks once it is loaded); a no-op otherwise."""

    @property
    def settled(self) -> bool:
        """Whether the backend running the work is decided: always, but for an automatic choice still trying backends."""
        return True

    @property
    def steady(self) -> bool:
        """Whether only the backend that keeps the work runs tasks: decided, and the other's last task back.

        The worker tuner judges only such stretches: tasks of two backends
        side by side say nothing of either (see `feedline.engine._autotune`).
        """
        return True

    def shrink(self, workers: int) -> bool:
        """Run only ``workers`` workers from now on (fewer than now); False if this backend cannot let workers go."""
        return False

    def batch_room(self) -> int | None:
        """Bytes that batches run ahead of the consumer must fit in, where they pass through a bounded medium; None: no bound."""
        return None

    @property
    def workers_elsewhere(self) -> bool:
        """Whether every task runs outside this interpreter (process workers), so no worker needs this process's GIL.

        The consumer then waits for results with the GIL switch interval short
        (`feedline._switch_interval`): beside Python threads of the program
        that hold the GIL, a result that came back waits up to the interval
        (5 ms by default) for the consumer to run again, at every hand-off.
        Thread workers would pay that short interval in GIL switches. False
        for Ray too: its client threads in this process hand results over
        (not measured there).
        """
        return False

    def workers_forked(self) -> bool:
        """Whether every worker process exists yet: its fork was answered (True for executors without processes).

        From the fork server alone that takes milliseconds; a worker forked by
        a zygote exists only once the zygote has imported the pipeline's
        libraries (torch's take a while). The automatic choice keeps threads
        working until then, on few cores one (`feedline.engine._trial_start`).
        """
        return True

    # ------------------------------------------------ watching the workers side by side (the automatic choice)
    def idle_workers(self) -> int:
        """Workers that would start a task sent now at once, with nothing else to run; 0 where that is not known.

        The epoch's first batch is cut into pieces over these
        (`feedline.engine._tail`), so that it comes out as soon as one
        batch's work spread over them allows. Default 0: process workers
        may still be starting, and a piece that waits for one would be
        overtaken by the whole tasks behind it.
        """
        return 0

    def watch_progress(self, on: bool) -> None:
        """Count the samples of running tasks from now on (``on``), or no more; costs a call per sample.

        `side_by_side`'s ``begun``, `running_rates`, `abandon_running` and
        `pause_beyond` see samples only while progress is watched. Default:
        nothing to count.
        """

    def side_by_side(self) -> list[WorkerClock] | None:
        """Each worker's `WorkerClock`, read now from the consumer's thread; None where they cannot be read side by side.

        Two readings a few milliseconds apart tell how many cores the workers
        kept busy together in between, even within one long sample. Default:
        None (workers in other processes, or no per-thread CPU clocks).
        """
        return None

    def runnable_waits(self) -> list[float]:
        """Per worker, seconds it has been runnable but waiting for a CPU so far (kept off the cores by other programs).

        Beside `side_by_side`: workers that use little CPU either wait (on
        I/O, on a lock) or are starved of CPU; only the last shows here.
        Default: 0.0 for each (not known).
        """
        return [0.0] * self.workers

    def running_rates(self, at_least: float = 0.01) -> list[float]:
        """Samples per second of each task running now for ``at_least`` seconds, while progress is watched. Default: none known."""
        return []

    # ------------------------------------------------ steering the pool (the automatic choice)
    def pause_beyond(self, keep: int) -> None:
        """Workers ``keep`` and up wait before their next sample until `resume` (while progress is watched).

        The first ``keep`` hold the earliest tasks and go on. Default: no
        worker pauses.
        """

    def narrow(self, keep: int) -> None:
        """Workers ``keep`` and up begin no new task until `resume`; their queued and new tasks go to the first ``keep``.

        Unlike `pause_beyond`, no task stops half-way. Tasks pinned to a
        stream shard never move (nothing narrows then). Default: nothing
        narrows.
        """

    def resume(self, give_back: bool = False) -> list:
        """Undo `pause_beyond` and `narrow`; with ``give_back``, the paused tasks are given back instead of going on.

        Returns the keys of the tasks whose workers were paused (with
        ``give_back`` they come back through `take_returned`). Default:
        none paused, ``[]``.
        """
        return []

    # ------------------------------------------------ handing tasks over to another executor (the automatic choice)
    def take_queued(self) -> list:
        """Remove and return the ``(key, task)`` pairs no worker has begun, in key order; none of them runs here.

        They leave `outstanding` at once and give no `Event`. Not for tasks
        pinned to a stream shard (``affinity``: the automatic choice runs none).
        Default: ``[]`` (none can be taken back).
        """
        return []

    def abandon_running(self, done_under: float = 1.0) -> list:
        """Give back running tasks at their next sample; returns their keys (`take_returned` has them once back).

        A task that can be split (`feedline.worker.splittable`) keeps the
        rows it has done, however far it got; of the others only those with
        under ``done_under`` of their samples begun. A task with no next
        sample finishes as usual: its key then arrives as an ordinary
        `Event`. A task given back leaves `outstanding` when `wait` sees it
        come back, and gives no `Event`. Default: ``[]`` (running tasks
        finish here).
        """
        return []

    def take_returned(self) -> list:
        """The ``(key, Returned)`` pairs given back (`abandon_running`, `resume`) since the last call. Default: ``[]``."""
        return []

    def close(self) -> None:
        """Stop the workers and release every resource; idempotent."""
