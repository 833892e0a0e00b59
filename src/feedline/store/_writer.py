"""`StoreWriter`: batches in, a complete store out, or nothing at all.

Protocol (one writer process; readers never see a partial store):

- Everything is written into a temporary sibling directory,
  ``<path>.tmp-<pid>-<random>``. Rows are buffered until a record batch is
  full (about 16 MiB, or 1 MiB when a field is compressed, so a random read
  of a compressed field decompresses little), then written to every file
  group of the current part; a part is closed (flushed, fsynced) when it
  holds ``rows_per_file`` rows.
- `commit` writes the remaining rows, closes the last part, then writes
  ``manifest.json`` *last* (to a temporary name, fsynced, renamed), and
  renames the directory to ``path``. `feedline.store.open_store` refuses a
  directory without a manifest, so a crash at any point leaves nothing that
  reads as a store. ``overwrite=True`` renames the old store away, renames
  the new one in, then deletes the old one.
- Every byte written is hashed on its way to disk, one checksum per record
  batch of each file (`feedline.store._checksum`), recorded in the manifest.
- `abort` (and an exception inside ``with StoreWriter(...)``) removes the
  temporary directory. A write that fails (disk full) aborts at once and
  raises `StoreError` naming the store, the file and what to do; closing
  the part files on a full disk drops their unwritten buffers, so the
  clean-up itself cannot fail with another disk-full error.
- A temporary directory left by a writer that died (its pid no longer
  runs) is removed by the next writer of the same path.
"""

from __future__ import annotations

import datetime
import errno
import io
import json
import os
import secrets
import shutil
import sys
import warnings

import numpy as np

from ._checksum import ALGORITHM, RunningChecksum, manifest_digest
from ._deps import pyarrow, pyarrow_ipc
from ._errors import StoreError
from ._fields import FieldSpec, arrow_fields, buffered_bytes, infer, normalize, to_arrow
from ._format import CODECS, FORMAT_NAME, FORMAT_VERSION, MANIFEST, SHAPE_SUFFIX, file_name, parse_encoding
from ._structure import describe, split

__all__ = ["StoreWriter"]

