"""Where the stream shuffle (`feedline.engine._window`) keeps its rows, and how it builds batches from them.

The window names a row by a kind and a row number: ``STORE`` (a slot of
the buffer), ``PIECE`` (a row of the task being added) or ``PENDING`` (a
row emitted but not yet batched). A store answers `take` (a batch of the
named rows), `commit` (piece rows move into slots) and `keep` (the pending
rows, copied out before the piece and the slots they name change).

`ColumnStore` holds batches of arrays (dicts and tuples of NumPy arrays,
what the default collate makes of numbers and arrays) as N-row arrays, so
taking and storing rows are a few vectorised copies per field. Anything
else (strings, ``None``, lists, ragged rows) is kept row by row in a
`RowStore` and joined like the re-cut joins pieces; a column store turns
into a row store the first time a piece does not fit it.
"""

from __future__ import annotations

import numpy as np

from .._tree import Leaf, concat_pieces, flatten, slice_rows, unflatten

__all__ = ["PENDING", "PIECE", "STORE", "ColumnStore", "RowStore", "store_for"]

STORE, PIECE, PENDING = 0, 1, 2


def _owned(node):
    """A copy of a row whose arrays own their memory (a view would pin the whole batch, or a worker's slot)."""
    if isinstance(node, np.ndarray):
        return node.copy()
    if isinstance(node, dict):
        return {k: _owned(v) for k, v in node.items()}
    if type(node) is tuple:
        return tuple(_owned(v) for v in node)
    if isinstance(node, list):
        return [_owned(v) for v in node]
    return node


def _columns_only(skeleton) -> bool:
    """The skeleton holds dicts, tuples and array leaves only (no list, string or other value)."""
    if isinstance(skeleton, Leaf):
        return True
    if isinstance(skeleton, dict):
        return all(_columns_only(v) for v in skeleton.values())
    if type(skeleton) is tuple:
        return all(_columns_only(v) for v in skeleton)
    return False


def _spec(skeleton, arrays, rows: int):
    """What a piece must share with the store to be stored by columns (None: it cannot be)."""
    if not _columns_only(skeleton) or any(a.ndim == 0 or len(a) != rows for a in arrays):
        return None
    return repr(skeleton), tuple((a.dtype.str, a.shape[1:]) for a in arrays)


class RowStore:
    """Rows one by one (each a one-row batch, or a sample when the pipeline does not batch)."""

    names_rows = True  # joining rows can fail: `take` names the sample with the indices it is given

    def __init__(self, capacity: int, unbatched: bool, where=None, slots=None, pending=None):
        self.unbatched, self.where = unbatched, where
        self.slots = slots if slots is not None else [None] * capacity
        self.pending: list = pending or []
        self.piece: list = []

    def begin(self, payload, rows: int) -> "RowStore":
        self.piece = list(payload) if self.unbatched else [_owned(slice_rows(payload, i, i + 1, rows=rows)) for i in range(rows)]
        return self

    def _row(self, kind: int, row: int):
        return (self.slots, self.piece, self.pending)[kind][row]

    def take(self, kinds: list, rows: list, indices: list):
        """The batch of these rows (the sample itself when the pipeline does not batch); ``indices`` name them in an error."""
        if self.unbatched:
            return self._row(kinds[0], rows[0])
        items = [self._row(kind, row) for kind, row in zip(kinds, rows)]
        n = len(items)
        joined = concat_pieces(items, rows=[1] * n, indices=[[i] for i in indices], where=self.where)
        return slice_rows(joined, 0, n, rows=n)

    def keep(self, kinds: list, rows: list) -> None:
        self.pending = [self._row(kind, row) for kind, row in zip(kinds, rows)]

    def commit(self, slots: list, rows: list) -> None:
        for slot, row in zip(slots, rows):
            self.slots[slot] = self.piece[row]
        self.piece = []


class ColumnStore:
    """Rows as N-row arrays, one per field of the batch."""

    names_rows = False  # every piece has the store's dtypes and shapes: taking rows cannot fail

    def __init__(self, capacity: int, skeleton, arrays, spec):
        self.capacity, self.skeleton, self.spec = capacity, skeleton, spec
        self.slots = [np.empty((capacity,) + a.shape[1:], a.dtype) for a in arrays]
        self.pending = [a[:0].copy() for a in arrays]
        self.piece: list = []

    def fits(self, payload, rows: int) -> bool:
        skeleton, arrays = flatten(payload)
        if _spec(skeleton, arrays, rows) != self.spec:
            return False
        self.piece = arrays
        return True

    def take(self, kinds: list, rows: list, indices=None):
        """The batch of these rows: one gather per field and kind."""
        kinds, rows = np.asarray(kinds, np.int8), np.asarray(rows, np.int64)
        sources = (self.slots, self.piece, self.pending)
        out = []
        for f, column in enumerate(self.slots):
            batch = np.empty((len(rows),) + column.shape[1:], column.dtype)
            for kind in (STORE, PIECE, PENDING):
                sel = kinds == kind
                if sel.any():
                    batch[sel] = sources[kind][f][rows[sel]]
            out.append(batch)
        return unflatten(self.skeleton, out)

    def keep(self, kinds: list, rows: list) -> None:
        self.pending = flatten(self.take(kinds, rows))[1]

    def commit(self, slots: list, rows: list) -> None:
        if slots:
            at, src = np.asarray(slots, np.int64), np.asarray(rows, np.int64)
            for column, new in zip(self.slots, self.piece):
                column[at] = new[src]
        self.piece = []

    def as_rows(self, where) -> RowStore:
        """The same rows kept one by one (a piece arrived that these columns cannot hold)."""
        def row(columns, j):
            return unflatten(self.skeleton, [c[j : j + 1].copy() for c in columns])

        pending = [row(self.pending, j) for j in range(len(self.pending[0]) if self.pending else 0)]
        return RowStore(self.capacity, False, where, [row(self.slots, j) for j in range(self.capacity)], pending)


def store_for(store, capacity: int, payload, rows: int, unbatched: bool, where):
    """The store to add ``payload`` to: ``store`` if it fits, a new one for the first piece, or ``store`` as rows."""
    if isinstance(store, ColumnStore):
        return store if store.fits(payload, rows) else store.as_rows(where).begin(payload, rows)
    if store is None and not unbatched:
        skeleton, arrays = flatten(payload)
        spec = _spec(skeleton, arrays, rows)
        if spec is not None:
            store = ColumnStore(capacity, skeleton, arrays, spec)
            store.piece = arrays
            return store
    store = store or RowStore(capacity, unbatched, where)
    return store.begin(payload, rows)
