"""The consumer's carry of rows between tasks, for the plans whose tasks are not whole batches.

Where tasks may come back short (``filter``, ``on_error="skip"``), hold
rows of several batches' worth (``pack``, ``batch_by_budget``,
``bucket_by_length``), or read a stream through a shuffle window, the
consumer keeps the rows between tasks and cuts batches from them. Every
carry has the interface of `feedline.engine._recut.Recut`; each resumes
from its field of a checked state (``"pack"``, ``"buckets"``,
``"window"``, ``"deal"``).
"""

from __future__ import annotations

from ._buckets import Buckets
from ._budget import BudgetCut
from ._packer import Packer
from ._recut import Recut
from ._window import WindowShuffle

__all__ = ["recut_for", "window_for"]


def recut_for(plan, state, epoch: int):
    """The re-cut of a plan whose tasks may not be whole batches (packed or budgeted batches dealt to ranks, if sharded)."""
    if plan.deal is None:
        return _own_recut_for(plan, state)
    return plan.deal.recut(lambda: _own_recut_for(plan, state), state, epoch)


def _own_recut_for(plan, state):
    """One carry of rows, buckets, packed rows or a budget."""
    padder = plan.padder
    if plan.pack is not None:
        pack = plan.pack
        return Packer(pack.max_length, pack.fit, pack.buffer, pack.pad_value, plan.rows_per_batch, plan.drop_remainder,
                      (state or {}).get("pack"), plan.part.source.where)
    if plan.budget is not None:
        return BudgetCut(plan.budget, padder.join, padder.cut, plan.part.source.where)
    if padder is None:
        return Recut(plan.part.batch_size, plan.drop_remainder, plan.part.source.where)
    if padder.buckets is None:
        return Recut(plan.part.batch_size, plan.drop_remainder, plan.part.source.where, join=padder.join, cut=padder.cut)
    return Buckets(padder.buckets, plan.drop_remainder, padder.join, padder.cut, (state or {}).get("buckets"))


def window_for(plan, epoch: int, state):
    """The shuffle window of a stream with ``shuffle(window=N)``, resumed from ``state["window"]`` if given."""
    if plan.window is None:
        return None
    return WindowShuffle(plan.window.window, plan.window.seed, epoch, plan.part.batch_size, plan.drop_remainder,
                         (state or {}).get("window"), plan.part.source.where)
