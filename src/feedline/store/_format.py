"""The on-disk format of a feedline store, declared once.

A store is a directory of Arrow IPC files, one folder per compression group
(``raw``, ``zstd``, ``lz4``) with the same parts and record-batch cuts, and
``manifest.json``, written last (its presence means "complete"). This module
holds the format's names, encodings and field kinds, and reads and checks
the manifest. `FORMAT_VERSION` is bumped when the format changes; a reader
refuses a newer version and reads every older one. Version 2 added
checksums (per record batch, and of the manifest); version 1 stores are
read without them.
The format in full: docs/store.md, "The format".
"""

from __future__ import annotations

import json
import os
import re

from ._errors import StoreError

__all__ = [
    "CODECS",
    "ENCODINGS",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST",
    "SHAPE_SUFFIX",
    "check_manifest",
    "file_name",
    "group_of",
    "parse_encoding",
    "read_manifest",
]

FORMAT_NAME = "feedline-store"
FORMAT_VERSION = 2  # 2: checksums (feedline.store._checksum); 1: none
MANIFEST = "manifest.json"
SHAPE_SUFFIX = ".shape"  # column holding the per-row shapes of a ragged field
CODECS = {"raw": None, "zstd": "zstd", "lz4": "lz4"}  # encoding -> Arrow IPC codec (file group)
ENCODINGS = ("raw", "zstd", "lz4", "jpeg:QUALITY", "png")
KINDS = ("array", "ragged", "scalar", "bytes", "str")

_JPEG = re.compile(r"^jpeg(?::(\d{1,3}))?$")


def parse_encoding(text: str, field: str = "?") -> tuple[str, int | None]:
    """``"jpeg:90"`` -> ``("jpeg", 90)``; ``"zstd"`` -> ``("zstd", None)``.

    >>> parse_encoding("jpeg:85"), parse_encoding("png"), parse_encoding("jpeg")
    (('jpeg', 85), ('png', None), ('jpeg', 90))

    Raises:
        ValueError: an unknown encoding or a quality outside 1-100.
        TypeError: not a string.
    """
    if not isinstance(text, str):
        raise TypeError(f"encoding of field {field!r} must be a string such as 'raw' or 'jpeg:90', got {text!r}")
    name = text.strip().lower()
    if name in CODECS or name == "png":
        return name, None
    match = _JPEG.match(name)
    if match:
        quality = int(match.group(1) or 90)
        if not 1 <= quality <= 100:
            raise ValueError(f"encoding {text!r} of field {field!r}: JPEG quality must be 1-100")
        return "jpeg", quality
    raise ValueError(f"unknown encoding {text!r} for field {field!r}; use one of {', '.join(ENCODINGS)}")


def group_of(encoding: str) -> str:
    """The file group (IPC codec) a field's encoding puts it in.

    Image encodings are already compressed, so they live uncompressed in ``"raw"``.
    """
    name, _ = parse_encoding(encoding)
    return name if name in ("zstd", "lz4") else "raw"


def file_name(part: int, group: str) -> str:
    """``raw/part-00003.arrow``: a part's file of a group, relative to the store (``/`` on every OS)."""
    return f"{group}/part-{part:05d}.arrow"


def read_manifest(path: str) -> dict:
    """Load and check ``path/manifest.json``.

    Raises:
        StoreError: no directory, no manifest (an incomplete store), a
            damaged manifest, or a newer format version; the message says
            what to do.
    """
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise StoreError(f"no feedline store at {path!r}: not a directory; write one with feedline convert or fl.store.StoreWriter")
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
        raise StoreError(
            f"the store at {path!r} is incomplete: it has no {MANIFEST}, which the writer saves last, "
            "so writing it was interrupted (or this is not a feedline store). Write the store again."
        )
    try:
        with open(manifest_path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise StoreError(f"cannot read {manifest_path!r}: {e}; the store is damaged, write it again") from e
    check_manifest(manifest, manifest_path)
    return manifest


def check_manifest(manifest, where: str) -> None:
    """Raise `StoreError` unless ``manifest`` is one this version can read."""
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise StoreError(f"{where!r} is not a feedline store manifest (no \"format\": \"{FORMAT_NAME}\")")
    version = manifest.get("format_version")
    if not isinstance(version, int):
        raise StoreError(f"{where!r} has no integer format_version; the store is damaged, write it again")
    if version > FORMAT_VERSION:
        raise StoreError(
            f"{where!r} is format version {version}, written by a newer feedline; this feedline reads "
            f"versions up to {FORMAT_VERSION}. Upgrade feedline (pip install -U feedline) to read it."
        )
    for key in ("num_samples", "fields", "structure", "files", "groups"):
        if key not in manifest:
            raise StoreError(f"{where!r} has no {key!r}; the store is damaged, write it again")
    for field in manifest["fields"]:
        if field.get("kind") not in KINDS:
            raise StoreError(f"{where!r}: field {field.get('name')!r} has unknown kind {field.get('kind')!r}; upgrade feedline")
