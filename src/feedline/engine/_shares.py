"""Ranks' shares of an epoch as positions of one order: what elastic resume counts in.

The index space. An epoch of ``pipe.shard(r, W, even)`` is the order before
the shard (G: the same on every rank), evened for W ranks (``even="drop"``
cuts it to a multiple of W, ``"pad"`` repeats its first samples) and dealt
out: rank r takes positions r, r + W, ... of it. A *global position* (the
``"elastic"`` field of a state) names which positions of that evened order
are delivered: every one below ``done``, and those in ``extra``; ``ranks``
and ``even`` name the layout the epoch started on, which fixes the space.

The rest of the epoch on W' ranks: the positions not delivered, in order,
evened for W' ranks by the new ``shard(even=...)`` and dealt out as
``shard()`` deals an epoch. A fresh epoch is the case of nothing delivered,
so one rule gives every rank's order; `Shard.reorder` does the evening and
dealing in both.

One draw per start. Resuming checks a state against the epoch's order, then
runs the epoch on it; the checks pass ``keep=True`` and leave the orders they
drew for the iterator that follows (at most `KEPT` for the whole process,
dropped by the next epoch that starts, which takes the one it needs), so a
resume draws the permutations once, as a fresh epoch does. An order is kept
for its source object (a weak reference), its length, the index steps and
the epoch: what it is a function of.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref

import numpy as np

__all__ = ["Layout", "base_length", "base_order", "epoch_order", "layout_of", "position", "share_length", "space"]

DRAWS = 0  # epoch orders drawn in this process (`feedline.testing.order_draws`)
KEPT = 4  # orders kept at most: the order before the shard, and this rank's and the saving rank's orders from it
_kept: list = []  # (key, weak reference to the source, its length, order): what a resume's checks drew, for its iterator
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where a plan's ``shard()`` sits: its step (None: unsharded, one rank) and the index steps before it."""

    shard: object | None
    before: list  # index steps before the shard (all of them when unsharded)
    after: list  # index steps after it (elastic resume refuses them: they would count the new share)

    @property
    def index(self) -> int:
        return 0 if self.shard is None else self.shard.index

    @property
    def count(self) -> int:
        return 1 if self.shard is None else self.shard.count

    @property
    def even(self) -> str | None:
        return None if self.shard is None else self.shard.even


def layout_of(plan) -> Layout:
    """The plan's last ``shard()`` (by its verb: the engine sees steps only through the plan) and its neighbours."""
    steps = list(plan.index_steps)
    at = max((k for k, s in enumerate(steps) if type(s).__name__ == "Shard"), default=None)
    if at is None:
        return Layout(None, steps, [])
    return Layout(steps[at], steps[:at], steps[at + 1:])


def base_order(plan, epoch: int, keep: bool = False) -> np.ndarray:
    """G: the epoch's order before the shard, the same on every rank.

    ``keep``: leave it for the calls that follow (a resume's checks, then
    its iterator); without, take one kept for the same source, steps and
    epoch, and keep none (see the module docstring).
    """
    before = layout_of(plan).before
    return _drawn(("base", tuple(before), epoch), plan.part.source, keep,
                  lambda: dataclasses.replace(plan, index_steps=before).epoch_indices(epoch), draws=True)


def _found(entries: list, key: tuple, source) -> np.ndarray | None:
    """The order kept under ``key`` for this very source at its present length, or None."""
    return next((order for k, ref, length, order in entries if k == key and ref() is source and length == len(source)),
                None)


def _drawn(key: tuple, source, keep: bool, make, draws: bool = False) -> np.ndarray:
    """``make()``, or what a check kept under ``key`` for ``source``; kept if ``keep``, else every kept order dropped."""
    global DRAWS, _kept
    with _lock:
        kept = _kept
        if not keep:
            _kept = []
    order = _found(kept, key, source)
    if order is not None:
        return order
    order = make()
    with _lock:
        DRAWS += draws
        if keep:
            try:
                _kept = [*_kept[-(KEPT - 1):], (key, weakref.ref(source), len(source), order)]
            except TypeError:  # a source that takes no weak reference: nothing kept (drawn again, still exact)
                pass
    return order


def base_length(plan, epoch: int) -> int:
    """``len(base_order(plan, epoch))`` without drawing the permutations (a shuffle keeps the length).

    The length of the order a check kept, if there is one (see `base_order`).
    """
    before = layout_of(plan).before
    with _lock:
        drawn = _found(_kept, ("base", tuple(before), epoch), plan.part.source)
    if drawn is not None:
        return len(drawn)
    kept = [s for s in before if type(s).__name__ != "Shuffle"]
    return len(dataclasses.replace(plan, index_steps=kept).epoch_order(len(plan.part.source), epoch))


