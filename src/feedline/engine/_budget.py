"""BudgetCut: ``batch_by_budget(max_tokens)``'s batches, cut in the consumer from padded pieces in task order.

Each task's piece is padded in its worker as for ``padded_batch``, with
each row's length under ``"budget"`` (`feedline._padding.BudgetCollate`). Rows are taken in task order; a batch
holds as many as keep ``rows x longest <= max_tokens`` (the padded size, as
Fairseq's and ESPnet's ``max_tokens`` count it), so the batches are a
function of the epoch's order only. A batch is handed out when the next row
would not fit, or at once when no row could (``(rows + 1) x longest >
max_tokens``). It has the interface of `feedline.engine._recut.Recut`.

Resume points are those of the re-cut: a batch ends inside a task (that
task, and how many of its rows were used) or at its end (the next task);
no row waits past the point, so nothing else is kept.

With ``sizes=`` the same cut runs on the table of lengths before the map
(`plan_budget`), and `PlannedBudget` cuts each batch after its planned rows.
"""

from __future__ import annotations

import collections

import numpy as np

from .._errors import FeedlineError, SampleError
from .._tree import flatten, unflatten
from ._packer import Fill
from ._resume_point import ResumePoint

__all__ = ["BudgetCut", "PlannedBudget", "plan_budget"]


def plan_budget(lengths, max_tokens: int, too_long) -> list:
    """The batches `BudgetCut` cuts from samples of these lengths, in this order: ``[(start, stop)]`` positions.

    ``too_long(position)`` makes the error for a sample longer than ``max_tokens``.
    """
    batches, start, held, longest = [], 0, 0, 0
    for position, n in enumerate(np.asarray(lengths).tolist()):
        if n > max_tokens:
            raise too_long(position)
        if held and (held + 1) * max(longest, n) > max_tokens:
            batches.append((start, position))
            start, held, longest = position, 0, 0
        held, longest = held + 1, max(longest, n)
        if (held + 1) * longest > max_tokens:  # no row can join: out now
            batches.append((start, position + 1))
            start, held, longest = position + 1, 0, 0
    if held:
        batches.append((start, start + held))
    return batches


class BudgetCut:
    """Rows carried until their batch is full, and the batches cut from them."""

    packs = False  # stats: the share of slots filled is not a packing efficiency

    def __init__(self, max_tokens: int, join, cut, where=None):
        self.max_tokens, self.join, self.slice, self.where = max_tokens, join, cut, where
        self.carry: list = []  # [piece, start, stop] runs of rows, in order
        self.held, self.longest, self.tokens = 0, 0, 0
        self.ready: list = []
        self.fills: list = []  # (items, slots) of each ready batch, and of those the last cut() returned (as in Packer)
        self.last_fills: list = []
        self.after = None  # the point after the last task added
        self.fill = Fill()
        self.error = None

    @property
    def rows(self) -> int:
        return self.held

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        """Take the rows of task ``number`` (``rows`` of its ``task_rows``: a resumed first task drops those delivered)."""
        if self.error is not None:
            return
        done = task_rows - rows  # rows of this task delivered before a resume
        start = 0
        for r, n in enumerate(piece["budget"][:rows].tolist()):
            if n > self.max_tokens:
                index = indices[r] if indices is not None else None
                self.error = SampleError(
                    f"batch_by_budget(max_tokens={self.max_tokens}): sample {index} is {n} long, more than a whole batch "
                    "may hold; raise max_tokens, crop it in map(), or filter it out", index=index,
                    where=self.where(index) if (index is not None and self.where) else None, stage="batch")
                return
            longest = max(self.longest, n)
            if self.held and (self.held + 1) * longest > self.max_tokens:
                self._take(piece, start, r, rows)
                start = r
                self._emit(_point(number, done + r, task_rows, before, after))
                longest = n
            self.held, self.longest, self.tokens = self.held + 1, longest, self.tokens + n
            if (self.held + 1) * self.longest > self.max_tokens:  # no row can join: out now
                self._take(piece, start, r + 1, rows)
                start = r + 1
                self._emit(_point(number, done + r + 1, task_rows, before, after))
        if start < rows:
            self._take(piece, start, rows, rows, keep=True)
        self.after = _point(number, task_rows, task_rows, before, after)

    def _take(self, piece, start: int, stop: int, rows: int, keep: bool = False) -> None:
        if start == stop:
            return
        run = piece if (start, stop) == (0, rows) else self.slice(piece, start, stop, rows=rows)
        if keep:  # rows that wait past their task get their own memory: a view would pin the worker's whole slot
            skeleton, arrays = flatten(run)
            run = unflatten(skeleton, [a.copy() for a in arrays])
        self.carry.append((run, stop - start))

    def _emit(self, point: ResumePoint) -> None:
        runs, rows = self.carry, self.held
        if len(runs) == 1:
            batch = runs[0][0]
        else:  # a joined batch is always cut: slice_rows collates columns the pieces held differently
            batch = self.slice(self.join([p for p, _ in runs], rows=[n for _, n in runs]), 0, rows, rows=rows)
        self.fills.append((self.tokens, rows * self.longest))
        self.fill.items += self.tokens
        self.fill.slots += rows * self.longest
        self.ready.append((batch, point, rows))
        self.carry, self.held, self.longest, self.tokens = [], 0, 0, 0

    def cut(self, final: bool) -> list:
        """Batches ready since the last call; with ``final``, the rows held too."""
        if self.error is not None:
            error, self.error, self.ready, self.fills = self.error, None, [], []
            raise error
        if final and self.held:
            self._emit(self.after)
        out, self.ready = self.ready, []
        self.last_fills, self.fills = self.fills, []
        return out


