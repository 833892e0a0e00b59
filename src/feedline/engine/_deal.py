"""Deal: whole packed or budgeted batches dealt to data-parallel ranks, the same number to each.

Two ways. With ``sizes=`` (each sample's length known before the map),
`LengthPlan` plans the epoch's batches from the table alone, before any
sample is read: every rank plans the same batches, keeps slots ``index,
index + count, ...`` of them, and its order holds only those batches'
samples, so a rank maps about ``1 / count`` of the epoch. The slots are the
batches evened for ``count`` ranks: ``even="drop"`` leaves out the last,
incomplete round, ``"pad"`` fills it with the epoch's first batches again.
`PlannedDeal` then fills each planned batch as its samples arrive
(`engine._packer.PlannedPacker`, `engine._budget.PlannedBudget`).

Without ``sizes=`` the lengths are known only after the map, so
``shard(index, count, even="drop")`` before ``pack()`` or
``batch_by_budget()`` does not split the samples (`Deal`): how many batches a share
of samples makes depends on their lengths (and on what ``filter`` and
``on_error="skip"`` leave), which no rank knows of the others. Instead every
rank cuts the batches of the whole epoch (`engine._packer.Packer`,
`engine._budget.BudgetCut`, identical on every rank since they are a
function of the epoch's order) and keeps batch ``g`` when ``g % count ==
index``. A kept batch waits until its round of ``count`` batches is
complete; the last, incomplete round is dropped (fewer than ``count``
batches an epoch, counted in ``stats().dropped_batches``), so every rank
runs the same number of steps.

Resume points are the inner cut's, with the number of batches cut before
the point (``"deal"``), so a resumed rank deals on from the same batch.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from .._errors import FeedlineError, SampleError
from ._budget import PlannedBudget, plan_budget
from ._packer import Fill, PlannedPacker, plan_rows

__all__ = ["Deal", "Dealt", "LengthPlan", "PlannedDeal"]


class Dealt:
    """``plan.deal`` without a length table: shard ``index`` of ``count`` deals batches as they are cut (`Deal`)."""

    planned = False  # the batches are cut as the mapped samples come

    def __init__(self, index: int, count: int):
        self.index, self.count = index, count

    def recut(self, own, state: dict | None, epoch: int):
        """The epoch's re-cut: ``own()`` (the plan's packer or budget cut) dealt to this rank."""
        return Deal(own(), self.index, self.count, (state or {}).get("deal"))


class Deal:
    """This rank's batches of an inner re-cut (the interface of `engine._recut.Recut`)."""

    def __init__(self, inner, index: int, count: int, resume: dict | None = None):
        self.inner, self.index, self.count = inner, index, count
        self.made = resume["made"] if resume else 0  # batches of the whole epoch cut so far
        self.held = None  # this rank's batch, (batch, point, rows, items, slots), until its round is complete
        self.fill = Fill()  # of this rank's batches only
        self.dropped_batches = 0  # this rank's batch of the epoch's incomplete last round
        self.dropped_rows = 0
        self.padded_batches = 0  # only planned batches are padded (`PlannedDeal`)
        self.packs = inner.packs

    @property
    def slice(self):
        return self.inner.slice

    @property
    def rows(self) -> int:
        return self.inner.rows + (self.held[2] if self.held else 0)

    def add(self, *args, **kwargs) -> None:
        self.inner.add(*args, **kwargs)

    def cut(self, final: bool) -> list:
        """This rank's batches whose rounds completed since the last call; with ``final``, the incomplete one dropped."""
        out = []
        for (batch, point, rows), (items, slots) in zip(self.inner.cut(final), self.inner.last_fills):
            mine = self.made % self.count == self.index
            self.made += 1
            if mine:
                self.held = (batch, dataclasses.replace(point, deal={"made": self.made}), rows, items, slots)
            if self.held is not None and self.made % self.count == 0:  # the round is complete: every rank has its batch
                batch, point, rows, items, slots = self.held
                self.held = None
                self.fill.items += items
                self.fill.slots += slots
                out.append((batch, point, rows))
        if final and self.held is not None:
            self.dropped_batches += 1
            self.dropped_rows += self.held[2]
            self.held = None
        return out


