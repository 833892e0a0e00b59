"""Packer: ``pack(max_length)``'s rows, filled in the consumer from the items of each task in task order.

Each task's piece (`feedline._packing.RaggedCollate`) holds its items (whole
samples, or the pieces of a split one) with their lengths. Items are placed
one at a time, in task order, so the rows are a function of the epoch's
order only (any backend, any worker count). An item goes into the first
open row it fits (``fit="first"``) or the one it leaves least room in
(``"best"``, ties to the oldest); when none fits and ``buffer`` rows are
open, the fullest (ties: the oldest) is closed first. A row closes as soon
as it is full; closed rows are batched ``batch_size`` at a time; at the end
of the epoch the open rows close in the order they were opened.

Item data is copied into the row's own arrays as it is placed, so nothing
pins a worker's shared-memory slot.

Resume points: items are numbered from the epoch's start (``ordinal``).
After a batch, the point names the oldest task ``T0`` that still has an
item in a row, that task's first ordinal, which ordinals each open and
each closed-but-unbatched row holds, and the next ordinal to place. A
resumed run re-reads from ``T0``, puts the held items back into their rows
(in ordinal order, which is their order in the row) and drops the others,
then places items from the next ordinal on exactly as the first run did.
"""

from __future__ import annotations

import bisect

import numpy as np

from .._errors import FeedlineError, SampleError
from .._padding import _fields, _rebuild
from .._tree import slice_rows

__all__ = ["Fill", "Packer"]

ADDED = ("segment_ids", "positions")  # the keys a packed dict sample gains (Grain's <feature>_segment_ids / _positions)


class Fill:
    """Items delivered and the slots they took (rows x width) in an epoch's packed or budgeted batches."""

    def __init__(self):
        self.items = 0
        self.slots = 0


class _Row:
    __slots__ = ("ordinals", "lengths", "used", "arrays")

    def __init__(self):
        self.ordinals, self.lengths, self.used, self.arrays = [], [], 0, None


