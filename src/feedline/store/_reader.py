"""Reading a store: `Store` (random access, a feedline source); `_open.open_store` and `_from_store.from_store` open one.

Files are memory-mapped lazily in the process that reads (descriptors
closed at once); uncompressed fields are read-only NumPy views, compressed
ones are decompressed per record batch, images decoded per sample. A
`Store` pickles as its path and manifest. Thread safety: caches are filled
under a lock and read without one. ``verify=True`` checks each record batch
against its checksum the first time this process reads it (and each file's
header and footer when it is opened). Details: docs/store.md, "Reading a store".
"""

from __future__ import annotations

import bisect
import math
import os
import threading

import numpy as np

from .._batch_memory import NewArrays, new_arrays
from .._fingerprint import digest
from .._mechanism_policy import current_mechanisms
from ..sources._base import Source
from ._checksum import Region, bad_ends, batch_matches, has_checksums, manifest_digest, row_ranges
from ._deps import pyarrow, pyarrow_ipc
from ._errors import StoreError
from ._fields import Column, FieldSpec
from ._format import read_manifest
from ._structure import describe, rebuild, skeleton_of

__all__ = ["Store"]

_COMPRESSED_CACHE = 8  # decompressed record batches kept per compressed group (each one record batch, 1 MiB when written compressed)
_GIL_FREE_ABOVE = 500  # NumPy copies a fancy index without the GIL only above this many elements (see _pieces)
_MIN_PIECE = 256  # bytes: the smallest piece of a row worth cutting for that