BATCH_BYTES = 16 << 20  # a record batch: large enough that per-batch overhead vanishes, small enough to buffer
BATCH_BYTES_COMPRESSED = 1 << 20  # a random read of a compressed field decompresses at most this much
FILE_BYTES = 256 << 20  # a part file: few files for big stores, and a crash or copy loses little


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if sys.platform == "win32":  # os.kill(pid, 0) would terminate the process on Windows
        from .._winproc import windows_process_alive

        return windows_process_alive(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftovers(path: str) -> list[str]:
    """Temporary (``.tmp-``) and replaced (``.old-``) siblings of ``path`` left by writers that died."""
    parent, base = os.path.split(path)
    found = []
    try:
        names = os.listdir(parent or ".")
    except FileNotFoundError:
        return []
    for name in names:
        for marker in (".tmp-", ".old-"):
            if name.startswith(base + marker):
                pid = name[len(base) + len(marker):].split("-", 1)[0]
                if pid.isdigit() and not _pid_alive(int(pid)):
                    found.append(os.path.join(parent, name))
    return sorted(found)


def _fsync_dir(path: str) -> None:
    if sys.platform == "win32":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _FileSink:
    """The file pyarrow writes a part into: a Python object, so every write passes through `write`.

    `write` hashes the bytes for the part's checksums (`cut` ends a region).
    (Being Python also makes a failing disk simulable in tests: the ENOSPC
    test replaces `write`.) `close` flushes and fsyncs before closing;
    `discard` closes without raising, dropping what a full disk refused.
    """

    def __init__(self, path: str):
        self.path = path
        self.file = io.BufferedWriter(io.FileIO(path, "wb"), buffer_size=1 << 20)
        self.bytes = 0
        self.checksum = RunningChecksum()

    def write(self, data) -> int:
        written = self.file.write(data)
        self.checksum.update(data)
        self.bytes += written
        return written

    def cut(self) -> None:
        """End a checksum region: after the IPC header, after each record batch, after the footer."""
        self.checksum.cut()

    def flush(self) -> None:
        self.file.flush()

    def tell(self) -> int:
        return self.bytes

    @property
    def closed(self) -> bool:
        return self.file.closed

    def close(self) -> None:
        if not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()

    def discard(self) -> None:
        """Close the file of a part that is being thrown away, whatever the disk says.

        Closing flushes the buffer first; on a full disk that flush fails
        again. `BufferedWriter.close` closes the file even then (and
        re-raises), so the error is dropped here: the write that failed
        first is the one reported, and the file is deleted next.
        """
        try:
            self.file.close()
        except OSError:  # the same disk error as the one being reported; the descriptor is closed regardless
            pass


class StoreWriter:
    """Write samples into a new store at ``path``; the store appears only when complete.

    Use it as a context manager: a clean exit commits, an exception aborts
    (see the module docstring for the crash-safety protocol)::

        with StoreWriter("train.store", encodings={"image": "jpeg:90"}) as w:
            for batch in pipe:          # {"image": (B, H, W, 3) uint8, "label": (B,) int64}
                w.write(batch)

    The first `write` fixes the structure (dict, tuple, single value) and
    the type of every field; later writes must match.

    Args:
        path: the store directory to create.
        encodings: ``{field: encoding}`` with encodings ``"raw"`` (the
            default: fastest, zero-copy reads), ``"zstd"``, ``"lz4"``
            (Arrow IPC compression of the field's file group),
            ``"jpeg:QUALITY"`` or ``"png"`` (image arrays, encoded per
            sample, decoded on read). Field names are dict keys, ``"0"``,
            ``"1"``, ... for tuples, ``"value"`` for a single array, joined
            with ``/`` when nested.
        rows_per_file: rows per part file (default: about 256 MiB per file).
        rows_per_batch: rows per Arrow record batch, the unit a read copies
            whole or a compressed field decompresses (default: about 16 MiB,
            1 MiB where a field is compressed; at most ``rows_per_file``).
        meta: a JSON-serialisable dict recorded as the manifest's ``meta``
            (how the store was made; labels' names, ...).
        overwrite: replace an existing store at ``path`` (atomically);
            without it an existing ``path`` is an error.
        variable_shape: fields whose arrays vary in shape from sample to
            sample even if the first batch happens to agree (otherwise the
            first batch's shape is fixed, and a different one is an error).

    Raises:
        StoreError: ``path`` exists (without ``overwrite``), bad arguments,
            data that does not match the first batch, or a failed write.

    >>> import numpy as np, tempfile, os
    >>> from feedline.store import StoreWriter, open_store
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "tiny.store")
    >>> with StoreWriter(path) as w:
    ...     w.write({"x": np.zeros((4, 2, 2), np.uint8), "y": np.arange(4)})
    >>> store = open_store(path)
    >>> len(store), store[3]["x"].shape, int(store[3]["y"])
    (4, (2, 2), 3)
    """

    def __init__(self, path, encodings: dict | None = None, rows_per_file: int | None = None, meta: dict | None = None,
                 overwrite: bool = False, *, variable_shape=(), rows_per_batch: int | None = None):
        self.path = os.path.abspath(os.fspath(path))
        self.encodings = {}
        for name, enc in (encodings or {}).items():
            kind, quality = parse_encoding(enc, name)
            self.encodings[str(name)] = f"jpeg:{quality}" if kind == "jpeg" else kind
        for name, rows in (("rows_per_file", rows_per_file), ("rows_per_batch", rows_per_batch)):
            if rows is not None and (isinstance(rows, bool) or not isinstance(rows, int) or rows < 1):
                raise StoreError(f"{name} must be an integer >= 1 or None, got {rows!r}")
        try:
            self.meta = json.loads(json.dumps(meta or {}))
        except (TypeError, ValueError) as e:
            raise StoreError(f"meta must be JSON-serialisable (it goes into the manifest): {e}") from e
        self.overwrite = bool(overwrite)
        self.variable_shape = set(variable_shape)
        if os.path.exists(self.path) and not self.overwrite:
            raise StoreError(f"{self.path!r} already exists; pass overwrite=True to replace it, or choose another path")
        pyarrow()  # fail now, not at the first flush, if pyarrow is missing
        RunningChecksum()  # ... or xxhash (the checksums)
        parent = os.path.dirname(self.path)
        for stale in leftovers(self.path):
            shutil.rmtree(stale, ignore_errors=True)
        self.tmp = f"{self.path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            os.makedirs(parent, exist_ok=True)
            os.mkdir(self.tmp)
        except OSError as e:
            raise StoreError(f"cannot create the store {self.path!r}: making {self.tmp!r} failed: {e}; "
                             f"{_advice(e)}") from e
        self.state = "open"
        self._rows_per_file = rows_per_file
        self._rows_per_batch = rows_per_batch  # (None: planned from the first batch's row size, `_plan_sizes`)
        self._sizes_planned = False
        self._specs: list[FieldSpec] | None = None
        self._structure = None
        self._groups: list[str] = []
        self._schemas: dict = {}
        self._buffer: list = []  # [(rows, [chunk per field])]
        self._buffered = 0
        self._written = 0  # rows in closed record batches
        self._seen = 0  # rows accepted by write()
        self._part_rows = 0
        self._part_batches: list[int] = []
        self._sinks: dict = {}  # group -> (_FileSink, ipc writer) of the open part
        self._parts: list[dict] = []

    # ------------------------------------------------------------ writing
    def write(self, batch) -> None:
        """Add one batch: a dict/tuple of arrays with a leading row axis, or a single array.

        Variable-size fields may be lists (of bytes, arrays, str or
        numbers), one value per row.
        """
        self._check_open()
        structure, leaves = split(batch)
        rows = self._rows_of(leaves)
        if rows == 0:
            return
        if self._specs is None:
            self._start(structure, leaves, rows)
        elif structure != self._structure:
            raise StoreError(
                f"batch with structure {describe(structure)} written to {self.path!r}, whose first batch was "
                f"{describe(self._structure)}; every batch must have the same structure"
            )
        chunks = [normalize(spec, column, rows, self._seen) for spec, (_, column) in zip(self._specs, leaves)]
        if not self._sizes_planned:
            self._plan_sizes(chunks, rows)
        self._seen += rows
        self._buffer.append((rows, chunks))
        self._buffered += rows
        while self._buffered >= self._batch_rows():
            self._flush(self._batch_rows())

    def write_rows(self, rows) -> None:
        """Add samples given one by one (each a dict, tuple, or single value, as the store's samples)."""
        self._check_open()
        rows = list(rows)
        if not rows:
            return
        structure, leaves = split(rows[0])
        names = [name for name, _ in leaves]
        columns = [[] for _ in names]
        for number, row in enumerate(rows):
            row_structure, row_leaves = split(row)
            if row_structure != structure:
                raise StoreError(f"row {self._seen + number} has structure {describe(row_structure)}, row {self._seen} "
                                 f"has {describe(structure)}; every sample must have the same structure")
            for column, (_, value) in zip(columns, row_leaves):
                column.append(value)
        batch = _rebuild_batch(structure, columns)
        self.write(batch)

    def _rows_of(self, leaves) -> int:
        counts = {}
        for name, column in leaves:
            if isinstance(column, np.ndarray) and column.dtype == object and column.ndim != 1:
                raise StoreError(
                    f"field {name!r} holds an object array of shape {column.shape}; a store holds arrays of "
                    "numbers (or lists of bytes, str, numbers or arrays, one per row). Convert it in map()."
                )
            if (isinstance(column, np.ndarray) and column.ndim >= 1) or isinstance(column, list):
                counts[name] = len(column)
            else:
                raise StoreError(
                    f"field {name!r} of the batch is a {type(column).__name__}; write() takes batches "
                    "(arrays with a row axis, or lists with one value per row). Use write_rows() for single samples."
                )
        if len(set(counts.values())) > 1:
            raise StoreError(f"the fields of a batch have different row counts ({counts}); every field needs one value per row")
        return next(iter(counts.values()))

    def _start(self, structure, leaves, rows) -> None:
        names = [name for name, _ in leaves]
        unknown = sorted(set(self.encodings) - set(names))
        if unknown:
            raise StoreError(f"encodings name fields the data does not have: {unknown}; the fields are {names}")
        unknown = sorted(self.variable_shape - set(names))
        if unknown:
            raise StoreError(f"variable_shape names fields the data does not have: {unknown}; the fields are {names}")
        specs = [infer(name, column, rows, self.encodings.get(name, "raw"), name in self.variable_shape) for name, column in leaves]
        columns = [c for spec in specs for c in spec.columns]
        clashes = sorted({c for c in columns if columns.count(c) > 1})
        if clashes:
            raise StoreError(f"fields clash with the shape columns of variable-shape fields: {clashes}; rename the "
                             f"fields that end in {SHAPE_SUFFIX!r}")
        self._specs, self._structure = specs, structure
        self._groups = [g for g in CODECS if any(spec.group == g for spec in specs)]
        pa = pyarrow()
        for group in self._groups:
            fields = [f for spec in specs if spec.group == group for f in arrow_fields(spec)]
            metadata = {
                "feedline.format": FORMAT_NAME,
                "feedline.format_version": str(FORMAT_VERSION),
                "feedline.structure": json.dumps(structure),
                "feedline.fields": json.dumps([s.to_json() for s in specs if s.group == group]),
            }
            self._schemas[group] = pa.schema(fields, metadata=metadata)

    def _plan_sizes(self, chunks, rows) -> None:
        """Rows per record batch and per file, from the bytes of the first batch's rows."""
        row_bytes = max(1, sum(buffered_bytes(spec, chunk) for spec, chunk in zip(self._specs, chunks)) // rows)
        target = BATCH_BYTES_COMPRESSED if any(g != "raw" for g in self._groups) else BATCH_BYTES
        per_batch = self._rows_per_batch or max(1, target // row_bytes)
        if self._rows_per_file is not None:
            per_batch = min(per_batch, self._rows_per_file)
        else:
            self._rows_per_file = max(per_batch, FILE_BYTES // row_bytes // per_batch * per_batch)
        self._rows_per_batch, self._sizes_planned = per_batch, True

    def _batch_rows(self) -> int:
        """Rows in the next record batch: a full batch, cut at the end of the current part."""
        return min(self._rows_per_batch, self._rows_per_file - self._part_rows)

    def _take(self, count: int) -> list:
        taken = [[] for _ in self._specs]
        need = count
        while need:
            rows, chunks = self._buffer[0]
            if rows <= need:
                self._buffer.pop(0)
                part = chunks
                need -= rows
            else:
                part = [c[:need] for c in chunks]
                self._buffer[0] = (rows - need, [c[need:] for c in chunks])
                need = 0
            for column, chunk in zip(taken, part):
                column.append(chunk)
        self._buffered -= count
        return taken

    def _flush(self, count: int) -> None:
        pa = pyarrow()
        taken = self._take(count)
        arrays = {}
        for spec, chunks in zip(self._specs, taken):
            for name, array in zip(spec.columns, to_arrow(spec, chunks)):
                arrays[name] = array
        if not self._sinks:
            self._open_part()
        for group, (sink, writer) in self._sinks.items():
            schema = self._schemas[group]
            batch = pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)
            try:
                writer.write_batch(batch)
            except OSError as e:
                self._fail(sink.path, e)
            sink.cut()
        self._written += count
        self._part_rows += count
        self._part_batches.append(count)
        if self._part_rows == self._rows_per_file:
            self._close_part()

    def _open_part(self) -> None:
        pa, ipc = pyarrow(), pyarrow_ipc()
        number = len(self._parts)
        for group in self._groups:
            path = os.path.join(self.tmp, *file_name(number, group).split("/"))
            options = ipc.IpcWriteOptions(compression=CODECS[group], use_threads=False)
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                sink = _FileSink(path)
            except OSError as e:
                self._fail(path, e)
            try:
                writer = ipc.new_file(pa.PythonFile(sink, mode="w"), self._schemas[group], options=options)
            except OSError as e:
                sink.discard()
                self._fail(path, e)
            sink.cut()  # the head: whatever the IPC writer put before the first record batch
            self._sinks[group] = (sink, writer)

    def _close_part(self) -> None:
        files = {}
        for group, (sink, writer) in self._sinks.items():
            try:
                writer.close()
                sink.cut()  # the tail: the footer
                sink.close()
            except OSError as e:
                self._fail(sink.path, e)
            files[group] = {"name": file_name(len(self._parts), group), "bytes": os.path.getsize(sink.path),
                            "checksums": sink.checksum.entry()}
        start = self._written - self._part_rows
        self._parts.append({"rows": [start, self._written], "batches": self._part_batches, "files": files})
        self._sinks, self._part_rows, self._part_batches = {}, 0, []

    def _fail(self, path: str, error: OSError):
        self.abort()
        left = ("its temporary directory is removed" if not os.path.exists(self.tmp)
                else f"delete its temporary directory {self.tmp!r} by hand")
        raise StoreError(
            f"writing {path!r} failed: {error}. The store at {self.path!r} was not written ({left}); "
            f"{_advice(error)}"
        ) from error

    # ------------------------------------------------------------ ending
    def commit(self) -> str:
        """Write what is buffered and the manifest, then move the store into place; returns its path."""
        self._check_open()
        while self._buffered:
            self._flush(min(self._buffered, self._batch_rows()))
        if self._sinks:
            self._close_part()
        manifest = self._manifest()
        manifest_path = os.path.join(self.tmp, MANIFEST)
        try:
            with open(manifest_path + ".part", "w", encoding="utf-8") as f:
                json.dump(manifest, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            os.replace(manifest_path + ".part", manifest_path)
            for group in self._groups:
                _fsync_dir(os.path.join(self.tmp, group))
            _fsync_dir(self.tmp)
        except OSError as e:
            self._fail(manifest_path, e)
        if os.path.exists(self.path):
            if not self.overwrite:
                self.abort()
                raise StoreError(f"{self.path!r} appeared while the store was being written; pass overwrite=True to replace it")
            old = f"{self.path}.old-{os.getpid()}-{secrets.token_hex(4)}"
            os.rename(self.path, old)
            os.rename(self.tmp, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(self.tmp, self.path)
        _fsync_dir(os.path.dirname(self.path))
        self.state = "committed"
        return self.path

    def _manifest(self) -> dict:
        from .. import __version__

        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "created_by": f"feedline {__version__}, pyarrow {pyarrow().__version__}",
            "num_samples": self._written,
            "structure": self._structure,
            "fields": [spec.to_json() for spec in self._specs or []],
            "groups": self._groups,
            "files": self._parts,
            "checksum": ALGORITHM,
            "meta": self.meta,
        }
        manifest["manifest_checksum"] = manifest_digest(manifest)
        return manifest

    def abort(self) -> None:
        """Drop everything written so far (the temporary directory); ``path`` is left as it was."""
        if self.state != "open":
            return
        self.state = "aborted"
        for sink, writer in self._sinks.values():
            try:
                writer.close()
            except (OSError, ValueError):  # the part is being thrown away; the error that led here is what counts
                pass
            sink.discard()
        self._sinks = {}
        self._buffer = []
        shutil.rmtree(self.tmp, ignore_errors=True)
        if os.path.exists(self.tmp):
            warnings.warn(f"could not remove the temporary directory {self.tmp!r}; delete it by hand", RuntimeWarning, stacklevel=2)

    def _check_open(self) -> None:
        if self.state != "open":
            raise StoreError(f"the writer of {self.path!r} is {self.state}; start a new StoreWriter to write again")

    @property
    def rows(self) -> int:
        """Rows accepted so far."""
        return self._seen

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.state != "open":
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"StoreWriter({self.path!r}, {self._seen} rows, {self.state})"


def _advice(error: OSError) -> str:
    """What to do after a failed write: a full disk (or quota) needs space; anything else, the error's own fix."""
    if error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "the disk is full: free disk space, or choose a path on another disk, and write the store again."
    return "fix the cause above (or choose another path) and write the store again."


def _rebuild_batch(structure, columns):
    from ._structure import rebuild, skeleton_of

    return rebuild(skeleton_of(structure), columns)