class Packer:
    """The open rows of one epoch, and the batches of rows cut from them (the interface of `engine._recut.Recut`).

    Args:
        max_length, fit, buffer, pad_value: as given to ``pack()``.
        size: rows per batch (None: rows are handed out one at a time).
        drop_remainder: drop the epoch's last, short batch of rows.
        resume: ``state["pack"]`` of a saved point, or None.
        where: ``where(index)``, a sample's place, to name it in an error.
    """

    slice = staticmethod(slice_rows)  # the iterator's resumed-first-task cut (never needed: the offset is always 0)

    def __init__(self, max_length: int, fit: str, buffer: int, pad_value, size: int | None, drop_remainder: bool,
                 resume: dict | None = None, where=None):
        self.length, self.best, self.capacity, self.pad = max_length, fit == "best", buffer, pad_value
        self.size, self.drop_remainder, self.where = size, drop_remainder, where
        self.open: list = []
        self.rooms: list = []  # room left in each open row
        self.closed: list = []  # rows closed but not yet batched
        self.ready: list = []
        self.tasks: list = []  # (task number, first ordinal, streams before it), in task order
        self.current = None
        self.fill = Fill()
        self._count = np.arange(max_length, dtype=np.int32)  # positions 0, 1, ... of a segment
        self.spec = None  # (kind, keys, dtypes, trailing shapes) from the first piece
        self.error = None
        self.next = resume["first"] if resume else 0  # ordinal of the next item to arrive
        self.replay = resume["next"] if resume else 0  # items before this were placed before the resume
        self.refill: dict = {}  # ordinal -> the row it goes back into
        if resume:
            for rows, out in ((resume["open"], self.open), (resume["pending"], self.closed)):
                for ordinals in rows:
                    row = _Row()
                    out.append(row)
                    self.refill.update((g, row) for g in ordinals)
            self.rooms = [0] * len(self.open)  # set once their items are back
            if self.next >= self.replay:
                self._resumed()

    @property
    def rows(self) -> int:
        return len(self.open) + len(self.closed)

    # -------------------------------------------------------------- input
    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        """Place the items of task ``number``; batches are cut as rows fill (``before``: a generator's shard positions)."""
        if self.error is not None:
            return
        self.tasks.append((number, self.next, before))
        self.current = number
        try:
            self._add(piece, indices)
        except SampleError as exc:
            self.error = exc

    def _add(self, piece, indices) -> None:
        kind, keys = _fields(piece["fields"])
        fields = [piece["fields"] if key is None else piece["fields"][key] for key in keys]
        self._check_spec(kind, keys, fields, piece, indices)
        lengths = piece["lengths"].tolist()
        starts = np.concatenate([[0], np.cumsum(lengths)]).tolist() if lengths else [0]
        for item, n in enumerate(lengths):
            g = self.next
            if g < self.replay:  # placed before the resume: back into its row, or delivered already
                row = self.refill.pop(g, None)
                if row is not None:
                    self._put(row, g, n, fields, starts[item])
                self.next += 1
                if self.next == self.replay:
                    self._resumed()
                continue
            self._place(g, n, fields, starts[item])

    def _check_spec(self, kind, keys, fields, piece, indices) -> None:
        spec = (kind, keys, [f.dtype for f in fields], [f.shape[1:] for f in fields])
        if self.spec is None:
            if kind == "dict" and any(k in keys for k in ADDED):
                raise SampleError(f"pack(): the sample already has a field named {[k for k in ADDED if k in keys][0]!r}, "
                                  "which pack() adds; rename it in map()", stage="pack")
            for dtype in spec[2]:
                if not np.array_equal(np.array(self.pad).astype(dtype), np.array(self.pad)):
                    raise SampleError(f"pack(pad_value={self.pad!r}) does not fit a field of dtype {dtype}; give a value "
                                      "of that type", stage="pack")
            self.spec = spec
        elif spec != self.spec:
            row = int(piece["sample"][0]) if len(piece["sample"]) else 0
            index = indices[row] if indices is not None else None
            raise SampleError(f"pack(): sample {index} has fields {keys!r} of {spec[2]} {spec[3]} where the epoch's first "
                              f"had {self.spec[1]!r} of {self.spec[2]} {self.spec[3]}; packed rows need the same fields, "
                              "dtypes and shapes past the first axis (cast or reshape in map())",
                              index=index, where=self.where(index) if (index is not None and self.where) else None, stage="pack")

    def _resumed(self) -> None:
        if self.refill:
            raise FeedlineError(f"pack(): the resumed epoch did not give back item {min(self.refill)} of the rows held "
                                "at the checkpoint; the state does not fit this pipeline's data")
        self.rooms = [self.length - row.used for row in self.open]

    def _place(self, g: int, n: int, fields, start: int) -> None:
        rooms, pick = self.rooms, -1
        if self.best:
            tight = self.length + 1
            for i, room in enumerate(rooms):
                if n <= room < tight:
                    pick, tight = i, room
        else:
            for i, room in enumerate(rooms):
                if room >= n:
                    pick = i
                    break
        if pick < 0:
            if len(rooms) >= self.capacity:
                self._close(rooms.index(min(rooms)))  # the fullest; the point of a batch cut here has item g still to place
            self.open.append(_Row())
            rooms.append(self.length)
            pick = len(rooms) - 1
        self._put(self.open[pick], g, n, fields, start)
        self.next = g + 1
        rooms[pick] -= n
        if rooms[pick] == 0:
            self._close(pick)

    def _put(self, row: _Row, g: int, n: int, fields, start: int) -> None:
        if row.arrays is None:
            row.arrays = [np.empty((self.length, *f.shape[1:]), dtype=f.dtype) for f in fields]
        for out, f in zip(row.arrays, fields):
            out[row.used : row.used + n] = f[start : start + n]
        row.ordinals.append(g)
        row.lengths.append(n)
        row.used += n

    def _close(self, i: int) -> None:
        self.closed.append(self.open.pop(i))
        self.rooms.pop(i)
        if len(self.closed) == (self.size or 1):
            self._emit()

    # ------------------------------------------------------------- output
    def _emit(self) -> None:
        rows, self.closed = self.closed, []
        items = sum(len(r.lengths) for r in rows)
        self.fill.items += sum(r.used for r in rows)
        self.fill.slots += len(rows) * self.length
        for r in rows:  # the arrays were made empty: padding goes in once, past the last item
            for a in r.arrays:
                a[r.used :] = self.pad
        ids = np.zeros((len(rows), self.length), dtype=np.int32)
        positions = np.zeros((len(rows), self.length), dtype=np.int32)
        count = self._count
        for k, r in enumerate(rows):
            start = 0
            for segment, n in enumerate(r.lengths, 1):
                ids[k, start : start + n] = segment
                positions[k, start : start + n] = count[:n]
                start += n
        if self.size is None:
            batch = self._sample(rows[0].arrays, ids[0], positions[0])
        else:
            fields = [np.stack([r.arrays[k] for r in rows]) for k in range(len(rows[0].arrays))]
            batch = self._sample(fields, ids, positions)
        self.ready.append((batch, self._point(), items))

    def _sample(self, fields: list, ids, positions):
        kind, keys = self.spec[0], self.spec[1]
        if kind == "dict":
            return {**dict(zip(keys, fields)), "segment_ids": ids, "positions": positions}
        packed = _rebuild(kind, keys, dict(zip(keys, fields)))
        return (*packed, ids, positions) if kind == "tuple" else (packed, ids, positions)

    def _point(self) -> dict:
        held = [r.ordinals[0] for r in self.open + self.closed if r.ordinals]
        firsts = [t[1] for t in self.tasks]
        if held:
            at = max(0, bisect.bisect_right(firsts, min(held)) - 1)
        else:
            at = next(k for k, t in enumerate(self.tasks) if t[0] == self.current)
        del self.tasks[:at]
        number, first, before = self.tasks[0]
        point = {"task": number, "offset": 0, "pack": {
            "first": first, "next": self.next,
            "open": [list(r.ordinals) for r in self.open], "pending": [list(r.ordinals) for r in self.closed]}}
        if before is not None:
            point["streams"] = before
        return point

    def cut(self, final: bool) -> list:
        """Batches ready since the last call; with ``final``, the open rows closed and batched too."""
        if self.error is not None:
            error, self.error, self.ready = self.error, None, []
            raise error
        if final:
            if self.refill:
                self._resumed()
            while self.open:
                self._close(0)
            if self.closed and not self.drop_remainder:
                self._emit()
            self.closed = []
        out, self.ready = self.ready, []
        return out
