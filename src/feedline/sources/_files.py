"""`from_files`: file paths (with optional labels), held compactly."""

from __future__ import annotations

import glob
import os
import warnings

import numpy as np

from .._fingerprint import digest
from .._folders import AUDIO_EXTENSIONS, IMAGE_EXTENSIONS, labels_from_folders
from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["FileSource", "from_files"]


class FileSource(Source):
    """Sample ``i`` is a path (``str``), or ``(path, label)`` with labels.

    Paths are stored as one UTF-8 byte array plus an offsets array, not as a
    Python list: a million paths cost one buffer, which reaches workers
    through shared memory once and does not grow as workers touch it (the
    copy-on-read growth of lists of ``str`` objects).

    Attributes:
        class_names: with ``labels="parent"``, the class folder names in
            label order (label ``i`` is ``class_names[i]``); else None.
    """

    def __init__(self, paths, labels=None, class_names=None):
        encoded = [os.fsencode(p) for p in paths]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        self.offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.offsets[1:])
        self.blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.labels = labels
        self.class_names = class_names

    def identity(self) -> str:
        return digest([self.offsets, self.blob, self.labels])  # the paths and labels

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
        labelled = ", labelled" if self.labels is not None else ""
        if self.class_names is not None:
            labelled = f", labels from {len(self.class_names)} class folders"
        return f"from_files({len(self)} files, first {first!r}{labelled})"


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


_MEDIA = IMAGE_EXTENSIONS + AUDIO_EXTENSIONS


def _class_folders(root) -> tuple[list[str], list[int], list[str]]:
    """(paths, labels, class names) of the image and audio files under ``root/<class>/``."""
    if not isinstance(root, (str, os.PathLike)) or not os.path.isdir(root):
        raise ValueError(
            f"from_files(..., labels='parent') takes the root folder of a tree root/<class>/<file> "
            f"(the ImageFolder layout), got {root!r}; pass that folder, or give labels= a list or a "
            "function label(path)"
        )
    root = os.fspath(root)
    taken, stray, left_out = [], [], []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # as feedline convert: hidden folders are skipped
        for name in files:
            if name.startswith("."):
                continue
            rel = os.path.relpath(os.path.join(folder, name), root)
            media = os.path.splitext(name)[1].lower() in _MEDIA
            if os.path.dirname(rel) == "":
                if media:
                    stray.append(rel)  # directly under root: no class folder
            else:
                (taken if media else left_out).append(rel)
    if stray:
        stray.sort()
        shown = ", ".join(stray[:5]) + (f" and {len(stray) - 5} more" if len(stray) > 5 else "")
        raise ValueError(
            f"from_files(..., labels='parent'): {len(stray)} file(s) lie directly in {root!r}, outside any "
            f"class folder, so they have no class: {shown}. Move them into a class folder "
            "(root/<class>/<file>) or out of the root, or give labels= a list or a function label(path)"
        )
    if not taken:
        raise FileNotFoundError(
            f"from_files(..., labels='parent'): no image or audio files ({', '.join(_MEDIA)}) in class "
            f"folders under {root!r}; the layout is root/<class>/<file>"
        )
    if left_out:
        left_out.sort()
        shown = ", ".join(left_out[:5]) + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
        warnings.warn(
            f"from_files(..., labels='parent') left out {len(left_out)} file(s) under {root!r} that are not "
            f"images or audio ({', '.join(_MEDIA)}): {shown}. Pass a list of paths with labels= to take them.",
            UserWarning,
            stacklevel=3,
        )
    taken.sort(key=lambda p: p.replace(os.sep, "/"))
    labels, classes = labels_from_folders(taken)
    if classes is None:  # every class folder is named by an integer, which is the label (as feedline convert)
        classes = sorted({rel.replace(os.sep, "/").split("/")[0] for rel in taken}, key=int)
    return [os.path.join(root, rel) for rel in taken], labels, classes


def from_files(pattern_or_paths, labels=None) -> Pipeline:
    """A pipeline over file paths: a glob pattern, a directory, or a list.

    A pattern or directory is expanded and sorted, so the order (and every
    shuffle) is the same on every machine. Reading the file is the job of
    ``map()``.

    Args:
        pattern_or_paths: a glob pattern (``**`` recursive), a directory (all
            files under it), or a list of paths (kept in its order).
        labels: None (a sample is a path); a sequence aligned with the
            (sorted) paths or a function ``label(path)`` (a sample is
            ``(path, label)``); or ``"parent"``: ``pattern_or_paths`` is the
            root of an ImageFolder tree, ``root/<class>/.../<file>``; every
            image and audio file (.jpg, .jpeg, .png, .wav, .flac) in a class
            folder is taken, labelled by its class's index in the sorted
            class names (the rule of ``feedline convert``: folders all
            named by integers keep that integer as the label), and
            ``pipe.source.class_names`` lists the names in label order.
            Hidden files and folders are skipped; other files in class
            folders are left out with a warning that names them.

    Raises:
        FileNotFoundError: a pattern matches no file (or, with ``"parent"``,
            no class folder holds an image or audio file).
        ValueError: labels of the wrong length; with ``"parent"``, image or
            audio files directly under the root (they would have no class;
            the message names them), or a root that is not a folder.

    >>> import os, tempfile, feedline as fl
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> root = tmp.name
    >>> for rel in ("dog/1.png", "cat/2.png", "cat/3.png"):
    ...     os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    ...     open(os.path.join(root, rel), "wb").close()
    >>> pipe = fl.from_files(root, labels="parent")
    >>> pipe.source.class_names
    ['cat', 'dog']
    >>> [(os.path.basename(p), int(y)) for p, y in pipe]
    [('2.png', 0), ('3.png', 0), ('1.png', 1)]
    """
    if isinstance(labels, str):
        if labels != "parent":
            raise ValueError(
                f"from_files(labels={labels!r}): labels is None, a sequence of labels, a function "
                "label(path), or 'parent' (the class folder of each file under the root)"
            )
        paths, found, class_names = _class_folders(pattern_or_paths)
        return Pipeline(FileSource(paths, np.asarray(found, dtype=np.int64), class_names))
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
