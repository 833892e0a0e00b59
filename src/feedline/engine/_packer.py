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

With ``sizes=`` the same placement runs on the table of lengths before the
map (`plan_rows`), and `PlannedPacker` fills the planned rows as their
samples arrive (`engine._deal.LengthPlan` deals them to ranks).
"""

from __future__ import annotations

import bisect
import collections

import numpy as np

from .._errors import FeedlineError, SampleError
from .._padding import _fields, _rebuild
from .._tree import slice_rows
from ._resume_point import ResumePoint

__all__ = ["Fill", "Packer", "PlannedPacker", "choose", "plan_rows"]

ADDED = ("segment_ids", "positions")  # the keys a packed dict sample gains (Grain's <feature>_segment_ids / _positions)


def choose(rooms: list, n: int, best: bool) -> int:
    """The open row an item of length ``n`` goes into (``rooms``: room left in each, oldest first); -1 if none fits."""
    if best:  # the least room that fits; index() gives the oldest row of that room
        fits = [room for room in rooms if room >= n]
        return rooms.index(min(fits)) if fits else -1
    for i, room in enumerate(rooms):
        if room >= n:
            return i
    return -1


def plan_rows(lengths, max_length: int, fit: str, buffer: int, size: int | None, drop_remainder: bool, split: bool,
              too_long) -> list:
    """The batches `Packer` cuts from samples of these lengths, in this order: placed exactly as it places items.

    Returns a list of batches, each a list of rows, each a list of items
    ``(position, piece, length)``: the sample's position in ``lengths``,
    which of its pieces (0 unless split), and the piece's length.
    ``too_long(position)`` makes the error for a sample longer than a row
    when ``split`` is False. Open rows are numbered in the order they
    opened; for ``"best"`` they are also kept sorted by ``(room, number)``,
    so the best fit (least room that fits, ties to the oldest) and the
    fullest row are a bisection away where `Packer` scans its rows (the
    same choice as `choose`).
    """
    best, per = fit == "best", size or 1
    rows, room_of, closed, batches = {}, {}, [], []  # open rows and their room, by number (the order they opened)
    by_room: list = []  # "best": (room, number) of the open rows, sorted
    numbers, rooms = [], []  # "first": the open rows' numbers and rooms, oldest first (as `Packer` keeps them)
    opened = 0

    def close(r: int) -> None:
        room = room_of.pop(r)
        if best:
            del by_room[bisect.bisect_left(by_room, (room, r))]
        else:
            k = numbers.index(r)
            del numbers[k], rooms[k]
        closed.append(rows.pop(r))
        if len(closed) == per:
            batches.append(closed[:])
            closed.clear()

    for position, total in enumerate(np.asarray(lengths).tolist()):
        if total > max_length and not split:
            raise too_long(position)
        for piece, start in enumerate(range(0, total, max_length)):
            n = min(max_length, total - start)
            if best:
                i = bisect.bisect_left(by_room, (n, -1))
                r = by_room[i][1] if i < len(by_room) else None
            else:
                i = choose(rooms, n, False)
                r = numbers[i] if i >= 0 else None
            if r is None:
                if len(rows) >= buffer:  # the fullest goes out
                    close(by_room[0][1] if best else numbers[rooms.index(min(rooms))])
                r, opened = opened, opened + 1
                rows[r], room_of[r] = [], max_length
                if best:
                    bisect.insort(by_room, (max_length, r))
                else:
                    i = len(numbers)
                    numbers.append(r)
                    rooms.append(max_length)
            rows[r].append((position, piece, n))
            room = room_of[r]
            room_of[r] = room - n
            if best:
                del by_room[bisect.bisect_left(by_room, (room, r))]
                bisect.insort(by_room, (room - n, r))
            else:
                rooms[i] = room - n
            if room == n:
                close(r)
    for r in list(rows):
        close(r)
    if closed and not drop_remainder:
        batches.append(closed[:])
    return batches


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
    packs = True  # stats: the share of slots filled is a packing efficiency

    def __init__(self, max_length: int, fit: str, buffer: int, pad_value, size: int | None, drop_remainder: bool,
                 resume: dict | None = None, where=None):
        self.length, self.best, self.capacity, self.pad = max_length, fit == "best", buffer, pad_value
        self.size, self.drop_remainder, self.where = size, drop_remainder, where
        self.open: list = []
        self.rooms: list = []  # room left in each open row
        self.closed: list = []  # rows closed but not yet batched
        self.ready: list = []
        self.fills: list = []  # (items, slots) of each ready batch ...
        self.last_fills: list = []  # ... and of those the last cut() returned (`engine._deal.Deal` counts a rank's own)
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
        rooms = self.rooms
        pick = choose(rooms, n, self.best)
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
        self.fills.append((sum(r.used for r in rows), len(rows) * self.length))
        self.fill.items += self.fills[-1][0]
        self.fill.slots += self.fills[-1][1]
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

    def _point(self) -> ResumePoint:
        held = [r.ordinals[0] for r in self.open + self.closed if r.ordinals]
        firsts = [t[1] for t in self.tasks]
        if held:
            at = max(0, bisect.bisect_right(firsts, min(held)) - 1)
        else:
            at = next(k for k, t in enumerate(self.tasks) if t[0] == self.current)
        del self.tasks[:at]
        number, first, before = self.tasks[0]
        return ResumePoint(number, 0, before, pack={
            "first": first, "next": self.next,
            "open": [list(r.ordinals) for r in self.open], "pending": [list(r.ordinals) for r in self.closed]})

    def cut(self, final: bool) -> list:
        """Batches ready since the last call; with ``final``, the open rows closed and batched too."""
        if self.error is not None:
            error, self.error, self.ready, self.fills = self.error, None, [], []
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
        self.last_fills, self.fills = self.fills, []
        return out


class PlannedPacker(Packer):
    """Rows of batches planned in advance from a length table (`plan_rows`), filled as their samples arrive.

    ``batches`` are this rank's: each ``(positions, rows)``, its samples'
    positions in the epoch's order (ascending: the order they arrive in)
    and its rows as `plan_rows` gives them. Samples arrive batch after
    batch, each once per batch that holds a piece of it; each piece is
    copied straight into its row. The point after a batch is the next task
    (or this one again, from its start) with ``"pack"`` counting rows of
    this rank's order: ``next`` is the next row to arrive and ``next -
    first`` how many of that task's rows were used. Nothing waits past a
    batch, so no row is held in the state.

    Args:
        batches: this rank's planned batches, from the resume point on.
        total: ``total(position)``, a sample's length by the table (checked against the mapped sample).
        index: ``index(position)``, the sample's source index (for errors).
        resume: ``state["pack"]`` of the point resumed from, or None.
    """

    def __init__(self, max_length: int, pad_value, size: int | None, batches: list, total, index, resume=None,
                 where=None):
        super().__init__(max_length, "best", 1, pad_value, size, False, None, where)
        self.batches = collections.deque(batches)
        self.total, self.index = total, index
        self.drop = resume["next"] - resume["first"] if resume else 0  # rows of the first task delivered before
        self.seen = resume["next"] if resume else 0  # this rank's rows arrived so far
        self.positions, self.cursor = [], 0  # the batch being filled: its samples' epoch positions, how many arrived
        self.batch_rows: list = []
        self.wanted: dict = {}  # epoch position -> [(row, piece, length)] of the batch being filled
        self.failed = False

    @property
    def rows(self) -> int:
        return self.cursor

    def add(self, piece, rows: int, number: int, task_rows: int, indices=None, before=None, after=None) -> None:
        if self.error is not None or self.failed:  # after an error the plan is off: nothing more is filled
            return
        try:
            self._fill(piece, rows, number, task_rows, indices)
        except SampleError as exc:
            self.error = exc

    def _fill(self, piece, rows: int, number: int, task_rows: int, indices) -> None:
        kind, keys = _fields(piece["fields"])
        fields = [piece["fields"] if key is None else piece["fields"][key] for key in keys]
        self._check_spec(kind, keys, fields, piece, indices)
        lengths = piece["lengths"]
        starts = np.concatenate([[0], np.cumsum(lengths)]).tolist()
        bounds = np.searchsorted(piece["sample"], np.arange(rows + 1)).tolist()  # each row's items
        lengths = lengths.tolist()
        skip, self.drop = self.drop, 0  # a resumed first task: its rows before the point were delivered
        for r in range(skip, rows):
            if not self.positions:
                self._begin()
            position, first, last = self.positions[self.cursor], bounds[r], bounds[r + 1]
            self.cursor += 1
            self.seen += 1
            got = sum(lengths[first:last])
            if got != self.total(position):
                index = self.index(position)
                raise SampleError(f"pack(sizes=...): sample {index} has {got} items along its first axis after the map, "
                                  f"but sizes gives {self.total(position)}; the rows are planned from sizes, so it must "
                                  "give each sample's length after every map() before pack()", index=index,
                                  where=self.where(index) if self.where else None, stage="pack")
            for row, k, n in self.wanted.pop(position):
                self._put(self.batch_rows[row], position, n, fields, starts[first + k])
            if self.cursor == len(self.positions):  # the batch is whole: out it goes, its point just after this row
                used = r + 1
                self.here = ResumePoint(number + 1 if used == task_rows else number, 0, pack={
                    "first": self.seen if used == task_rows else self.seen - used, "next": self.seen, "open": [], "pending": []})
                self.closed, self.batch_rows, self.positions, self.cursor = self.batch_rows, [], [], 0
                self._emit()
                self.closed = []

    def _begin(self) -> None:
        positions, rows = self.batches.popleft()
        self.positions = positions.tolist()
        self.batch_rows = [_Row() for _ in rows]
        for k, row in enumerate(rows):
            for position, piece, n in row:
                self.wanted.setdefault(position, []).append((k, piece, n))

    def _point(self) -> ResumePoint:
        return self.here

    def cut(self, final: bool) -> list:
        if self.error is not None:
            error, self.error, self.ready, self.fills, self.failed = self.error, None, [], [], True
            raise error
        if final and self.positions:
            raise FeedlineError(f"pack(sizes=...): the epoch ended before sample position {self.positions[self.cursor]} "
                                "of a planned batch arrived; the state does not fit this pipeline's data")
        out, self.ready = self.ready, []
        self.last_fills, self.fills = self.fills, []
        return out
