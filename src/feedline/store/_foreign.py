"""Reading data users already have, without converting: Hugging Face ``datasets`` and Parquet.

`from_hf_dataset` memory-maps the Arrow files of ``save_to_disk`` (random
access in O(1)); `from_parquet` reads by row group (cheap in order, slow
when shuffled). Samples are dicts ``{column: value}`` converted as the store
converts them; both sources pickle as file names and row counts. Details:
docs/store.md, "Reading what you already have".
"""

from __future__ import annotations

import bisect
import glob
import json
import os
import threading

import numpy as np

from ..pipeline._pipeline import Pipeline
from ..sources._base import Source
from ._deps import pyarrow, pyarrow_ipc, pyarrow_parquet
from ._errors import StoreError
from ._schema import common_columns

__all__ = ["ArrowFilesSource", "ParquetSource", "from_hf_dataset", "from_parquet", "value_reader"]

_ROW_GROUP_CACHE = 2  # decoded row groups kept per worker: enough for reading in order


# ------------------------------------------------------------ Arrow values
def _fixed_shape(typ):
    """(shape, value type) of nested fixed-size lists of a primitive type, else None."""
    pa = pyarrow()
    shape = []
    while pa.types.is_fixed_size_list(typ):
        shape.append(typ.list_size)
        typ = typ.value_type
    if shape and (pa.types.is_integer(typ) or pa.types.is_floating(typ)):
        return tuple(shape), typ
    return None


def _primitive_numpy(typ):
    pa = pyarrow()
    if pa.types.is_integer(typ) or pa.types.is_floating(typ):
        return np.dtype(typ.to_pandas_dtype())
    return None


def value_reader(array):
    """A function ``row -> value`` over one Arrow array (a column of one record batch).

    A null reads as ``None`` whatever the column's type, and a list that
    holds a null item stays a Python list (with ``None`` there): a null is
    never turned into a number (NaN, 0) or an array.
    """
    pa = pyarrow()
    typ = array.type
    read = _dense_reader(array, pa) if _holds_no_nulls_below(array, pa) else None
    if read is None:
        leaf = typ
        while pa.types.is_list(leaf) or pa.types.is_large_list(leaf) or pa.types.is_fixed_size_list(leaf):
            leaf = leaf.value_type
        dtype = _primitive_numpy(leaf) if leaf is not typ else None
        if dtype is None:
            return lambda i: array[i].as_py()
        return lambda i: _as_array(array[i].as_py(), dtype)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        return lambda i: None if nulls[i] else read(i)
    return read


def _holds_no_nulls_below(array, pa) -> bool:
    """Whether nulls, if any, are whole rows: the values of a list column hold none."""
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return array.values.null_count == 0
    return not pa.types.is_fixed_size_list(array.type) or (array.null_count == 0 and array.flatten().null_count == 0)


