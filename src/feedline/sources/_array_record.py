"""`from_array_record`: the records of ArrayRecord files (Grain's format), by index.

ArrayRecord files carry their own index of records (a footer), so random
access is native: the consumer reads each file's record count, workers
open their own readers (``array_record``'s C++ reader, thread-safe, with
read-ahead off because the reads follow feedline's plan, not file order).
The reader opens local paths only: remote files (URLs) are downloaded
once into the local shard cache (`ShardFiles`) and opened there, in each
process that reads them. Details: docs/formats.md.
"""

from __future__ import annotations

import os
import re
import threading
import warnings

import numpy as np

from .._optional import require
from ..pipeline._pipeline import Pipeline
from ._base import Source
from ._shard_files import ShardFiles, ShardFormatError, expand_names, is_url, redact
from ._tfrecord import resolve_decode

__all__ = ["ArrayRecordSource", "from_array_record"]

SUFFIXES = (".array_record", ".arecord")  # what a folder of ArrayRecord files holds
_RANDOM_ACCESS = "readahead_buffer_size:0"  # as Grain opens them: no read-ahead for reads in plan order


def _module():
    return require("array_record.python.array_record_module", "array-record", "from_array_record()", package="array-record")


def _open(path: str, options: str = _RANDOM_ACCESS):
    """A reader of ``path``; the C++ reader reports a bad file by its state (and on close), not by raising."""
    try:
        reader = _module().ArrayRecordReader(path, options)
        if reader.ok():
            return reader
        reader.close()  # raises the reader's status
        problem = "the reader reports an error"
    except (RuntimeError, ValueError, OSError) as e:
        problem = str(e)
    raise ShardFormatError(f"{path}: cannot read as an ArrayRecord file ({problem}); is it damaged, or another format?")


def _open_file(files, number: int, path: str, options: str = _RANDOM_ACCESS):
    """A reader of file ``number``: a local path as is, a URL from the shard cache (downloaded first if needed)."""
    if files is None or not is_url(path):
        return _open(path, options)
    reader = files.open_cached(number, opener=lambda local: _open(local, options))
    if reader is None:
        raise ValueError(f"from_array_record(): {files.shown(number)} is larger than the whole cache_limit, and the "
                         "ArrayRecord reader opens local files only; raise cache_limit (e.g. cache_limit='50GiB')")
    return reader


class ArrayRecordSource(Source):
    """Sample ``i`` is the ``i``-th record of the files, in file order (bytes, or decoded)."""

    def __init__(self, paths: list[str], counts: list[int], decode, files: ShardFiles | None = None):
        self.paths, self.counts, self.decode, self.files = paths, counts, decode, files
        self._setup()

    def _setup(self) -> None:
        self.starts = np.zeros(len(self.counts), dtype=np.int64)
        np.cumsum(self.counts[:-1], out=self.starts[1:])
        self._readers: dict = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"paths": self.paths, "counts": self.counts, "decode": self.decode, "files": self.files}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def __len__(self) -> int:
        return int(sum(self.counts))

    def _locate(self, index: int) -> tuple[int, int]:
        number = int(np.searchsorted(self.starts, index, side="right")) - 1
        return number, index - int(self.starts[number])

    def _reader(self, number: int):
        reader = self._readers.get(number)
        if reader is None:
            with self._lock:
                reader = self._readers.get(number)
                if reader is None:
                    reader = self._readers[number] = _open_file(self.files, number, self.paths[number])
        return reader

    def take_counters(self) -> dict:
        return self.files.take_counts() if self.files is not None else {}

    def read(self, index: int):
        number, record = self._locate(index)
        try:
            data = self._reader(number).read([record])[0]
        except (RuntimeError, ValueError, OSError) as e:
            raise ShardFormatError(f"{self.where(index)}: cannot be read ({e}); the file may be damaged") from e
        if self.decode is None:
            return data
        try:
            return self.decode(data)
        except Exception as e:
            raise ShardFormatError(f"{self.where(index)}: cannot be decoded ({e}); pass decode=None for the record's bytes") from e

    def where(self, index: int) -> str:
        number, record = self._locate(index)
        return f"{self._shown(number)} record {record}"

    def _shown(self, number: int) -> str:
        return self.files.shown(number) if self.files is not None else self.paths[number]

    def describe(self) -> str:
        return f"from_array_record({len(self.paths)} files, {len(self)} records, first {self._shown(0)!r})"


