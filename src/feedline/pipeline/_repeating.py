"""``repeat()`` and ``take()`` after an endless ``repeat()``: which steps move past the repeat, and epoch lengths.

Index steps stay with the repeated pipeline (each pass has its own order);
per-sample steps run after the repeat, with each pass's own rng.
"""

from __future__ import annotations

from ..sources._composed import ComposedSource
from ._seeds import first_seed, has_seed
from ._steps import Batch, Filter, Map, MapBatch, Pack, Prefetch

__all__ = ["endless_take", "limited", "repeated", "split_at_repeat"]


def split_at_repeat(steps) -> tuple[list, list]:
    """``(kept, moved)``: the steps the repeated pipeline keeps, and the per-sample ones that run after the repeat.

    Raises:
        ValueError: a batching step, which must come after ``repeat()``.
    """
    kept, moved = [], []
    for step in steps:
        if isinstance(step, (Batch, MapBatch, Pack)):
            raise ValueError(f"repeat() after {step.describe()}: repeat the samples, then batch; put repeat() before "
                             f"{step.describe().split('(')[0]}()")
        (moved if isinstance(step, (Map, Filter, Prefetch)) else kept).append(step)
    return kept, moved


def repeated(inner, count: int | None) -> ComposedSource:
    """The source of ``inner.repeat(count)``: ``count`` passes over ``inner`` (None: without end)."""
    count = None if count is None else int(count)
    seed, seeded = first_seed(inner.source, inner.steps), has_seed(inner.source, inner.steps)
    return ComposedSource("repeat", [inner], seed=seed, seeded=seeded, count=count)


def limited(source: ComposedSource, samples: int) -> ComposedSource:
    """An endless repeat's source cut into epochs of ``samples`` samples, from as many passes as that takes."""
    return ComposedSource("repeat", source.children, seed=source.seed, seeded=source.seeded, count=None, limit=samples)


def endless_take(steps, n: int) -> int | None:
    """Samples per epoch for ``take(n)`` after an endless ``repeat()`` and ``steps`` (None: the take cannot become that).

    ``n`` counts batches after a ``batch()``, so it becomes ``n * size`` samples
    when every batch is full (no bucket, budget, filter or skipped sample).
    """
    batch = next((s for s in steps if isinstance(s, Batch)), None)
    if batch is None:
        return n if all(isinstance(s, (Map, Filter, Prefetch)) for s in steps) else None
    whole = (batch.padder is None or batch.padder.buckets is None) and batch.budget is None and not any(
        isinstance(s, Filter) or (isinstance(s, Map) and s.skips) for s in steps)
    return n * batch.size if whole and all(isinstance(s, (Map, Prefetch, Batch, MapBatch)) for s in steps) else None