def _point(number: int, used: int, task_rows: int, before, after) -> ResumePoint:
    """The point after ``used`` rows of task ``number`` (the next task once all are used)."""
    return ResumePoint.after_rows(number, used, task_rows, before=before, after=after)


class PlannedBudget(BudgetCut):
    """Budgeted batches planned in advance from a length table (`plan_budget`): each cut after its planned rows.

    ``sizes`` are the rows of this rank's batches, from the resume point
    on; ``total(k)`` the table's length of the ``k``-th row of this rank's
    order (checked against what the batch counts), ``index(k)`` its source
    index. Points are those of `BudgetCut`.
    """

    def __init__(self, max_tokens: int, join, cut, sizes: list, total, index, seen: int = 0, where=None):
        super().__init__(max_tokens, join, cut, where)
        self.sizes, self.total, self.index, self.seen = collections.deque(sizes), total, index, seen
        self.failed = False

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        if self.error is not None or self.failed:  # after an error the plan is off: nothing more is cut
            return
        done, start = task_rows - rows, 0
        for r, n in enumerate(piece["budget"][:rows].tolist()):
            if n != self.total(self.seen):
                index = self.index(self.seen)
                self.error = SampleError(
                    f"batch_by_budget(sizes=...): sample {index} is {n} long after the map, but sizes gives "
                    f"{self.total(self.seen)}; the batches are planned from sizes, so it must give what the batch counts "
                    "(length_fn, or the first padded field's length)", index=index,
                    where=self.where(index) if self.where else None, stage="batch")
                return
            self.seen += 1
            self.held, self.longest, self.tokens = self.held + 1, max(self.longest, n), self.tokens + n
            if self.held == self.sizes[0]:
                self.sizes.popleft()
                self._take(piece, start, r + 1, rows)
                start = r + 1
                self._emit(_point(number, done + r + 1, task_rows, before, after))
        if start < rows:
            self._take(piece, start, rows, rows, keep=True)

    def cut(self, final: bool) -> list:
        if final and self.held and self.error is None:
            raise FeedlineError(f"batch_by_budget(sizes=...): the epoch ended {self.held} rows into a planned batch of "
                                f"{self.sizes[0]}; the state does not fit this pipeline's data")
        self.failed = self.failed or self.error is not None
        return super().cut(False)