def from_array_record(paths, *, decode=None, storage_options: dict | None = None, cache_dir=None,
                      cache_limit=None) -> Pipeline:
    """A pipeline over the records of ArrayRecord files (as Grain reads them), by index.

    Args:
        paths: a file, a list of files (kept in order), a glob pattern, a
            folder (sorted) or brace ranges; URLs (``s3://``, ``https://``)
            are downloaded once into the local shard cache (the reader
            opens local files only) and read from there.
        decode: None: each sample is the record's ``bytes``; ``"example"``:
            a serialized ``tf.train.Example`` becomes a dict (as in
            `from_tfrecord`); or a function ``bytes -> sample``.
        storage_options: fsspec options for URLs (endpoint, credentials).
        cache_dir: where remote files are cached (default: the remote
            stores' cache, ``$FEEDLINE_CACHE_DIR`` or ``~/.cache/feedline/stores``).
        cache_limit: bytes (or ``"20GiB"``) the cache may take (default
            ``"50GiB"``); each remote file must fit in it.

    Raises:
        FileNotFoundError: no file matches.
        ValueError: ``cache_dir=False`` with URLs (this reader needs local files), or a remote file
            larger than ``cache_limit``.
        ShardFormatError: a file is not ArrayRecord or is damaged (names the file and record).
        ImportError: ``array-record`` is missing: ``pip install 'feedline[array-record]'``.

    >>> import os, tempfile
    >>> import feedline as fl
    >>> from array_record.python.array_record_module import ArrayRecordWriter
    >>> path = os.path.join(tempfile.mkdtemp(), "train.array_record")
    >>> writer = ArrayRecordWriter(path, "group_size:1")  # one record a chunk: reads by index stay cheap
    >>> for word in (b"alpha", b"beta", b"gamma"):
    ...     writer.write(word)
    >>> writer.close()
    >>> pipe = fl.from_array_record(path, decode=bytes.decode)
    >>> len(pipe), list(pipe)
    (3, ['alpha', 'beta', 'gamma'])
    """
    decoder = resolve_decode(decode, "from_array_record")
    names = expand_names(paths, "from_array_record", storage_options, SUFFIXES)
    remote = [n for n in names if is_url(n)]
    if remote and cache_dir is False:
        raise ValueError(f"from_array_record(): {redact(remote[0])!r} is a URL and cache_dir=False, but the ArrayRecord "
                         "reader opens local files only; leave cache_dir unset (or name a folder) to download into the cache")
    names = [n if is_url(n) else os.path.abspath(n) for n in names]
    files = ShardFiles(names, storage_options, cache_dir=cache_dir, cache_limit=cache_limit) if remote else None
    counts, loose = [], []
    for number, name in enumerate(names):
        reader = _open_file(files, number, name, "")
        name = redact(name)
        try:
            counts.append(int(reader.num_records()))
            group = re.search(r"group_size:(\d+)", reader.writer_options_string() or "")
            if group and group.group(1) != "1":
                loose.append((name, group.group(1)))
        finally:
            reader.close()
    if loose:
        warnings.warn(
            f"from_array_record(): {len(loose)} file(s) were written with group_size > 1 (e.g. {loose[0][0]!r}: {loose[0][1]}); "
            "each random read then decodes a whole group. Write them with options 'group_size:1' for fast shuffled reads.",
            RuntimeWarning, stacklevel=2,
        )
    return Pipeline(ArrayRecordSource(names, counts, decoder, files))
