"""``shuffle(seed, window=N)``: a bounded, seeded shuffle of a stream's rows, in the consumer.

Rows reach the consumer in plan order (tasks taken in task order, shards
round-robin), whatever the backend or worker count; the window shuffles
that sequence, so its output depends only on ``(seed, epoch)`` and the data.
The buffer holds at most N rows (copied out of the workers' batches, so no
shared-memory slot stays pinned). Row ``g`` (counted from the epoch's
start) fills slot ``g`` while the buffer fills; after that it replaces the
row in slot ``j(g)``, which is emitted. ``j(g)`` is a pure function of
``(seed, epoch, g)`` (drawn in blocks), so the buffer's content after any
number of rows can be told without the data. When the stream ends, the
buffer is emitted in a permutation drawn from ``(seed, epoch)``.

Resumption: after each batch the point records ``delivered`` (rows handed
out) and ``first`` (the oldest row still in the buffer) with the stream
position of that row. A resumed epoch re-reads the stream from ``first``,
refills the slots (rows emitted before ``delivered`` are dropped: they were
delivered), and continues exactly; it re-reads the rows the buffer held
(about ``N * ln N`` of them), never the whole epoch.
"""

from __future__ import annotations

import collections

import numpy as np

from .._errors import FeedlineError
from ._resume_point import ResumePoint
from ._window_store import PENDING, PIECE, STORE, store_for

__all__ = ["WindowShuffle"]

BLOCK = 4096  # slot choices drawn per generator call: amortises the draw, and any row's choice is found in one block


