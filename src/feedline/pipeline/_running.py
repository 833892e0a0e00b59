"""Running a pipeline: the `feedline.engine.Runtime` it starts, and the iterators of its epochs.

The engine is imported here, on the first iteration, never when a pipeline
is described: process workers import the description layer (via sources)
and never run the engine.
"""

from __future__ import annotations

import weakref

from .._errors import FeedlineError

__all__ = ["endless", "epoch_iterator", "latest_stats", "start_runtime"]


def start_runtime(pipe, finalizer):
    """``(runtime, finalizer)``: a new `Runtime` for ``pipe``'s plan, closed when ``pipe`` is collected.

    ``finalizer`` (that of the pipeline's previous runtime, or None) is detached.
    """
    from ..engine import Runtime  # start-up cost: workers import this module (via sources) and never run the engine

    runtime = Runtime(pipe.plan)
    if finalizer is not None:
        finalizer.detach()
    return runtime, weakref.finalize(pipe, runtime.close)


def epoch_iterator(pipe, runtime, epoch: int, state: dict | None, created: float | None):
    """The `EpochIterator` of ``pipe``'s epoch ``epoch`` on ``runtime``, from ``state`` when resuming."""
    from ..engine import EpochIterator  # start-up cost, as in start_runtime
    from ._elastic import shard_field  # (imports the engine)

    return EpochIterator(
        runtime, epoch, fingerprint=pipe._fingerprint(), source_kind=type(pipe.source).__name__,
        state=state, created=created, owner=pipe, parts=pipe._parts(), shard=shard_field(pipe),
    )


def endless(iterator, next_pass):
    """``iterator`` continued pass after pass (an endless ``repeat()``): ``next_pass(k)`` gives pass ``k``."""
    from ..engine._endless import EndlessIterator  # start-up cost, as in start_runtime

    return EndlessIterator(iterator, next_pass)


def latest_stats(runtime):
    """The statistics of ``runtime``'s most recent epoch (`Pipeline.stats`); an error before the first."""
    stats = runtime.latest_stats() if runtime is not None else None
    if stats is None:
        raise FeedlineError("stats() is available once the pipeline has been iterated")
    return stats
