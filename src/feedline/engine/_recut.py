"""Re-cut short pieces into full batches (after ``filter`` or ``on_error="skip"``).

When a step may drop samples, a task's output can be shorter than a batch.
The consumer carries rows over, in task order, and cuts full batches from
them; each batch records the resume point just after it (the task whose
rows it ended in, and how many of that task's rows were used).
"""

from __future__ import annotations

from .._tree import concat_pieces, slice_rows

__all__ = ["Recut"]


class Recut:
    """Rows carried between tasks, and the batches cut from them."""

    def __init__(self, size: int, drop_remainder: bool, where=None):
        self.size, self.drop_remainder = size, drop_remainder
        self.where = where  # where(index): a sample's file, to name it when pieces do not fit together
        self.pieces: list = []
        self.piece_rows: list = []
        self.piece_indices: list = []  # each piece's sample indices (None: unknown)
        self.rows = 0
        self.last_task = None  # (task number, its row count) of the last piece added

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None) -> None:
        """Carry ``rows`` rows of task ``number`` (which returned ``task_rows`` in all), samples ``indices``."""
        self.pieces.append(piece)
        self.piece_rows.append(rows)
        self.piece_indices.append(indices)
        self.rows += rows
        self.last_task = (number, task_rows)

    def cut(self, final: bool) -> list:
        """Full batches as ``(batch, resume point, rows)``; with ``final``, the remainder too (unless dropped)."""
        out = []
        size = self.size
        while self.rows >= size or (final and self.rows and not self.drop_remainder):
            joined = self.pieces[0] if len(self.pieces) == 1 else concat_pieces(
                self.pieces, rows=self.piece_rows, indices=self.piece_indices, where=self.where)
            known = None if any(i is None for i in self.piece_indices) else [i for ids in self.piece_indices for i in ids]
            total = self.rows
            take = min(size, total)
            # A joined batch is always cut: slice_rows collates the rows of columns the pieces held differently.
            batch = joined if take == total and len(self.pieces) == 1 else slice_rows(joined, 0, take, rows=total)
            rest = total - take
            self.pieces = [slice_rows(joined, take, total, rows=total)] if rest else []
            self.piece_rows = [rest] if rest else []
            self.piece_indices = [known[take:] if known is not None else None] if rest else []
            self.rows = rest
            number, task_rows = self.last_task
            point = {"task": number, "offset": task_rows - rest} if rest else {"task": number + 1, "offset": 0}
            out.append((batch, point, take))
        if final:
            self.pieces, self.piece_rows, self.piece_indices, self.rows = [], [], [], 0
        return out