def space(length: int, ranks: int, even: str | None) -> int:
    """Positions of an order of ``length`` samples evened for ``ranks`` ranks (what `Shard.reorder` deals)."""
    if even == "drop":
        return length // ranks * ranks
    if even == "pad":
        return -(-length // ranks) * ranks
    return length


def _remaining(length: int, elastic: dict | None, ranks: int, even: str | None) -> np.ndarray:
    """Positions not yet delivered, in order (all of them for a fresh epoch on ``ranks`` ranks)."""
    if elastic is None:
        return np.arange(space(length, ranks, even), dtype=np.int64)
    left = np.arange(elastic["done"], space(length, elastic["ranks"], elastic["even"]), dtype=np.int64)
    return np.setdiff1d(left, np.asarray(elastic["extra"], dtype=np.int64), assume_unique=True)


def epoch_order(plan, epoch: int, elastic: dict | None, keep: bool = False) -> np.ndarray:
    """The epoch's sample indices on this rank: ``plan.epoch_indices``, or the rest of an epoch resumed from other ranks.

    ``keep``: as for `base_order` (a check that an iterator follows).

    Raises:
        ValueError: ``elastic`` names positions outside this pipeline's
            epoch (its text says which), or the plan has index steps after
            its shard.
    """
    layout = layout_of(plan)
    if elastic is None:  # plan.epoch_indices(epoch), through the orders kept
        def make():
            order = base_order(plan, epoch, keep)
            for step in [layout.shard, *layout.after] if layout.shard is not None else []:
                order = step.reorder(order, epoch)
            return order

        return _drawn(("order", tuple(plan.index_steps), epoch), plan.part.source, keep, make)
    if layout.after:
        raise ValueError(f"this pipeline has {layout.after[0].describe()} after shard(); the rest of an epoch of other "
                         "ranks is shared out by the last index step")
    key = ("rest", tuple(plan.index_steps), epoch, elastic["ranks"], elastic["even"], elastic["done"], tuple(elastic["extra"]))
    return _drawn(key, plan.part.source, keep, lambda: _rest(plan, layout, epoch, elastic, keep))


def _rest(plan, layout: Layout, epoch: int, elastic: dict, keep: bool) -> np.ndarray:
    """This rank's share of the positions ``elastic`` leaves, as sample indices (`epoch_order`)."""
    order = base_order(plan, epoch, keep)
    size = space(len(order), elastic["ranks"], elastic["even"])
    if elastic["done"] > size or any(p >= size for p in elastic["extra"][-1:]):
        raise ValueError(f"names position {max([elastic['done'] - 1, *elastic['extra']])} of an epoch evened for "
                         f"{elastic['ranks']} ranks, which has {size} positions in this pipeline (another dataset length?)")
    if not len(order):
        return order
    left = _remaining(len(order), elastic, layout.count, layout.even)
    mine = left if layout.shard is None else layout.shard.reorder(left, epoch)
    return order[mine % len(order)]  # a padded position repeats the order's start, as Shard.reorder pads


def position(length: int, elastic: dict | None, ranks: int, even: str | None, taken: list[int], shard_type, epoch: int) -> dict:
    """The global position after rank q of ``ranks`` delivered the first ``taken[q]`` positions of its share.

    ``elastic``: the position the ranks' epoch started from (None: a fresh
    epoch on these ranks); ``shard_type``: the Shard step class (its
    ``reorder`` deals the shares).
    """
    first = elastic or {"ranks": ranks, "even": even, "done": 0, "extra": []}
    size = space(length, first["ranks"], first["even"])
    delivered = np.zeros(size, dtype=bool)
    delivered[: first["done"]] = True
    delivered[np.asarray(first["extra"], dtype=np.int64)] = True
    left = _remaining(length, elastic, ranks, even)
    for q, count in enumerate(taken):
        delivered[shard_type(q, ranks, even).reorder(left, epoch)[:count]] = True
    done = int(np.argmin(delivered)) if not delivered.all() else size
    extra = (np.flatnonzero(delivered[done:]) + done).tolist()
    return {"ranks": first["ranks"], "even": first["even"], "done": done, "extra": extra}


def share_length(length: int, elastic: dict | None, rank: int, ranks: int, even: str | None) -> int:
    """Positions in rank ``rank``'s share of the rest of the epoch (of all of it, for a fresh epoch).

    Counted, not dealt: the positions left, evened for ``ranks`` ranks
    (`space`), of which the rank takes every ``ranks``-th from ``rank``.
    """
    left = length if elastic is None else space(length, elastic["ranks"], elastic["even"]) - elastic["done"] - len(elastic["extra"])
    return len(range(rank, space(left, ranks, even), ranks))