def _dense_reader(array, pa):
    """The NumPy reader of a column of numbers, a (nested) fixed-size list of them, or a list of them; else None."""
    typ = array.type
    rows = len(array)
    fixed = _fixed_shape(typ)
    if fixed is not None:
        flat = array
        while pa.types.is_fixed_size_list(flat.type):
            flat = flat.flatten()
        return flat.to_numpy(zero_copy_only=True).reshape((rows, *fixed[0])).__getitem__
    if _primitive_numpy(typ) is not None:
        dense = array.fill_null(0) if array.null_count else array  # null rows are masked by the caller
        return dense.to_numpy(zero_copy_only=True).__getitem__
    if (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and _primitive_numpy(typ.value_type) is not None:
        offsets = array.offsets.to_numpy()
        values = array.values.to_numpy(zero_copy_only=True)
        return lambda i: values[offsets[i]:offsets[i + 1]]
    return None


def _as_array(value, dtype):
    """Nested lists of numbers as an array of the column's dtype; ragged or null-holding ones stay lists."""
    if value is None:
        return None
    try:
        values = np.asarray(value)
    except ValueError:  # ragged
        return value
    if values.dtype == object:  # a null (None) among the numbers
        return value
    return values.astype(dtype, copy=False)


class _Batches:
    """Record batches of one table, with row lookup and per-column readers built on first use."""

    def __init__(self, batches, columns, decoders):
        self.batches = [b for b in batches if b.num_rows]
        self.starts = []
        row = 0
        for b in self.batches:
            self.starts.append(row)
            row += b.num_rows
        self.columns, self.decoders = columns, decoders
        self.readers: dict = {}

    def row(self, index: int) -> dict:
        number = bisect.bisect_right(self.starts, index) - 1
        local = index - self.starts[number]
        readers = self.readers.get(number)
        if readers is None:
            batch = self.batches[number]
            readers = self.readers[number] = [(name, value_reader(batch.column(name))) for name in self.columns]
        sample = {}
        for name, read in readers:
            value = read(local)
            decode = self.decoders.get(name)
            sample[name] = decode(value) if decode is not None else value
        return sample


def _decode_image(value):
    from ..vision import decode

    if isinstance(value, dict):
        return decode(value["bytes"] if value.get("bytes") is not None else value["path"])
    return value


# ------------------------------------------------------------ Hugging Face
def _is_stream(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(6) != b"ARROW1"


def _open_arrow_table(path: str):
    """The Arrow table in ``path`` (IPC stream or file format), memory-mapped: no data is read."""
    pa, ipc = pyarrow(), pyarrow_ipc()
    try:
        with pa.memory_map(path) as mapped:
            whole = mapped.read_buffer()
        source = pa.BufferReader(whole)
        if _is_stream(path):
            return ipc.open_stream(source).read_all()
        return ipc.open_file(source).read_all()
    except (OSError, pa.ArrowException) as e:
        raise StoreError(f"cannot read {path!r} as an Arrow file ({e}); is it a Hugging Face datasets Arrow file?") from e


def _hf_files(path: str) -> tuple[list[str], dict]:
    """The Arrow files of a saved dataset (and its features from dataset_info.json)."""
    if os.path.isfile(path):
        return [path], {}
    if not os.path.isdir(path):
        raise StoreError(f"from_hf_dataset(): no file or folder {path!r}")
    if os.path.exists(os.path.join(path, "dataset_dict.json")):
        splits = sorted(d for d in os.listdir(path) if os.path.isdir(os.path.join(path, d)))
        raise StoreError(f"{path!r} is a DatasetDict with splits {splits}; pass one split's folder, e.g. {os.path.join(path, splits[0]) if splits else path!r}")
    features = {}
    info = os.path.join(path, "dataset_info.json")
    if os.path.exists(info):
        with open(info, encoding="utf-8") as f:
            features = json.load(f).get("features") or {}
    state = os.path.join(path, "state.json")
    if os.path.exists(state):
        with open(state, encoding="utf-8") as f:
            files = [os.path.join(path, entry["filename"]) for entry in json.load(f).get("_data_files", [])]
    else:
        files = sorted(glob.glob(os.path.join(path, "*.arrow")))
    if not files:
        raise StoreError(f"{path!r} holds no Arrow files; give the folder Dataset.save_to_disk wrote, or a .arrow file")
    return files, features


class ArrowFilesSource(Source):
    """Rows of Arrow IPC files (stream or file format), e.g. a saved Hugging Face dataset."""

    def __init__(self, files: list[str], rows: list[int], columns: list[str], image_columns: list[str]):
        self.files, self.rows, self.columns, self.image_columns = files, rows, columns, image_columns
        self._setup()

    def _setup(self) -> None:
        self.starts = [0]
        for n in self.rows:
            self.starts.append(self.starts[-1] + n)
        self._tables: dict = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {k: getattr(self, k) for k in ("files", "rows", "columns", "image_columns")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def __len__(self) -> int:
        return self.starts[-1]

    def _table(self, number: int) -> _Batches:
        table = self._tables.get(number)
        if table is None:
            with self._lock:
                table = self._tables.get(number)
                if table is None:
                    arrow = _open_arrow_table(self.files[number])
                    decoders = {name: _decode_image for name in self.image_columns}
                    table = self._tables[number] = _Batches(arrow.to_batches(), self.columns, decoders)
        return table

    def read(self, index: int) -> dict:
        number = bisect.bisect_right(self.starts, index) - 1
        return self._table(number).row(index - self.starts[number])

    def where(self, index: int) -> str:
        number = bisect.bisect_right(self.starts, index) - 1
        return f"{self.files[number]} row {index - self.starts[number]}"

    def describe(self) -> str:
        return f"from_hf_dataset({os.path.dirname(self.files[0])!r}, {len(self)} rows, columns {self.columns})"


def from_hf_dataset(path, columns=None, *, decode_images: bool = True) -> Pipeline:
    """A pipeline over a Hugging Face ``datasets`` dataset on disk, read in place.

    Args:
        path: the folder ``Dataset.save_to_disk`` wrote (one split), a
            folder of ``.arrow`` cache files, or one ``.arrow`` file.
        columns: the columns to read (default: all).
        decode_images: decode columns of the ``Image`` feature to HWC uint8
            arrays (`feedline.vision.decode`); False keeps their
            ``{"bytes": ..., "path": ...}`` dicts.

    Returns:
        A pipeline whose samples are dicts ``{column: value}`` (see the
        module docstring for the value types).

    Raises:
        StoreError: no such folder, a ``DatasetDict`` folder (pick a
            split), no Arrow files, a column that does not exist, or files
            whose columns or column types differ (both files named).

    >>> import tempfile
    >>> import datasets
    >>> import feedline as fl
    >>> folder = tempfile.mkdtemp()
    >>> datasets.Dataset.from_dict({"text": ["a", "b", "c"], "label": [0, 1, 0]}).save_to_disk(folder)
    >>> pipe = fl.from_hf_dataset(folder, columns=["label"])
    >>> len(pipe), [int(sample["label"]) for sample in pipe]
    (3, [0, 1, 0])
    """
    files, features = _hf_files(os.fspath(path))
    rows, schemas = [], []
    for file in files:
        table = _open_arrow_table(file)
        rows.append(table.num_rows)
        schemas.append(table.schema)
    columns = common_columns(schemas, files, columns, f"from_hf_dataset({os.fspath(path)!r})")
    images = [c for c in columns if isinstance(features.get(c), dict) and features[c].get("_type") == "Image" and decode_images]
    return Pipeline(ArrowFilesSource([os.path.abspath(f) for f in files], rows, columns, images))


# ------------------------------------------------------------ Parquet
def _remote_parquet_files(path_or_glob, storage_options) -> list[str]:
    """The Parquet files a URL (a file, a glob, a folder: every ``*.parquet`` below it) or a list of URLs names."""
    from ..sources._shard_files import expand_names

    given = list(path_or_glob) if isinstance(path_or_glob, (list, tuple)) else [path_or_glob]
    names = []
    for name in map(os.fspath, given):
        if not any(c in name for c in "*?[{") and not name.lower().endswith(".parquet"):
            name = name.rstrip("/") + "/**/*.parquet"  # a folder, as a local folder is read
        try:
            names.extend(expand_names(name, "from_parquet", storage_options))
        except FileNotFoundError as e:
            raise StoreError(f"{e}; give a file, a folder, a glob or a list") from None
    return names


def _parquet_files(path_or_glob) -> list[str]:
    if isinstance(path_or_glob, (list, tuple)):
        files = [os.fspath(p) for p in path_or_glob]
    else:
        pattern = os.fspath(path_or_glob)
        if os.path.isdir(pattern):
            pattern = os.path.join(pattern, "**", "*.parquet")
        files = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
    if not files:
        raise StoreError(f"from_parquet(): no Parquet files match {path_or_glob!r}; give a file, a folder, a glob or a list")
    return [os.path.abspath(f) for f in files]


class ParquetSource(Source):
    """Rows of Parquet files, read a row group at a time (see the module docstring for the cost)."""

    def __init__(self, files: list[str], groups: list[list[int]], columns: list[str], remote=None):
        self.files, self.groups, self.columns = files, groups, columns
        self.remote = remote  # the `ShardFiles` (cache, options) of URLs, else None
        self._setup()

    def _setup(self) -> None:
        self.starts, self.where_group = [], []
        row = 0
        for number, sizes in enumerate(self.groups):
            for group, size in enumerate(sizes):
                if size:
                    self.starts.append(row)
                    self.where_group.append((number, group))
                    row += size
        self.length = row
        self._cache: dict = {}  # (file, group) -> _Batches, the most recent _ROW_GROUP_CACHE
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"files": self.files, "groups": self.groups, "columns": self.columns, "remote": self.remote}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def __len__(self) -> int:
        return self.length

    def _row_group(self, key) -> _Batches:
        decoded = self._cache.get(key)
        if decoded is not None:
            return decoded
        pa = pyarrow()
        path = self._shown(key[0])
        try:
            with _open_parquet(self.remote, key[0], self.files[key[0]]) as parquet:
                table = parquet.read_row_group(key[1], columns=self.columns, use_threads=False)
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"cannot read row group {key[1]} of {path!r}: {_scrub(e)}") from e
        decoded = _Batches(table.to_batches(), self.columns, {})
        with self._lock:
            while len(self._cache) >= _ROW_GROUP_CACHE:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = decoded
        return decoded

    def read(self, index: int) -> dict:
        number = bisect.bisect_right(self.starts, index) - 1
        return self._row_group(self.where_group[number]).row(index - self.starts[number])

    def where(self, index: int) -> str:
        number = bisect.bisect_right(self.starts, index) - 1
        file, group = self.where_group[number]
        return f"{self._shown(file)} row group {group}, row {index - self.starts[number]}"

    def _shown(self, number: int) -> str:
        return self.remote.shown(number) if self.remote is not None else self.files[number]

    def take_counters(self) -> dict:
        return self.remote.take_counts() if self.remote is not None else {}

    def describe(self) -> str:
        return f"from_parquet({len(self.files)} files, {len(self)} rows, {sum(len(g) for g in self.groups)} row groups, columns {self.columns})"


def _scrub(error) -> str:
    from ..sources._shard_files import redact

    return redact(str(error))


def _open_parquet(remote, number: int, path: str):
    """A `pyarrow.parquet.ParquetFile` of file ``number``: mapped from local disk, or from the shard cache for a URL.

    A URL with caching off (or larger than the cache) is read through fsspec, by the ranges Parquet asks for.
    """
    pq = pyarrow_parquet()
    if remote is None:
        return pq.ParquetFile(path, memory_map=True)
    parquet = remote.open_cached(number, opener=lambda local: pq.ParquetFile(local, memory_map=True))
    return parquet if parquet is not None else pq.ParquetFile(remote.open(number))


def from_parquet(path_or_glob, columns=None, *, storage_options: dict | None = None, cache_dir=None,
                 cache_limit=None) -> Pipeline:
    """A pipeline over the rows of Parquet files, read in place.

    Random access is by row group: a read decodes the row's whole row
    group (of ``columns``), and each worker keeps the last two; so reading
    in order is cheap, and a shuffled epoch over files with large row
    groups is not (see the module docstring; ``feedline convert`` makes a
    store from Parquet for shuffled training).

    Args:
        path_or_glob: a file, a folder (all ``*.parquet`` below it), a glob
            pattern, or a list of files; sorted, so the order is stable.
            URLs (``s3://``, ``gs://``, ``https://``...) are read through
            fsspec: each file is downloaded once into the local shard cache
            that remote stores use, and mapped from there.
        columns: the columns to read (default: all).
        storage_options: fsspec options for URLs (endpoint, credentials; never shown in messages).
        cache_dir: where remote files are cached (default: the remote stores'
            cache); False reads them through fsspec by ranges, caching nothing.
        cache_limit: bytes (or ``"20GiB"``) the cache may take (default ``"50GiB"``).

    Returns:
        A pipeline whose samples are dicts ``{column: value}``.

    Raises:
        StoreError: no files match, a file is not Parquet, a column is
            missing, or a column's type or the set of columns differs between
            two files (both named; a column all null in one file is accepted).

    >>> import os, tempfile, pyarrow as pa, pyarrow.parquet as pq, feedline as fl
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> pq.write_table(pa.table({"x": [1, 2, 3], "label": ["a", "b", "c"]}), os.path.join(tmp.name, "part-0.parquet"))
    >>> [(int(row["x"]), row["label"]) for row in fl.from_parquet(os.path.join(tmp.name, "*.parquet"))]
    [(1, 'a'), (2, 'b'), (3, 'c')]
    """
    from ..sources._shard_files import ShardFiles, is_url, redact

    pa = pyarrow()
    given = path_or_glob if isinstance(path_or_glob, (list, tuple)) else [path_or_glob]
    remote = None
    if any(is_url(os.fspath(p)) for p in given):
        files = _remote_parquet_files(path_or_glob, storage_options)
        remote = ShardFiles(files, storage_options, cache_dir=cache_dir, cache_limit=cache_limit)
    elif storage_options is not None:
        raise ValueError("from_parquet(storage_options=...) is for URLs (s3://, https://...); a local path takes none")
    else:
        files = _parquet_files(path_or_glob)
    groups, schemas = [], []
    for number, path in enumerate(files):
        try:
            with _open_parquet(remote, number, path) as parquet:
                metadata = parquet.metadata
        except (OSError, pa.ArrowException) as e:
            raise StoreError(f"cannot read {redact(path)!r} as Parquet: {_scrub(e)}") from e
        groups.append([metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)])
        schemas.append(metadata.schema.to_arrow_schema())
    shown = [redact(f) for f in files]
    given_name = path_or_glob if remote is None else redact(str(path_or_glob))
    columns = common_columns(schemas, shown, columns, f"from_parquet({given_name!r})")
    return Pipeline(ParquetSource(files, groups, columns, remote))
