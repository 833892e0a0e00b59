"""Which backend and how many workers, for the settings the user left unset.

Explicit settings win. Otherwise: no per-sample Python work reads in bulk
in the calling thread (a thread pool only adds a hand-off to each read
there), unless a batch function runs in the workers or the source gathers
with copies that release the GIL (a store: ``parallel_gather``): then it is
``"serial-or-thread"``, the calling thread and a thread pool both tried
(`feedline.engine._bulk_trial`); a
generator source goes to processes (its open shards cannot move between
backends); everything else is ``"auto"``: threads and processes are both
tried on the pipeline itself and the one that delivers more samples per
second keeps the work (`feedline.engine._trial`).
"""

from __future__ import annotations

from typing import NamedTuple

from .._cores import cores_note, usable_cores
from .._errors import FeedlineError

__all__ = ["Choice", "choose", "default_workers"]


class Choice(NamedTuple):
    backend: str  # a backend's name, or "auto": tried on delivered throughput
    workers: int | None  # None: the backend decides (Ray: one actor per CPU of the cluster)
    reason: str


def default_workers() -> int:
    """Cores this process may use (its CPU quota, or the count the user set: `feedline._cores`): one worker per core."""
    return usable_cores()


def _per_core() -> str:
    note = cores_note()
    return f"one per available core: {note}" if note else "one per available core"


def _counted_by(workers: int | None) -> str:
    """Where the worker count came from: the user's ``map(workers=)``, or one per core."""
    return "set by map()" if workers else _per_core()


def choose(plan) -> Choice:
    """Backend, worker count, and the reason, for ``plan`` (a `feedline.pipeline._plan.Plan`)."""
    cores = default_workers()
    backend, workers = plan.backend, plan.workers
    if plan.part.source.needs_ray:  # from_ray_dataset: blocks are Ray objects
        choice = _ray_source_choice(backend, workers)
        if choice is not None:
            return choice
    if backend is not None:
        return _chosen_by_user(plan, backend, workers, cores)
    if workers == 0:
        return Choice("serial", 1, "workers=0")
    if not plan.runs_user_code:
        return _bulk_choice(plan, workers, workers or cores)
    return _user_code_choice(plan, workers, workers or cores)


def _ray_source_choice(backend: str | None, workers: int | None) -> Choice | None:
    """Ray for a Ray Dataset source left without a backend; None where the backend set can read it too.

    Raises:
        FeedlineError: process workers were asked for; they are not connected to Ray.
    """
    if backend is None:
        return Choice("ray", workers, "the source is a Ray Dataset: its blocks are read by Ray actors")
    if backend == "process":
        raise FeedlineError("a Ray Dataset source cannot be read by process workers (they are not connected to Ray); use backend='ray', 'thread' or 'serial'")
    return None


def _chosen_by_user(plan, backend: str, workers: int | None, cores: int) -> Choice:
    """The backend set by ``map()`` (or by ``map(timeout=)``, which needs processes), with its worker count."""
    if backend == "ray":
        return Choice("ray", workers, "backend set by map()")
    count = 1 if backend == "serial" else (workers or cores)
    if plan.backend_for_timeout:
        return Choice(backend, count, f"map(timeout={plan.part.timeout:g}): only a process can be stopped in the middle of a sample")
    return Choice(backend, count, "backend set by map()")


def _bulk_choice(plan, workers: int | None, count: int) -> Choice:
    """No per-sample Python work: bulk reads in the calling thread, or also tried on threads where they can help."""
    parallel_gather = plan.part.bulk_read and plan.part.source.parallel_gather
    if count < 2 or plan.streaming or not (plan.part.batch_ops or parallel_gather):
        return Choice("serial", 1, "no per-sample Python work: bulk reads in the calling thread are fastest")
    if not plan.part.batch_ops:
        return Choice("serial-or-thread", count, f"bulk reads from a store (copies that release the GIL): the calling "
                                                 f"thread or {count} threads ({_counted_by(workers)})")
    return Choice("serial-or-thread", count, f"no per-sample Python work, a batch function: the calling thread or {count} "
                                             f"threads ({_counted_by(workers)})")


def _user_code_choice(plan, workers: int | None, count: int) -> Choice:
    """Per-sample Python work: serial on one core, processes for a generator source, else threads and processes tried."""
    if count < 2:
        note = cores_note()
        return Choice("serial", 1, f"one core available ({note})" if note else "one core available")
    why = f"{count} workers ({_counted_by(workers)})"
    if plan.streaming:
        return Choice("process", count, f"generator source (its open shards cannot change backend): processes; {why}")
    return Choice("auto", count, why)
