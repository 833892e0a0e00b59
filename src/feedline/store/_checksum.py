"""Checksums of a store: one per record batch of every Arrow file, and one of the manifest.

Each Arrow file is cut into byte regions that tile it: the *head* (what the
IPC writer emits before the first record batch; pyarrow writes the magic and
schema with the first batch, so it is usually empty), one region per record
batch (the bytes emitted while writing it), and the *tail* (the footer).
The writer hashes the bytes as they go to disk (`RunningChecksum`) and
records the regions in the file's manifest entry::

    "checksums": {"offsets": [0, 1080, 2024], "head": "...", "batches": ["...", "..."], "tail": "..."}

where record batch ``i`` is bytes ``[offsets[i], offsets[i + 1])``, the head
``[0, offsets[0])`` and the tail ``[offsets[-1], bytes)``. Why per record
batch: a damaged byte is traced to a row range, and a reader that verifies
hashes only the record batches it reads (XXH3 runs at memory speed), not a
whole 256 MB file before its first sample. The hash is xxHash's XXH3 (64
bits), which runs at memory speed; it detects damage, not tampering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from .._optional import require

__all__ = [
    "ALGORITHM",
    "Region",
    "RunningChecksum",
    "bad_ends",
    "bad_regions",
    "batch_matches",
    "digest",
    "has_checksums",
    "manifest_digest",
    "row_ranges",
]

ALGORITHM = "xxh3_64"  # xxhash's XXH3: ~10+ GB/s on one core, so checking a batch costs less than reading it


def _xxhash():
    return require("xxhash", "store", "feedline's store checksums", package="xxhash")


def digest(data) -> str:
    """The XXH3-64 of a bytes-like object (read in place: NumPy arrays, Arrow buffers, memoryviews), as hex.

    >>> digest(b"")
    '2d06800538d394c2'
    """
    return _xxhash().xxh3_64_hexdigest(data)


class RunningChecksum:
    """Hashes the bytes of one file as they are written, region by region.

    ``update(data)`` for every write; ``cut()`` ends the current region (after
    the writer's header, after each record batch, after the footer).

    >>> c = RunningChecksum()
    >>> c.update(b"head"); c.cut(); c.update(b"batch"); c.cut(); c.update(b"foot"); c.cut()
    >>> c.entry()["offsets"], c.entry()["batches"] == [digest(b"batch")]
    ([4, 9], True)
    """

    def __init__(self):
        self._hash = _xxhash().xxh3_64()
        self._position = 0
        self._starts: list[int] = []
        self._digests: list[str] = []
        self._start = 0

    def update(self, data) -> None:
        self._hash.update(data)
        self._position += memoryview(data).nbytes

    def cut(self) -> None:
        self._starts.append(self._start)
        self._digests.append(self._hash.hexdigest())
        self._hash.reset()
        self._start = self._position

    def entry(self) -> dict:
        """The manifest's ``checksums`` of the file: needs a cut after the head, each batch and the tail."""
        if len(self._digests) < 2:
            raise RuntimeError("RunningChecksum.entry() needs cut() after the head and after the tail")
        return {"offsets": self._starts[1:], "head": self._digests[0], "batches": self._digests[1:-1], "tail": self._digests[-1]}


@dataclass(frozen=True)
class Region:
    """A part of one store file that does not match its checksum; ``rows`` is the row range ``[start, stop)`` it holds."""

    file: str  # relative to the store, e.g. "raw/part-00001.arrow"
    what: str  # "record batch 3", "header" or "footer"
    rows: tuple[int, int]

    def describe(self) -> str:
        start, stop = self.rows
        rows = f"row {start}" if stop - start == 1 else f"rows {start}-{stop - 1}"
        return f"{self.file}, {self.what} ({rows})"


def has_checksums(manifest: dict) -> bool:
    """Whether the store's writer recorded checksums (format version 2 and later)."""
    return manifest.get("checksum") == ALGORITHM


def manifest_digest(manifest: dict) -> str:
    """The checksum of a manifest: XXH3-64 of its canonical JSON without ``manifest_checksum``.

    Canonical (sorted keys, no spaces), so it survives any re-indentation of the file.
    """
    body = {k: v for k, v in manifest.items() if k != "manifest_checksum"}
    return digest(json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def row_ranges(part: dict) -> list[tuple[int, int]]:
    """``[start, stop)`` of each record batch of a manifest part (``{"rows": [a, b], "batches": [n, ...]}``).

    >>> row_ranges({"rows": [16, 32], "batches": [7, 7, 2]})
    [(16, 23), (23, 30), (30, 32)]
    """
    start, out = int(part["rows"][0]), []
    for rows in part["batches"]:
        out.append((start, start + int(rows)))
        start += int(rows)
    return out


def batch_matches(data, checks: dict, batch: int) -> bool:
    """Whether record batch ``batch`` of a file's bytes ``data`` (a bytes-like object) matches ``checks``."""
    offsets = checks["offsets"]
    view = memoryview(data)
    return digest(view[offsets[batch] : offsets[batch + 1]]) == checks["batches"][batch]


def bad_ends(data, checks: dict) -> list[str]:
    """Which of ``"header"`` and ``"footer"`` of a file's bytes do not match ``checks``."""
    view, offsets = memoryview(data), checks["offsets"]
    bad = []
    if digest(view[: offsets[0]]) != checks["head"]:
        bad.append("header")
    if digest(view[offsets[-1] :]) != checks["tail"]:
        bad.append("footer")
    return bad


def bad_regions(data, checks: dict, name: str, part: dict) -> list[Region]:
    """Every region of one file (bytes ``data``, manifest part ``part``) that does not match ``checks``.

    A damaged header or footer makes the whole file unreadable, so it is
    reported with the file's whole row range.
    """
    ranges = row_ranges(part)
    whole = (int(part["rows"][0]), int(part["rows"][1]))
    found = [Region(name, end, whole) for end in bad_ends(data, checks)]
    for batch, rows in enumerate(ranges):
        if not batch_matches(data, checks, batch):
            found.append(Region(name, f"record batch {batch}", rows))
    return found
