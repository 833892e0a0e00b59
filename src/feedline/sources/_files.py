"""`from_files`: file paths (with optional labels), held compactly."""

from __future__ import annotations

import glob
import os

import numpy as np

from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["FileSource", "from_files"]


class FileSource(Source):
    """Sample ``i`` is a path (``str``), or ``(path, label)`` with labels.

    Paths are stored as one UTF-8 byte array plus an offsets array, not as a
    Python list: a million paths cost one buffer, which reaches workers
    through shared memory once and does not grow as workers touch it (the
    copy-on-read growth of lists of ``str`` objects).
    """

    def __init__(self, paths, labels=None):
        encoded = [os.fsencode(p) for p in paths]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def path(self, index: int) -> str:
        start, stop = self.offsets[index], self.offsets[index + 1]
        return os.fsdecode(self.blob[start:stop].tobytes())

    def read(self, index: int):
        if self.labels is None:
            return self.path(index)
        return self.path(index), self.labels[index]

    def file_of(self, index: int) -> str:
        return self.path(index)

    def where(self, index: int) -> str:
        return self.path(index)

    def describe(self) -> str:
        first = self.path(0) if len(self) else ""
        return f"from_files({len(self)} files, first {first!r}{', labelled' if self.labels is not None else ''})"


def _expand(pattern_or_paths) -> list:
    if isinstance(pattern_or_paths, (str, os.PathLike)):
        pattern = os.fspath(pattern_or_paths)
        if os.path.isdir(pattern):
            pattern = os.path.join(pattern, "**", "*")
        paths = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not paths:
            raise FileNotFoundError(
                f"from_files(): no files match {pattern!r}; check the pattern "
                "(use ** with a recursive pattern) or pass a list of paths"
            )
        return paths
    paths = [os.fspath(p) for p in pattern_or_paths]
    if not paths:
        raise ValueError("from_files() got an empty list of paths")
    return paths


def from_files(pattern_or_paths, labels=None) -> Pipeline:
    """A pipeline over file paths: a glob pattern, a directory, or a list.

    A pattern or directory is expanded and sorted, so the order (and every
    shuffle) is the same on every machine. ``labels`` is a sequence aligned
    with the (sorted) paths, or a function ``label(path)``; with labels a
    sample is ``(path, label)``. Reading the file is the job of ``map()``.

    Raises:
        FileNotFoundError: a pattern matches no file.
        ValueError: labels of the wrong length.
    """
    paths = _expand(pattern_or_paths)
    if labels is not None:
        if callable(labels):
            labels = [labels(p) for p in paths]
        labels = np.asarray(labels)
        if len(labels) != len(paths):
            raise ValueError(
                f"from_files(): {len(labels)} labels for {len(paths)} files; give one label "
                "per file, in the order of the sorted paths, or a function label(path)"
            )
    return Pipeline(FileSource(paths, labels))
