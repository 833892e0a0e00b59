"""Buckets: rows routed by length into per-bucket batches (``bucket_by_length``), in the consumer.

Each task's piece carries every row's bucket (`feedline._padding.Padder`).
Rows are routed in task order, one run of consecutive same-bucket rows at
a time, and a bucket hands out a batch as soon as it holds its batch size,
so the output is a function of the epoch's order only (any backend, any
worker count). What is left in the buckets at the end comes last, bucket
by bucket. It has the interface of `feedline.engine._recut.Recut`.

Resume points: after a batch, rows of several earlier tasks may still wait
in the buckets. The point names the oldest task ``T0`` that still has rows
waiting (for a generator, the shards' positions before it) and, per
bucket, how many of its rows from ``T0`` on were already handed out; a
resumed run re-reads from ``T0`` and drops those rows again. Counting rows
(not tasks) keeps this exact for a generator, whose resumed run sends no
task for a shard it already knows is exhausted.
"""

from __future__ import annotations

import numpy as np

from .._tree import flatten, unflatten
from ._resume_point import ResumePoint

__all__ = ["Buckets"]


class Buckets:
    """Per-bucket carries of rows and the batches cut from them."""

    def __init__(self, sizes, drop_remainder: bool, join, cut, skip=None):
        self.sizes, self.drop_remainder = list(sizes), drop_remainder
        self.join, self.slice = join, cut
        self.carry = [[] for _ in self.sizes]  # per bucket: [piece, rows, task number]
        self.held = [0] * len(self.sizes)  # rows waiting per bucket
        self.routed = [0] * len(self.sizes)  # rows routed per bucket so far (dropped ones included)
        self.drop = list(skip) if skip else [0] * len(self.sizes)  # rows already handed out before a resume
        self.tasks: dict = {}  # task number -> (routed before it, streams before it)
        self.ready: list = []
        self.current = None  # the task being routed

    @property
    def rows(self) -> int:
        return sum(self.held)

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        """Route the rows of task ``number`` (``before``: a generator's shard positions before it); full buckets are cut at once.

        The piece's rows come sorted by bucket, ``piece["row"]`` giving each
        one's place in the task: rows are counted in task order, and a
        bucket's rows are sliced out only when it hands out a batch (or at
        the end of the task), so a task costs a few slices, not one per row.
        """
        self.tasks[number] = (list(self.routed), before)
        self.current = number
        buckets = np.asarray(piece["bucket"][:rows])
        starts = np.searchsorted(buckets, np.arange(len(self.sizes) + 1), side="left")
        in_task = np.empty(rows, dtype=np.int64)
        in_task[np.asarray(piece["row"][:rows])] = buckets  # each row's bucket, in task order
        placed = [int(v) for v in starts[:-1]]  # per bucket: the next row of its slice not yet in the carry
        pending = [0] * len(self.sizes)  # per bucket: rows counted but not yet sliced into the carry
        for b in in_task.tolist():
            self.routed[b] += 1
            if self.drop[b]:  # handed out before a resume: the first rows of the bucket from here on
                self.drop[b] -= 1
                placed[b] += 1
                continue
            self.held[b] += 1
            pending[b] += 1
            if self.held[b] == self.sizes[b]:
                self._place(piece, b, placed[b], pending[b], rows, number)
                placed[b], pending[b] = placed[b] + pending[b], 0
                self._emit(b)
        for b, count in enumerate(pending):
            if count:
                self._place(piece, b, placed[b], count, rows, number, keep=True)

    def _place(self, piece, b: int, start: int, count: int, rows: int, number: int, keep: bool = False) -> None:
        run = piece if (start, count) == (0, rows) else self.slice(piece, start, start + count, rows=rows)
        if keep:  # rows that wait past their task get their own memory: a view would pin the worker's whole slot
            skeleton, arrays = flatten(run)
            run = unflatten(skeleton, [a.copy() for a in arrays])
        self.carry[b].append([run, count, number])

    def _emit(self, b: int) -> None:
        """Hand out everything bucket ``b`` holds as one batch."""
        pieces, rows = self.carry[b], self.held[b]
        if len(pieces) == 1:
            batch = pieces[0][0]
        else:  # a joined batch is always cut: slice_rows collates columns the pieces held differently
            batch = self.slice(self.join([p[0] for p in pieces], rows=[p[1] for p in pieces]), 0, rows, rows=rows)
        self.carry[b], self.held[b] = [], 0
        self.ready.append((batch, self._point(), rows))

    def _point(self) -> ResumePoint:
        # The task being routed counts too: its rows not yet routed must be read again.
        oldest = min([c[0][2] for c in self.carry if c] + [self.current])
        routed_before, before = self.tasks[oldest]
        for task in [t for t in self.tasks if t < oldest]:
            del self.tasks[task]
        handed = [routed - since - held for routed, since, held in zip(self.routed, routed_before, self.held)]
        return ResumePoint(oldest, 0, before, buckets=handed)

    def cut(self, final: bool) -> list:
        """Batches ready since the last call; with ``final``, each bucket's remainder too (unless dropped)."""
        if final:
            for b, held in enumerate(self.held):
                if held and not self.drop_remainder:
                    self._emit(b)
                elif held:
                    self.carry[b], self.held[b] = [], 0
        out, self.ready = self.ready, []
        return out
