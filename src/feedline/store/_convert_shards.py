"""``feedline convert`` of shard files: WebDataset tars, TFRecord and ArrayRecord files into a store.

The source is read with `from_webdataset`, `from_tfrecord` or
`from_array_record` (the format is told by the files' extension), and each
sample becomes one row on every core, in order: image bytes (JPEG or PNG,
told by their first bytes, whatever the field is called) are decoded once,
fitted to ``--size`` and encoded as ``--encoding`` says, exactly as a folder
of images is; other values are kept (bytes, str, numbers, arrays). A
TFRecord feature named ``image/encoded`` is the store field
``image/encoded`` (a nested dict in the samples). Samples that cannot be
converted (damaged records, fields that differ from the first sample's)
are skipped and listed. See docs/formats.md.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import time

import numpy as np

from ..sources import _array_record as array_record
from ..sources import _tfrecord as tfrecord
from ..sources import _webdataset as webdataset
from ..sources._shard_files import expand_braces, has_suffix, is_url, redact
from ._convert_parts import ConvertSummary, Decode, check_fit, progress_bar, skips_unannounced, store_bytes
from ._errors import StoreError
from ._images import EncodedImage, encode_image
from ._writer import StoreWriter

__all__ = ["FORMATS", "convert_shards", "is_shard_source", "shard_format"]

FORMATS = {"webdataset": webdataset.SUFFIXES, "tfrecord": tfrecord.SUFFIXES, "array_record": array_record.SUFFIXES}
_WRITE_EVERY = 64  # rows handed to the writer at once


def _format_of(name: str) -> str | None:
    return next((kind for kind, suffixes in FORMATS.items() if has_suffix(name, suffixes)), None)


def shard_format(src) -> str | None:
    """The shard format ``src`` names (``"webdataset"``, ``"tfrecord"``, ``"array_record"``), else None.

    ``src`` is a shard file, a glob or brace pattern, a URL, a list of
    them, or a folder holding only shard files of one format.

    >>> shard_format("data/train-{000..009}.tar"), shard_format(["a.tfrecord"]), shard_format("images/")
    ('webdataset', 'tfrecord', None)
    """
    if isinstance(src, (list, tuple)):
        kinds = {_format_of(os.fspath(s)) for s in src}
        return kinds.pop() if len(kinds) == 1 else None
    name = os.fspath(src)
    if not is_url(name) and os.path.isdir(name):
        files = [f for f in os.listdir(name) if not f.startswith(".") and os.path.isfile(os.path.join(name, f))]
        kinds = {_format_of(f) for f in files}
        return kinds.pop() if files and len(kinds) == 1 else None
    return _format_of(expand_braces(name)[0])


def _is_image(value) -> bool:
    return isinstance(value, bytes) and (value[:3] == b"\xff\xd8\xff" or value[:8] == b"\x89PNG\r\n\x1a\n")


class ShardRow:
    """One sample of a shard source as one store row; runs in the workers (a plain class: it pickles small)."""

    def __init__(self, image: Decode, encodings: dict, fields: list[str] | None):
        self.image, self.encodings, self.fields = image, encodings, fields

    def __call__(self, sample) -> dict:
        sample = _fields_of(sample)
        if self.fields is not None and sorted(sample) != self.fields:
            raise ValueError(f"its fields {sorted(sample)} differ from the first sample's {self.fields}; a store holds one set of fields")
        row: dict = {}
        for name, value in sample.items():
            if isinstance(value, list):
                if len(value) != 1:
                    raise ValueError(f"field {name!r} holds {len(value)} values; a store field holds one bytes value per sample")
                value = value[0]
            if _is_image(value):
                value = self._image(name, value)
            elif isinstance(value, (dict, list)):
                raise ValueError(f"field {name!r} is a {type(value).__name__}; pass its bytes (decode=False) or flatten it")
            _place(row, name, value)
        return row

    def _image(self, name: str, data: bytes):
        pixels = self.image._image(data)
        encoding = self.encodings.get(name, "raw")
        if encoding in ("raw", "zstd", "lz4"):
            return pixels
        return EncodedImage(encode_image(pixels, encoding, name), pixels.shape, pixels.dtype, encoding)


def _fields_of(sample) -> dict:
    """A sample as ``{field: value}``: a record that is not a dict (ArrayRecord bytes) is the field ``record``."""
    if not isinstance(sample, dict):
        return {"record": sample}
    return {k: v for k, v in sample.items() if k != "__url__"}  # the shards are in meta["source"]


def _place(row: dict, name: str, value) -> None:
    """``row["image/encoded"] = v`` as ``row["image"]["encoded"] = v``: the store names nested fields with ``/``."""
    *parents, leaf = name.split("/")
    node = row
    for part in parents:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ValueError(f"field {name!r} nests under {part!r}, which is a field itself; rename one of them")
    if leaf in node:
        raise ValueError(f"field {name!r} clashes with a field nested under it; rename one of them")
    node[leaf] = value


def _leaves(row, prefix="") -> list:
    if isinstance(row, dict):
        return [leaf for key, value in row.items() for leaf in _leaves(value, f"{prefix}{key}/")]
    return [(prefix[:-1], row)]


def _open_source(src, kind: str):
    if kind == "webdataset":  # json stays text: a store field holds values, not dicts
        return webdataset.from_webdataset(src, decode={"json": bytes.decode, "jsn": bytes.decode})
    if kind == "tfrecord":
        return tfrecord.from_tfrecord(src)
    return array_record.from_array_record(src)


def convert_shards(src, dst, kind: str, *, size=None, fit: str = "resize", encodings: dict | None = None,
                   workers: int | None = None, backend: str | None = None, overwrite: bool = False,
                   rows_per_file: int | None = None, progress: bool = True, strict: bool = True) -> ConvertSummary:
    """Convert the samples of shard files of format ``kind`` into a store at ``dst`` (see the module docstring).

    Called by `feedline.store._convert.convert`, whose arguments these are.
    """
    started = time.perf_counter()
    check_fit(fit)
    dst = os.path.abspath(os.fspath(dst))
    src = [os.fspath(s) for s in src] if isinstance(src, (list, tuple)) else os.fspath(src)
    encodings = dict(encodings or {})
    pipe = _open_source(src, kind)
    source = pipe.source
    total, first_read = _first_record(source)
    if first_read is None:
        raise StoreError(f"nothing to convert: {src!r} holds no samples (or its first shard is empty)")
    image = Decode("image", size, fit, "raw", "float32", None, False, strict)
    first_sample = _fields_of(first_read)
    fields = sorted(first_sample)
    row = ShardRow(image, encodings, fields)
    first = row(first_sample)
    images = _image_fields(first_sample)
    fixed = set(images) if size is not None else set()
    variable = [name for name, value in _leaves(first) if isinstance(value, np.ndarray) and name not in fixed]
    meta = _meta(src, kind, images, size, fit)
    mapped = pipe.map(row, workers=workers, backend=backend, on_error="skip")
    bar = progress_bar(total, progress)
    writer = StoreWriter(dst, encodings={k: v for k, v in encodings.items() if k not in images}, rows_per_file=rows_per_file,
                         meta=meta, overwrite=overwrite, variable_shape=variable)
    skipped = []
    with writer, mapped, contextlib.closing(bar):
        it = iter(mapped)
        with skips_unannounced():
            while chunk := list(itertools.islice(it, _WRITE_EVERY)):
                writer.write_rows(chunk)
                bar.update(len(chunk))
        for index, reason in it.stats().skipped:
            skipped.append((source.where(index), reason.split(": ", 1)[-1]))
        bar.update(len(skipped))
        writer.meta["skipped"] = [list(s) for s in skipped]
        samples = writer.rows
    total = store_bytes(dst)
    shown = redact(src) if isinstance(src, str) else f"{len(src)} files"
    return ConvertSummary(shown, dst, kind, samples, total, time.perf_counter() - started, skipped, None)


def _first_record(source) -> tuple[int | None, object]:
    """(samples in ``source``, None when streaming; its first record, None when it has none): the first sample sets the fields."""
    if source.streaming:  # compressed tar shards: no length, the first sample is the first shard's first
        return None, next(iter(source.open(0)), None)
    total = len(source)
    return total, source.read(0) if total else None


def _meta(src, kind: str, images: list[str], size, fit: str) -> dict:
    """The store's ``meta`` before any skip is known: the shards it came from (credentials redacted), its image fields and their fit."""
    return {"made_by": "feedline convert", "source": redact(src) if isinstance(src, str) else [redact(s) for s in src],
            "kind": kind, "images": images, "size": list(size) if size and images else None,
            "fit": fit if size and images else None, "skipped": []}


def _image_fields(sample: dict) -> list[str]:
    """The fields of ``sample`` that hold JPEG or PNG bytes (alone or first in a list): these are decoded and fitted."""
    return [name for name, value in sample.items() if _is_image(value[0] if isinstance(value, list) and value else value)]


def is_shard_source(src) -> bool:
    """True when ``feedline convert SRC`` should read shard files rather than a folder of media."""
    if isinstance(src, (list, tuple)):
        return shard_format(src) is not None
    name = os.fspath(src)
    if shard_format(name) is None:
        return False
    return is_url(name) or os.path.exists(name) or bool(glob.glob(expand_braces(name)[0]))
