"""Checking a whole store against its checksums: ``feedline inspect --verify`` and `verify_store`.

Every file is read once, in full (memory-mapped, hashed region by region);
nothing is decoded. A store written before checksums (format version 1)
gets what can be checked without them: each file is present, of its
recorded size, and parses as Arrow IPC with the recorded record batches
and rows; bytes changed in place then go unnoticed, and the report says so.
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass, field

from ._checksum import Region, bad_regions, has_checksums, manifest_digest, row_ranges
from ._deps import pyarrow, pyarrow_ipc
from ._fields import FieldSpec
from ._format import read_manifest

__all__ = ["VerifyReport", "verify_store"]


@dataclass
class VerifyReport:
    """What `verify_store` found; ``str()`` is what ``feedline inspect --verify`` prints.

    ``ok`` is True only when the store has checksums and everything matched.
    """

    path: str
    checksums: bool
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    damaged: list = field(default_factory=list)  # [Region]
    manifest_ok: bool = True
    fields: dict = field(default_factory=dict)  # group -> field names, to say what a damaged file holds

    @property
    def ok(self) -> bool:
        return self.checksums and self.manifest_ok and not self.damaged

    def __str__(self) -> str:
        from ._convert import human_bytes

        how = "checksums (xxh3_64 per record batch)" if self.checksums else "sizes and Arrow structure only"
        lines = [f"verify:    {self.path}: {self.files} files, {human_bytes(self.bytes)} checked against {how} "
                 f"in {self.seconds:.2f} s"]
        if not self.manifest_ok:
            lines.append("  DAMAGED: manifest.json does not match its checksum (edited or damaged after writing)")
        for region in self.damaged:
            group = region.file.split("/", 1)[0]
            lines.append(f"  DAMAGED: {region.describe()}; fields {', '.join(self.fields.get(group, []))}")
        if self.ok:
            lines.append("  ok: every byte matches the checksums written with the store")
        elif not self.checksums and not self.damaged:
            lines.append("  cannot verify the contents: this store has no checksums (format version 1, written before "
                         "feedline recorded them), so bytes changed in place go unnoticed; write the store again to add them")
        else:
            lines.append(f"  {len(self.damaged) + (not self.manifest_ok)} damaged part(s): those samples cannot be trusted; "
                         "copy the store again from a good copy, or write it again")
        return "\n".join(lines)


def verify_store(path) -> VerifyReport:
    """Check every file of the store at ``path`` against its checksums (or, without them, its structure).

    Returns:
        A `VerifyReport` listing each damaged region with its file and row range.

    Raises:
        StoreError: no store at ``path``, no manifest, or a manifest that
            cannot be read (see `feedline.store.open_store`).

    >>> import numpy as np, tempfile, os
    >>> from feedline.store import StoreWriter
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "v.store")
    >>> with StoreWriter(path) as w:
    ...     w.write({"x": np.zeros((3, 2), np.float32)})
    >>> verify_store(path).ok
    True
    """
    started = time.perf_counter()
    path = os.path.abspath(os.fspath(path))
    manifest = read_manifest(path)
    checked = has_checksums(manifest)
    report = VerifyReport(path, checked)
    report.manifest_ok = not checked or manifest.get("manifest_checksum") == manifest_digest(manifest)
    for spec in (FieldSpec.from_json(f) for f in manifest["fields"]):
        report.fields.setdefault(spec.group, []).extend(spec.columns)
    for part in manifest["files"]:
        whole = (int(part["rows"][0]), int(part["rows"][1]))
        for group in manifest["groups"]:
            entry = part["files"][group]
            name = entry["name"]
            file_path = os.path.join(path, *name.split("/"))
            report.files += 1
            try:
                size = os.path.getsize(file_path)
            except FileNotFoundError:
                report.damaged.append(Region(name, "missing", whole))
                continue
            if size != int(entry["bytes"]):
                report.damaged.append(Region(name, f"{size} bytes where the manifest says {entry['bytes']}", whole))
                continue
            report.bytes += size
            with open(file_path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if checked:
                    try:
                        report.damaged.extend(bad_regions(data, entry["checksums"], name, part))
                    except (KeyError, TypeError, ValueError, IndexError) as e:  # the manifest's entry, not the file
                        report.damaged.append(Region(name, f"its checksums in the manifest are malformed ({e!r})", whole))
                else:
                    report.damaged.extend(_structure_problems(data, name, part))
    report.seconds = time.perf_counter() - started
    return report


def _structure_problems(data, name: str, part: dict) -> list[Region]:
    """Without checksums: the file parses as Arrow IPC with the record batches and rows of the manifest."""
    pa, ipc = pyarrow(), pyarrow_ipc()
    whole = (int(part["rows"][0]), int(part["rows"][1]))
    try:
        reader = ipc.open_file(pa.py_buffer(data))
    except (OSError, pa.ArrowException) as e:
        return [Region(name, f"unreadable as Arrow IPC ({e})", whole)]
    ranges = row_ranges(part)
    if reader.num_record_batches != len(ranges):
        return [Region(name, f"{reader.num_record_batches} record batches where the manifest says {len(ranges)}", whole)]
    found = []
    for batch, rows in enumerate(ranges):
        try:
            count = reader.get_batch(batch).num_rows
        except (OSError, pa.ArrowException) as e:
            found.append(Region(name, f"record batch {batch} unreadable ({e})", rows))
            continue
        if count != rows[1] - rows[0]:
            found.append(Region(name, f"record batch {batch} has {count} rows where the manifest says {rows[1] - rows[0]}", rows))
    return found