class Store(Source):
    """A store opened for reading: ``len(store)``, ``store[i]``, ``store.gather(indices)``.

    Samples come back in the structure they were written (dict, tuple or
    single value). Fixed-shape arrays stored ``raw`` are read-only views
    of the memory-mapped file: copy (``np.array(x)``) before writing into
    them, or let ``batch()`` / ``gather`` copy them into a batch.

    Attributes:
        path: the store directory (absolute).
        manifest: the parsed ``manifest.json``.
        fields: ``{name: FieldSpec}`` in storage order.
        meta: the ``meta`` dict given to the writer.
        verify: whether reads are checked against the store's checksums.
        parallel_gather: True: `gather` copies fixed-size fields with NumPy
            calls that release the GIL, so the engine also tries a thread
            pool on bulk reads (`feedline.engine._choice`).
    """

    parallel_gather = True

    def __init__(self, path, manifest: dict | None = None, *, check_files: bool = True, verify: bool = False):
        self.path = os.path.abspath(os.fspath(path))
        self.manifest = manifest if manifest is not None else read_manifest(self.path)
        self.verify = bool(verify)
        self._setup()
        pyarrow()  # a missing pyarrow is reported here, not in a worker
        if self.verify:
            self._check_verifiable()
        if check_files:
            self.check_files()

    def _setup(self) -> None:
        m = self.manifest
        self._specs = [FieldSpec.from_json(f) for f in m["fields"]]
        self.fields = {spec.name: spec for spec in self._specs}
        self.meta = m.get("meta", {})
        self._skeleton = skeleton_of(m["structure"]) if m["structure"] else None
        self._length = int(m["num_samples"])
        starts, where = [], []
        for number, part in enumerate(m["files"]):
            row = part["rows"][0]
            for batch, rows in enumerate(part["batches"]):
                starts.append(row)
                where.append((number, batch))
                row += rows
        self._starts = starts
        self._starts_array = np.asarray(starts, dtype=np.int64)
        self._where = where
        self._groups = {g: [i for i, s in enumerate(self._specs) if s.group == g] for g in m["groups"]}
        self._lock = threading.Lock()
        self._readers: dict = {}  # (part, group) -> RecordBatchFileReader over the mapped file
        self._columns: dict = {}  # (chunk, group) -> [Column] of the group's fields
        self._mapped: dict = {}  # (part, group) -> the mapped file's bytes, kept to check checksums (verify=True)
        self._verified: set = set()  # (part, group, batch) checked in this process (survives the column cache)

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        return {"path": self.path, "manifest": self.manifest, "verify": self.verify}

    def __setstate__(self, state: dict) -> None:
        self.path, self.manifest = state["path"], state["manifest"]
        self.verify = state.get("verify", False)
        self._setup()

    # ------------------------------------------------------------ checksums
    def _check_verifiable(self) -> None:
        """For ``verify=True``: the store has checksums, and its manifest matches its own."""
        if not has_checksums(self.manifest):
            raise StoreError(
                f"the store {self.path!r} has no checksums (format version {self.manifest['format_version']}, written "
                "before feedline recorded them), so verify=True cannot check it; write the store again to add them, "
                "or read it without verify"
            )
        if self.manifest.get("manifest_checksum") != manifest_digest(self.manifest):
            raise StoreError(
                f"the manifest of the store {self.path!r} does not match its checksum: it was edited or damaged after "
                "the store was written, so the store cannot be trusted; copy the store again from a good copy, or write it again"
            )

    def _damaged(self, region: Region) -> StoreError:
        return StoreError(
            f"the store {self.path!r} is damaged: {region.describe()} does not match the checksum written with it, "
            f"so these samples cannot be trusted. Copy the store again from a good copy, or write it again; "
            f"`feedline inspect --verify {self.path}` lists every damaged file"
        )

    # ------------------------------------------------------------ files
    def _file(self, part: int, group: str) -> tuple[str, int]:
        entry = self.manifest["files"][part]["files"][group]
        return os.path.join(self.path, *entry["name"].split("/")), int(entry["bytes"])

    def check_files(self) -> None:
        """Raise `StoreError` if a file of the store is missing or has the wrong size (truncated)."""
        for part in range(len(self.manifest["files"])):
            for group in self._groups:
                path, size = self._file(part, group)
                self._check_file(path, size)

    def _check_file(self, path: str, size: int) -> None:
        try:
            actual = os.path.getsize(path)
        except FileNotFoundError:
            raise StoreError(
                f"the store {self.path!r} is missing its file {os.path.relpath(path, self.path)!r} (listed in its manifest); "
                "the store is damaged: copy it again completely, or write it again"
            ) from None
        if actual != size:
            raise StoreError(
                f"the file {path!r} of the store has {actual} bytes where the manifest says {size}: it is "
                f"{'truncated' if actual < size else 'not the file that was written'}; copy the store again "
                "completely, or write it again"
            )

    def _local_file(self, part: int, group: str) -> str:
        """The local path of a part's file, checked for size (a remote store fetches it into its cache here)."""
        path, size = self._file(part, group)
        self._check_file(path, size)
        return path

    def _reader(self, part: int, group: str):
        key = (part, group)
        reader = self._readers.get(key)
        if reader is not None:
            return reader
        pa, ipc = pyarrow(), pyarrow_ipc()
        path = self._local_file(part, group)
        try:
            with pa.memory_map(path) as mapped:
                whole = mapped.read_buffer()  # zero-copy; the mapping outlives the descriptor
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"cannot read {path!r} as an Arrow IPC file ({e}); the store is damaged, write it again") from e
        if self.verify:  # before parsing: a damaged footer must not reach the IPC reader
            entry = self.manifest["files"][part]
            bad = bad_ends(whole, entry["files"][group]["checksums"])
            if bad:
                raise self._damaged(Region(entry["files"][group]["name"], bad[0], tuple(entry["rows"])))
            self._mapped[key] = whole
        try:
            reader = ipc.open_file(pa.BufferReader(whole), options=ipc.IpcReadOptions(use_threads=False))
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"cannot read {path!r} as an Arrow IPC file ({e}); the store is damaged, write it again") from e
        expected = len(self.manifest["files"][part]["batches"])
        if reader.num_record_batches != expected:
            raise StoreError(f"{path!r} holds {reader.num_record_batches} record batches where the manifest says "
                             f"{expected}; the store is damaged, write it again")
        self._readers[key] = reader
        return reader

    def _group_columns(self, chunk: int, group: str) -> list:
        key = (chunk, group)
        columns = self._columns.get(key)
        if columns is not None:
            return columns
        with self._lock:
            columns = self._columns.get(key)
            if columns is not None:
                return columns
            part, batch = self._where[chunk]
            reader = self._reader(part, group)
            path = self._file(part, group)[0]
            if self.verify and (part, group, batch) not in self._verified:
                entry = self.manifest["files"][part]
                if not batch_matches(self._mapped[(part, group)], entry["files"][group]["checksums"], batch):
                    raise self._damaged(Region(entry["files"][group]["name"], f"record batch {batch}", row_ranges(entry)[batch]))
                self._verified.add((part, group, batch))
            try:
                record_batch = reader.get_batch(batch)
            except (OSError, pyarrow().ArrowException) as e:
                raise StoreError(f"cannot read record batch {batch} of {path!r} ({e}); the store is damaged, write it again") from e
            rows = self.manifest["files"][part]["batches"][batch]
            if record_batch.num_rows != rows:
                raise StoreError(f"record batch {batch} of {path!r} has {record_batch.num_rows} rows where the manifest "
                                 f"says {rows}; the store is damaged, write it again")
            columns = []
            for i in self._groups[group]:
                spec = self._specs[i]
                arrays = [record_batch.column(name) for name in spec.columns]
                columns.append(Column(spec, arrays, f"{path}, field {spec.name!r}"))
            if group != "raw":
                cached = [k for k in self._columns if k[1] == group]
                for old in cached[: max(0, len(cached) - _COMPRESSED_CACHE + 1)]:
                    del self._columns[old]
            self._columns[key] = columns
            return columns

    def _chunk_columns(self, chunk: int) -> list:
        """The `Column` of every field (in field order) for record batch ``chunk``."""
        out = [None] * len(self._specs)
        for group, members in self._groups.items():
            for i, column in zip(members, self._group_columns(chunk, group)):
                out[i] = column
        return out

    # ------------------------------------------------------------ reading
    def identity(self) -> str:
        return digest(self.manifest)  # what was written, wherever the store now lives

    def __len__(self) -> int:
        return self._length

    def read(self, index: int):
        """Sample ``index`` (0 <= index < len(self)) in its written structure."""
        chunk = bisect.bisect_right(self._starts, index) - 1
        row = index - self._starts[chunk]
        return rebuild(self._skeleton, [column.value(row) for column in self._chunk_columns(chunk)])

    def __getitem__(self, index: int):
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"store indices are integers, got {type(index).__name__}; use gather(indices) for many")
        index = int(index)
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"sample {index} is out of range: the store {self.path!r} has {self._length} samples")
        return self.read(index)

    def gather(self, indices, alloc=None):
        """The samples at ``indices`` as one batch (the structure of a sample, with a row axis).

        Array and scalar fields come back stacked, in arrays from ``alloc``
        (``alloc([(shape, dtype), ...]) -> arrays``, the hook a process
        worker uses to write straight into shared memory; default, or a
        `NewArrays`: new NumPy arrays, gathered with one copy, or, for a
        batch that allocator reuses memory for, arrays it gives).
        Variable-size fields (ragged arrays, bytes, str) come back as lists.
        """
        chunks, rows = self._locate(indices)
        n = len(chunks)
        unique = np.unique(chunks).tolist()
        by_chunk = {c: self._chunk_columns(c) for c in unique}
        plan = _GatherPlan(chunks, rows, unique)
        stacked = self._stack_new(plan, by_chunk, n, alloc) if alloc is None or isinstance(alloc, NewArrays) else {}
        outs = iter((alloc or new_arrays)(self._wanted_arrays(stacked, n)))
        chunk_list, row_list = chunks.tolist(), rows.tolist()
        values = []
        for f, spec in enumerate(self._specs):
            if f in stacked:
                values.append(stacked[f])
            elif spec.kind in ("array", "scalar"):
                out = next(outs)
                if spec.image:
                    for k, (c, r) in enumerate(zip(chunk_list, row_list)):
                        out[k] = by_chunk[c][f].value(r)
                else:
                    plan.copy([by_chunk[c][f].array for c in unique], out)
                values.append(out)
            else:
                values.append([by_chunk[c][f].value(r) for c, r in zip(chunk_list, row_list)])
        return rebuild(self._skeleton, values)

    def _locate(self, indices) -> tuple:
        """The record batch and the row in it of each of ``indices`` (checked to be in range)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= self._length):
            bad = int(idx[(idx < 0) | (idx >= self._length)][0])
            raise IndexError(f"sample {bad} is out of range: the store {self.path!r} has {self._length} samples")
        chunks = np.searchsorted(self._starts_array, idx, side="right") - 1
        return chunks, idx - self._starts_array[chunks]

    def _stack_new(self, plan: "_GatherPlan", by_chunk: dict, n: int, alloc) -> dict:
        """Field position -> its rows, gathered into a new array with one copy (for the fields where that works).

        A field a `NewArrays` allocator would give reused memory for is left
        out: it is copied into that memory by `gather` instead.
        """
        stacked = {}
        for f, spec in enumerate(self._specs):
            if spec.kind not in ("array", "scalar") or spec.image:
                continue
            if alloc is not None and alloc.reuses(n * np.dtype(spec.dtype).itemsize * math.prod(spec.shape or ())):
                continue  # a large batch: into an array used before (no fresh pages), copied as below
            array = plan.gathered([by_chunk[c][f].array for c in plan.unique])
            if array is not None:
                stacked[f] = array
        return stacked

    def _wanted_arrays(self, stacked: dict, n: int) -> list:
        """``(shape, dtype)`` of the batch array of every fixed-size field not already in ``stacked``."""
        wanted = []
        for f, spec in enumerate(self._specs):
            if f in stacked or spec.kind not in ("array", "scalar"):
                continue
            wanted.append(((n, *spec.shape) if spec.kind == "array" else (n,), np.dtype(spec.dtype)))
        return wanted

    def where(self, index: int) -> str:
        chunk = bisect.bisect_right(self._starts, index) - 1
        part = self._where[chunk][0] if chunk >= 0 else 0
        names = ", ".join(entry["name"] for entry in self.manifest["files"][part]["files"].values())
        return f"{self.path} sample {index} (in {names})"

    def describe(self) -> str:
        fields = ", ".join(f"{spec.name}: {spec.describe()}" for spec in self._specs)
        checked = ", verify=True" if self.verify else ""
        return f"from_store({self.path!r}{checked}, {self._length} samples; {fields})"

    def close(self) -> None:
        """Drop cached readers and columns (mappings go once no array points into them)."""
        with self._lock:
            self._readers.clear()
            self._columns.clear()
            self._mapped.clear()

    def __repr__(self) -> str:
        structure = describe(self.manifest["structure"]) if self.manifest["structure"] else "empty"
        return f"Store({self.path!r}, {self._length} samples, {structure})"


class _GatherPlan:
    """Where each row of a gathered batch comes from, grouped by record batch with vectorised NumPy.

    A shuffled batch draws its rows from many record batches (and files).
    Into a new batch, `gathered` copies them all with one fancy index. Into
    given arrays (shared memory), `copy` works as follows.
    Small rows (up to ``MechanismPolicy.gather_row_by_row`` bytes: scalars, labels, small vectors)
    are copied with one ``np.take`` per record batch, which
    releases the GIL, into a contiguous stretch of a scratch array in
    record-batch order, and one more ``np.take`` puts them in the batch's
    order: a copy per row from Python would cost more than the row (and
    hold the GIL, so threads could not read two batches at once). Larger
    rows are copied one assignment per row, straight into the batch: the
    Python step is small beside the copy (which releases the GIL), and the
    scratch pass would double the memory traffic (slower on image rows,
    no faster on small ones: benchmarks/store_gather.py). The plan is made
    once per gather and used for every fixed-size field.
    """

    def __init__(self, chunks: np.ndarray, rows: np.ndarray, unique: list):
        self.single = len(unique) <= 1
        self.chunks, self.rows, self.unique = chunks, rows, unique
        self._grouped = self._pairs = None

    def _grouping(self):
        """Rows in record-batch order, each record batch's stretch, and each batch position's place in that order."""
        if self._grouped is None:
            order = np.argsort(self.chunks, kind="stable")
            bounds = np.searchsorted(self.chunks[order], np.asarray(self.unique, dtype=self.chunks.dtype)).tolist()
            inverse = np.empty_like(order)
            inverse[order] = np.arange(len(order), dtype=order.dtype)
            self._grouped = self.rows[order], list(zip(bounds, bounds[1:] + [len(order)])), inverse
        return self._grouped

    def gathered(self, blocks: list) -> np.ndarray | None:
        """The batch's rows of ``blocks`` in a new array, copied with one NumPy fancy index (None: not possible).

        The blocks (one per record batch, in ``unique`` order) sit anywhere
        in memory: a read-only view whose element is one row, starting at
        the lowest block and advancing one byte at a time, reaches every
        row of every block by its byte offset, so ``view[offsets]`` copies
        the whole batch at once, with the GIL released, into memory NumPy
        allocates (as fast as ``np.take`` from one array in memory; twice
        the per-record-batch copies into a given batch on 3x64x64 rows,
        benchmarks/store_gather.py). Only offsets inside the blocks are
        ever read; the view holds the blocks while it lives.
        """
        if not blocks:
            return None
        first = blocks[0]
        row_shape, dtype = first.shape[1:], first.dtype
        row_bytes = first.itemsize * int(np.prod(row_shape, dtype=np.int64))
        if row_bytes == 0 or not all(b.flags.c_contiguous and b.shape[1:] == row_shape and b.dtype == dtype for b in blocks):
            return None
        addresses = np.array([b.__array_interface__["data"][0] for b in blocks], dtype=np.int64)
        low = int(addresses.min())
        span = max(int(a) + b.nbytes for a, b in zip(addresses.tolist(), blocks)) - low
        if span < row_bytes:
            return None
        block = np.searchsorted(np.asarray(self.unique, dtype=self.chunks.dtype), self.chunks)  # unique is sorted
        offsets = (addresses - low)[block] + self.rows * row_bytes
        pieces = _pieces(len(offsets), row_bytes)
        if pieces > 1:  # each row as `pieces` consecutive elements: enough of them for NumPy to let the GIL go
            offsets = (offsets[:, None] + np.arange(0, row_bytes, row_bytes // pieces)).reshape(-1)
        element = row_bytes // pieces
        rows_view = np.asarray(_RowWindow(low, span - element + 1, element, blocks))
        return rows_view[offsets].view(dtype).reshape((len(self.rows), *row_shape))

    def copy(self, blocks: list, out: np.ndarray) -> None:
        """Fill ``out`` (the batch) from ``blocks`` (one array per record batch, in ``unique`` order)."""
        # mode="clip" avoids NumPy's buffered copy for out= (rows are in range: checked by gather).
        if self.single:
            if blocks:
                np.take(blocks[0], self.rows, axis=0, out=out, mode="clip")
            return
        if out[0].nbytes > current_mechanisms().gather_row_by_row:
            if self._pairs is None:
                where = {c: k for k, c in enumerate(self.unique)}
                self._pairs = [(where[c], r) for c, r in zip(self.chunks.tolist(), self.rows.tolist())]
            for k, (b, r) in enumerate(self._pairs):
                out[k] = blocks[b][r]
            return
        rows, stretches, inverse = self._grouping()
        scratch = np.empty(out.shape, out.dtype)
        for block, (lo, hi) in zip(blocks, stretches):
            np.take(block, rows[lo:hi], axis=0, out=scratch[lo:hi], mode="clip")
        np.take(scratch, inverse, axis=0, out=out, mode="clip")


def _pieces(rows: int, row_bytes: int) -> int:
    """Into how many equal pieces to cut each row so that a fancy index copies more than `_GIL_FREE_ABOVE` elements.

    NumPy releases the GIL for a fancy-index copy only above 500 elements
    (its ``NPY_BEGIN_THREADS_THRESHOLDED``), whatever their size: a batch
    of 256 image rows held it, and two threads gathered no faster than one.
    Pieces of at least `_MIN_PIECE` bytes keep each copy a ``memcpy``; rows
    too small for that are quick enough to copy holding the GIL.
    """
    if rows == 0 or rows > _GIL_FREE_ABOVE:
        return 1
    pieces = _GIL_FREE_ABOVE // rows + 1
    while pieces * _MIN_PIECE <= row_bytes:
        if row_bytes % pieces == 0:
            return pieces
        pieces += 1
    return 1


class _RowWindow:
    """Read-only rows of ``row_bytes`` starting at every byte of ``[address, address + count + row_bytes - 1)``.

    NumPy builds the view from ``__array_interface__``; this object is the
    view's base, so it keeps ``blocks`` (the memory behind the address)
    alive for as long as the view lives.
    """

    def __init__(self, address: int, count: int, row_bytes: int, blocks: list):
        self.blocks = blocks
        self.__array_interface__ = {
            "shape": (count,), "typestr": f"|V{row_bytes}", "strides": (1,), "data": (address, True), "version": 3,
        }
