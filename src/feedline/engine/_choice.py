"""Which backend and how many workers, for the settings the user left unset.

Explicit settings win. Otherwise: no per-sample Python work reads in the
calling thread; a generator source goes to processes; everything else is
decided by the GIL probe (`feedline.engine._autotune.probe_gil`): threads
for work that releases the GIL, processes for work that holds it.
"""

from __future__ import annotations

import os
from typing import NamedTuple

from .._errors import FeedlineError
from ._autotune import THREAD_SCALING, probe_gil

__all__ = ["Choice", "choose", "default_workers"]


class Choice(NamedTuple):
    backend: str
    workers: int | None  # None: the backend decides (Ray: one actor per CPU of the cluster)
    reason: str


def default_workers() -> int:
    """Cores this process may use: one worker per core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def choose(plan) -> Choice:
    """Backend, worker count, and the reason, for ``plan`` (a `feedline.pipeline._plan.Plan`)."""
    cores = default_workers()
    backend, workers = plan.backend, plan.workers
    if plan.part.source.needs_ray:  # from_ray_dataset: blocks are Ray objects
        if backend is None:
            return Choice("ray", workers, "the source is a Ray Dataset: its blocks are read by Ray actors")
        if backend == "process":
            raise FeedlineError("a Ray Dataset source cannot be read by process workers (they are not connected to Ray); use backend='ray', 'thread' or 'serial'")
    if backend is not None:
        if backend == "ray":
            return Choice("ray", workers, "backend set by map()")
        count = 1 if backend == "serial" else (workers or cores)
        return Choice(backend, count, "backend set by map()")
    if workers == 0:
        return Choice("serial", 1, "workers=0")
    if not plan.runs_user_code:
        return Choice("serial", 1, "no per-sample Python work: bulk reads in the calling thread are fastest")
    count = workers or cores
    if count < 2:
        return Choice("serial", 1, "one core available")
    why = f"{count} workers ({'set by map()' if workers else 'one per available core'})"
    if plan.streaming:
        return Choice("process", count, f"generator source, not probed: processes; {why}")
    scaling, per_sample, note = probe_gil(plan.part, len(plan.part.source))
    if scaling is not None and (scaling < 0.9 or 1.1 < scaling < THREAD_SCALING):
        # Noise only ever lowers the ratio (a burst of other load during the
        # two-thread run; GIL-bound work cannot look parallel in CPU seconds),
        # so a doubtful "holds the GIL" verdict is measured twice and the better
        # kept. About 1.0x is the GIL's own signature and is taken as it is.
        again, _, _ = probe_gil(plan.part, len(plan.part.source))
        if again is not None and again > scaling:
            scaling, note = again, f"{note}, best of 2 probes"
    if scaling is None:
        return Choice("process", count, f"GIL probe inconclusive ({note}): processes, which scale either way; {why}")
    measured = f"GIL probe: 2 threads ran {scaling:.2f}x one thread at {per_sample * 1e3:.2f} ms/sample"
    if scaling >= THREAD_SCALING:
        return Choice("thread", count, f"{measured}, so the work releases the GIL: threads; {why}")
    return Choice("process", count, f"{measured}, so the work holds the GIL: processes; {why}")
