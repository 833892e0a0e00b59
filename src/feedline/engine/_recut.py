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

    def __init__(self, size: int, drop_remainder: bool):
        self.size, self.drop_remainder = size, drop_remainder
        self.pieces: list = []
        self.rows = 0
        self.last_task = None  # (task number, its row count) of the last piece added

    def add(self, piece, rows: int, number: int, task_rows: int) -> None:
        """Carry ``rows`` rows of task ``number`` (which returned ``task_rows`` in all)."""
        self.pieces.append(piece)
        self.rows += rows
        self.last_task = (number, task_rows)

    def cut(self, final: bool) -> list:
        """Full batches as ``(batch, resume point, rows)``; with ``final``, the remainder too (unless dropped)."""
        out = []
        size = self.size
        while self.rows >= size or (final and self.rows and not self.drop_remainder):
            joined = self.pieces[0] if len(self.pieces) == 1 else concat_pieces(self.pieces)
            total = self.rows
            take = min(size, total)
            batch = joined if take == total else slice_rows(joined, 0, take)
            rest = total - take
            self.pieces = [slice_rows(joined, take, total)] if rest else []
            self.rows = rest
            number, task_rows = self.last_task
            point = {"task": number, "offset": task_rows - rest} if rest else {"task": number + 1, "offset": 0}
            out.append((batch, point, take))
        if final:
            self.pieces, self.rows = [], 0
        return out
