"""Re-cut short pieces into full batches (after ``filter`` or ``on_error="skip"``).

When a step may drop samples, a task's output can be shorter than a batch;
a generator shard's last task is short too. The consumer carries rows over,
in task order, and cuts full batches from them (across shards, for a
generator), so every batch is full but the epoch's last; each batch records
the resume point just after it (the task whose rows it ended in, and how
many of that task's rows were used; for a generator, also the shards'
positions before that task, or after it when the batch used all its rows).
"""

from __future__ import annotations

from .._tree import concat_pieces, slice_rows
from ._resume_point import ResumePoint

__all__ = ["Recut"]


class Recut:
    """Rows carried between tasks, and the batches cut from them."""

    def __init__(self, size: int, drop_remainder: bool, where=None, join=concat_pieces, cut=slice_rows):
        self.size, self.drop_remainder = size, drop_remainder
        self.where = where  # where(index): a sample's file, to name it when pieces do not fit together
        self.join, self.slice = join, cut  # how pieces are joined and rows cut (padded batches have their own)
        self.pieces: list = []
        self.piece_rows: list = []
        self.piece_indices: list = []  # each piece's sample indices (None: unknown)
        self.rows = 0
        self.last_task = None  # (task number, its row count, streams before, streams after) of the last piece added

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        """Carry ``rows`` rows of task ``number`` (which returned ``task_rows`` in all), samples ``indices``.

        ``before``/``after``: a generator's shard positions before and after
        the task, kept in the resume points of the batches cut from it.
        """
        self.pieces.append(piece)
        self.piece_rows.append(rows)
        self.piece_indices.append(indices)
        self.rows += rows
        self.last_task = (number, task_rows, before, after)

    def cut(self, final: bool) -> list:
        """Full batches as ``(batch, resume point, rows)``; with ``final``, the remainder too (unless dropped)."""
        out = []
        size = self.size
        while self.rows >= size or (final and self.rows and not self.drop_remainder):
            joined = self.pieces[0] if len(self.pieces) == 1 else self.join(
                self.pieces, rows=self.piece_rows, indices=self.piece_indices, where=self.where)
            known = None if any(i is None for i in self.piece_indices) else [i for ids in self.piece_indices for i in ids]
            total = self.rows
            take = min(size, total)
            # A joined batch is always cut: slice_rows collates the rows of columns the pieces held differently.
            batch = joined if take == total and len(self.pieces) == 1 else self.slice(joined, 0, take, rows=total)
            rest = total - take
            self.pieces = [self.slice(joined, take, total, rows=total)] if rest else []
            self.piece_rows = [rest] if rest else []
            self.piece_indices = [known[take:] if known is not None else None] if rest else []
            self.rows = rest
            out.append((batch, self._point(rest), take))
        if final:
            self.pieces, self.piece_rows, self.piece_indices, self.rows = [], [], [], 0
        return out

    def _point(self, rest: int) -> ResumePoint:
        """The resume point after a batch that leaves ``rest`` rows of the last task carried."""
        number, task_rows, before, after = self.last_task
        return ResumePoint.after_rows(number, task_rows - rest, task_rows, before=before, after=after)