class _Rank:
    """One epoch planned for one rank: its order, its batches and what they hold."""

    def __init__(self, plan: "LengthPlan", order: np.ndarray):
        lengths = plan.sizes[order] if len(order) else np.zeros(0, dtype=np.int64)
        batches = plan.planner(lengths, lambda position: plan.too_long(int(order[position]), int(lengths[position])))
        total, count = len(batches), plan.count
        slots = {"drop": total // count * count, "pad": -(-total // count) * count}.get(plan.even, total)
        self.total = total  # batches of the whole epoch
        self.slots = list(range(plan.index, slots, count))  # this rank's slot numbers; slot s holds batch s % total
        self.layouts = [batches[s % total] for s in self.slots]
        self.positions = [plan.positions(b) for b in self.layouts]  # each batch's samples, epoch positions, ascending
        self.lengths, self.order = lengths, order
        mine = np.concatenate(self.positions) if self.positions else np.zeros(0, dtype=np.int64)
        self.rank_order = order[mine]
        self.rank_lengths = lengths[mine]
        lost = total // count * count + plan.index  # this rank's slot of the incomplete last round, if it has one
        self.dropped = (1, plan.items(batches[lost])) if plan.even == "drop" and lost < total else (0, 0)


class LengthPlan:
    """``pack()`` / ``batch_by_budget()`` with ``sizes=``: the index step that plans the epoch, and its re-cut.

    Its ``reorder`` (the last index step) turns the epoch's order into this
    rank's: the samples of this rank's planned batches, batch after batch
    (a sample twice when two of them hold a piece of it, or when ``"pad"``
    repeats a batch). The plan of the last epochs ordered is kept for the
    re-cut (`PlannedDeal`), which the iterator makes just before it orders.

    Args:
        sizes: the length table, by source index.
        index, count, even: this rank of ``count`` and how the batches are evened (one rank: 0, 1, None).
        pack: the Pack step, or None for budgeted batches.
        budget: ``(max_tokens, join, cut)`` of budgeted batches, or None.
        rows_per_batch: pack().batch(n)'s n (None: rows one at a time).
        drop_remainder: pack().batch(n, drop_remainder=True): the epoch's last, short batch of rows is left out.
        where: names a sample's place in errors.
    """

    planned = True  # the batches are known before the map

    def __init__(self, sizes: np.ndarray, index: int, count: int, even, pack=None, budget=None, rows_per_batch=None,
                 drop_remainder: bool = False, where=None):
        self.sizes, self.index, self.count, self.even = sizes, index, count, even
        self.pack, self.budget, self.rows_per_batch, self.where = pack, budget, rows_per_batch, where
        self.drop_remainder = drop_remainder
        self.packs = pack is not None
        self._epochs: collections.OrderedDict = collections.OrderedDict()

    def describe(self) -> str:
        return f"shard(index={self.index}, count={self.count}, even={self.even!r}) of planned batches"

    def planner(self, lengths: np.ndarray, too_long) -> list:
        if self.pack is not None:
            p = self.pack
            return plan_rows(lengths, p.max_length, p.fit, p.buffer, self.rows_per_batch, self.drop_remainder,
                             p.too_long == "split", too_long)
        return plan_budget(lengths, self.budget[0], too_long)

    def positions(self, batch) -> np.ndarray:
        """A planned batch's samples, as ascending epoch positions."""
        if self.pack is None:
            return np.arange(batch[0], batch[1], dtype=np.int64)
        return np.unique(np.fromiter((item[0] for row in batch for item in row), dtype=np.int64))

    def items(self, batch) -> int:
        """A planned batch's samples, a split one counted once per piece (as `Deal` counts what it drops)."""
        return batch[1] - batch[0] if self.pack is None else sum(len(row) for row in batch)

    def too_long(self, index: int, n: int) -> SampleError:
        if self.pack is not None:
            what = (f"pack(max_length={self.pack.max_length}, sizes=...): sample {index} is {n} long, more than a row "
                    "holds; pass too_long='split' to cut it into pieces (each its own segment), or leave it out of the "
                    "source")
        else:
            what = (f"batch_by_budget(max_tokens={self.budget[0]}, sizes=...): sample {index} is {n} long, more than a "
                    "whole batch may hold; raise max_tokens, or leave it out of the source")
        return SampleError(what, index=index, where=self.where(index) if self.where else None,
                           stage="pack" if self.pack is not None else "batch")

    def reorder(self, order: np.ndarray, epoch: int) -> np.ndarray:
        """This rank's order: the samples of its planned batches (see the class docstring)."""
        rank = _Rank(self, np.asarray(order, dtype=np.int64))
        self._epochs[epoch] = rank
        while len(self._epochs) > 2:
            self._epochs.popitem(last=False)
        return rank.rank_order

    def rank(self, epoch: int) -> _Rank:
        if epoch not in self._epochs:
            raise FeedlineError(f"epoch {epoch} was not planned before its batches were cut (an engine bug)")
        return self._epochs[epoch]

    def recut(self, own, state: dict | None, epoch: int) -> "PlannedDeal":
        return PlannedDeal(self, epoch, state)

    def inner(self, rank: _Rank, first: int, state: dict | None):
        """The filler of this rank's planned batches from its ``first`` on (`PlannedPacker` / `PlannedBudget`)."""
        if self.pack is not None:
            batches = list(zip(rank.positions[first:], rank.layouts[first:]))
            return PlannedPacker(self.pack.max_length, self.pack.pad_value, self.rows_per_batch, batches,
                                 lambda p: int(rank.lengths[p]), lambda p: int(rank.order[p]),
                                 (state or {}).get("pack"), self.where)
        sizes = [len(p) for p in rank.positions]
        return PlannedBudget(self.budget[0], self.budget[1], self.budget[2], sizes[first:],
                             lambda k: int(rank.rank_lengths[k]), lambda k: int(rank.rank_order[k]), sum(sizes[:first]),
                             self.where)


class PlannedDeal(Deal):
    """This rank's planned batches (`LengthPlan`), each with its point and ``"deal"``: the slots dealt so far."""

    def __init__(self, plan: LengthPlan, epoch: int, state: dict | None):
        self.plan, self.epoch, self.state = plan, epoch, state
        self.index, self.count = plan.index, plan.count
        self.made = state["deal"]["made"] if state else 0  # slots of the whole epoch dealt before the point
        self.padded_batches = 0
        self._rank = self._inner = None

    def _ready(self):
        if self._inner is None:
            self._rank = rank = self.plan.rank(self.epoch)
            first = sum(1 for s in rank.slots if s < self.made)
            self._slots = collections.deque(rank.slots[first:])
            self._inner = self.plan.inner(rank, first, self.state)
        return self._inner

    @property
    def inner(self):
        return self._ready()

    @property
    def rows(self) -> int:
        return self._ready().rows

    @property
    def packs(self) -> bool:
        return self.plan.packs

    @property
    def fill(self) -> Fill:
        return self._ready().fill

    @property
    def dropped_batches(self) -> int:
        self._ready()
        return self._rank.dropped[0]

    @property
    def dropped_rows(self) -> int:
        self._ready()
        return self._rank.dropped[1]

    def cut(self, final: bool) -> list:
        out = []
        for batch, point, rows in self._ready().cut(final):
            slot = self._slots.popleft()
            self.made = slot + 1
            self.padded_batches += slot >= self._rank.total
            out.append((batch, dataclasses.replace(point, deal={"made": self.made}), rows))
        return out
