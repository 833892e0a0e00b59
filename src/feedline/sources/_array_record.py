"""`from_array_record`: the records of ArrayRecord files (Grain's format), by index.

ArrayRecord files carry their own index of records (a footer), so random
access is native: the consumer reads each file's record count, workers
open their own readers (``array_record``'s C++ reader, thread-safe, with
read-ahead off because the reads follow feedline's plan, not file order).
The reader opens local paths only. Details: docs/formats.md.
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
from ._shard_files import ShardFormatError, expand_names, is_url
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


class ArrayRecordSource(Source):
    """Sample ``i`` is the ``i``-th record of the files, in file order (bytes, or decoded)."""

    def __init__(self, paths: list[str], counts: list[int], decode):
        self.paths, self.counts, self.decode = paths, counts, decode
        self._setup()

    def _setup(self) -> None:
        self.starts = np.zeros(len(self.counts), dtype=np.int64)
        np.cumsum(self.counts[:-1], out=self.starts[1:])
        self._readers: dict = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"paths": self.paths, "counts": self.counts, "decode": self.decode}

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
                    reader = self._readers[number] = _open(self.paths[number])
        return reader

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
        return f"{self.paths[number]} record {record}"

    def describe(self) -> str:
        return f"from_array_record({len(self.paths)} files, {len(self)} records, first {self.paths[0]!r})"


def from_array_record(paths, *, decode=None) -> Pipeline:
    """A pipeline over the records of ArrayRecord files (as Grain reads them), by index.

    Args:
        paths: a file, a list of files (kept in order), a glob pattern, a
            folder (sorted) or brace ranges; local files only (the
            ``array_record`` reader opens paths itself: copy remote files
            to local disk first).
        decode: None: each sample is the record's ``bytes``; ``"example"``:
            a serialized ``tf.train.Example`` becomes a dict (as in
            `from_tfrecord`); or a function ``bytes -> sample``.

    Raises:
        FileNotFoundError: no file matches.
        ValueError: a URL was given.
        ShardFormatError: a file is not ArrayRecord or is damaged (names the file and record).
        ImportError: ``array-record`` is missing: ``pip install 'feedline[array-record]'``.
    """
    decoder = resolve_decode(decode, "from_array_record")
    names = expand_names(paths, "from_array_record", suffixes=SUFFIXES)
    remote = [n for n in names if is_url(n)]
    if remote:
        raise ValueError(f"from_array_record(): {remote[0]!r} is a URL, but the ArrayRecord reader opens local files only; "
                         "copy the files to local disk first (e.g. fsspec's get) and pass the local paths")
    names = [os.path.abspath(n) for n in names]
    counts, loose = [], []
    for name in names:
        reader = _open(name, "")
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
    return Pipeline(ArrayRecordSource(names, counts, decoder))