class WindowShuffle:
    """The buffer of one epoch, and the batches cut from what it emits.

    Args:
        capacity: N, the most rows held.
        seed, epoch: where the choices come from.
        size: rows per batch (None: single samples are handed out).
        drop_remainder: drop the epoch's last, short batch.
        resume: ``{"delivered": D, "first": g0}`` from a saved point, or None.
        where: ``where(index)``, a sample's place, to name it when rows do not batch together.
    """

    def __init__(self, capacity: int, seed: int, epoch: int, size: int | None, drop_remainder: bool,
                 resume: dict | None = None, where=None):
        self.capacity, self.seed, self.epoch = capacity, seed, epoch
        self.size, self.drop_remainder, self.where = size, drop_remainder, where
        self.delivered = resume["delivered"] if resume else 0  # rows handed out (or, while replaying, to drop)
        self.ingested = resume["first"] if resume else 0  # number of the next row to arrive
        # Rows older than a resume's first are gone: their slots (row -1) are refilled before anything is emitted.
        self.filled = min(capacity, self.ingested)  # slots in use
        self.slot_index: list = [None] * capacity  # each slot's sample index, to name it in an error
        self.slot_rows = np.full(capacity, -1, dtype=np.int64)  # which row each slot holds
        self.emitted = max(0, self.ingested - capacity)  # rows emitted so far (dropped, pending or delivered)
        self.pending: tuple = ([], [], [])  # kinds, rows and sample indices of emitted rows not yet batched
        self.store = None  # made from the first piece (`_window_store.store_for`)
        self.origins: collections.deque = collections.deque()  # (first row, rows, task, stream point before it)
        self.peak = 0  # the most rows the buffer held at once
        self._drain_first = None  # the oldest row held when the stream ended
        self._block = (-1, None)  # the last block of choices drawn, reused by the next piece

    # -------------------------------------------------------------- input
    def add(self, payload, rows: int, indices, number: int, before: dict, unbatched: bool, dropped: int = 0) -> list:
        """Rows of task ``number`` go in; returns the ``(item, point, rows)`` cut.

        ``before``: the stream point before the task; ``dropped``: its first
        rows, already delivered, that a resumed epoch's first task left out.
        Row by row this is: fill slot g while g < N, else emit slot j(g) and
        put the row there; it is computed for the whole piece at once.
        """
        self.origins.append((self.ingested - dropped, rows + dropped, number, before))
        self.store = store_for(self.store, self.capacity, payload, rows, unbatched, self.where)
        rows_g = np.arange(self.ingested, self.ingested + rows, dtype=np.int64)
        fill = rows_g < self.capacity
        slots = rows_g.copy()
        slots[~fill] = self._choices(rows_g[~fill])
        # The piece's earlier row written to the same slot (-1: none), and whether a row is its slot's last.
        by_slot = np.lexsort((np.arange(rows), slots))
        sorted_slots = slots[by_slot]
        same = sorted_slots[1:] == sorted_slots[:-1]
        previous = np.full(rows, -1, dtype=np.int64)
        previous[by_slot[1:][same]] = by_slot[:-1][same]
        last = by_slot[np.append(~same, True)]
        emitting = np.flatnonzero(~fill)
        from_piece = previous[emitting] >= 0
        kinds = np.where(from_piece, PIECE, STORE)
        refs = np.where(from_piece, previous[emitting], slots[emitting])
        valid = from_piece | (self.slot_rows[slots[emitting]] >= 0)

        def name(kind, row):
            return self.slot_index[row] if kind == STORE else (indices[row] if indices is not None else None)

        def first_after(t):  # the oldest row held once emission t's row is in
            held = self.slot_rows.copy()
            upto = emitting[t] + 1
            np.maximum.at(held, slots[:upto], rows_g[:upto])
            return int(held.min())

        out = []
        self._emit(kinds, refs, valid, name, first_after, out)
        self.ingested += rows
        self.filled = min(self.capacity, self.ingested)
        self.peak = max(self.peak, self.filled)
        if self.pending[0]:  # rows emitted but not batched: copied out before their slots and the piece change
            kinds_left, rows_left, names_left = self.pending
            self.store.keep(kinds_left, rows_left)
            self.pending = ([PENDING] * len(rows_left), list(range(len(rows_left))), names_left)
        np.maximum.at(self.slot_rows, slots, rows_g)
        for slot, row in zip(slots[last].tolist(), last.tolist()):
            self.slot_index[slot] = indices[row] if indices is not None else None
        self.store.commit(slots[last].tolist(), last.tolist())
        return out

    def _choices(self, rows_g: np.ndarray) -> np.ndarray:
        """The slot each of these rows replaces: drawn per block of `BLOCK` rows from ``(seed, epoch, block)``."""
        out = np.empty(len(rows_g), dtype=np.int64)
        if not len(rows_g):
            return out
        blocks = rows_g // BLOCK
        for block in np.unique(blocks).tolist():
            if self._block[0] != block:
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(self.epoch, 1, block))))
                self._block = (block, rng.integers(0, self.capacity, BLOCK))
            sel = blocks == block
            out[sel] = self._block[1][rows_g[sel] - block * BLOCK]
        return out

    def _emit(self, kinds, refs, valid, name, first_after, out: list) -> None:
        """Emit rows in order: those a resume already delivered are dropped, the rest are batched."""
        base, count = self.emitted, len(kinds)
        t = min(count, max(0, self.delivered - base))  # replaying after a resume: delivered before the checkpoint
        if not valid[t:].all():
            missing = base + t + int(np.argmin(valid[t:]))
            raise FeedlineError(f"shuffle(window={self.capacity}): the resumed stream did not give back row "
                                f"{missing} of the buffer; the state does not fit this pipeline's data (the generator "
                                "must yield the same samples in the same order every time it is opened)")
        size = self.size or 1
        kinds, refs = kinds.tolist(), refs.tolist()
        while t < count:
            take = min(size - len(self.pending[0]), count - t)
            self.pending[0].extend(kinds[t : t + take])
            self.pending[1].extend(refs[t : t + take])
            if self.store.names_rows:  # only a row store can fail to join rows, and names them then
                self.pending[2].extend(name(k, r) for k, r in zip(kinds[t : t + take], refs[t : t + take]))
            else:
                self.pending[2].extend([None] * take)
            t += take
            if len(self.pending[0]) == size:
                self.emitted = self.delivered = base + t
                out.append(self._batch(first_after(t - 1)))
        self.emitted = base + count

    # ------------------------------------------------------------- output
    def finish(self) -> list:
        """The stream ended: the buffer's rows in a permutation from ``(seed, epoch)``, cut into the last batches."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(self.epoch, 2))))
        order = rng.permutation(self.filled)
        first = self._drain_first = int(self.slot_rows[: self.filled].min()) if self.filled else self.ingested
        out = []
        if self.filled:
            kinds = np.full(self.filled, STORE, dtype=np.int64)
            self._emit(kinds, order, self.slot_rows[order] >= 0, lambda k, r: self.slot_index[r], lambda t: first, out)
        if self.pending[0] and not self.drop_remainder:
            self.delivered = self.emitted
            out.append(self._batch(first))
        self.pending, self.filled = ([], [], []), 0
        return out

    def _batch(self, first: int):
        kinds, rows, names = self.pending
        self.pending = ([], [], [])
        return self.store.take(kinds, rows, names), self._point(first), len(rows)

    def _point(self, first: int) -> ResumePoint:
        """Where a resume starts: the stream point of ``first``, the oldest row held, and the rows delivered."""
        while self.origins and self.origins[0][0] + self.origins[0][1] <= first:
            self.origins.popleft()
        if not self.origins:
            raise FeedlineError("shuffle(window=...): no stream point is known for the rows held (a bug: please report it)")
        start, _, number, before = self.origins[0]
        return ResumePoint(number, first - start, before, window={"delivered": self.delivered, "first": first})
