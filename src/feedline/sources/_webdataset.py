"""`from_webdataset`: the samples of WebDataset tar shards, by index.

A tar can be indexed by reading its headers only: each member's data
offset and size are in its 512-byte header. The index is built once, in
the consumer, when the pipeline is made; then sample ``i`` is one read of
the byte span that holds its members, from any worker, in any order. So a
WebDataset gets every feedline guarantee (exactly once, the same order for
any backend and worker count, exact resume, shuffling by index), where a
streaming reader gets a shuffle buffer. Compressed shards cannot be read
by offset; they stream, one shard per file (`TarStream`). Details:
docs/formats.md.
"""

from __future__ import annotations

import io
import json
import posixpath
import tarfile
import zlib

import numpy as np

from ..pipeline._pipeline import Pipeline
from ._base import Source
from ._generator import from_generator
from ._shard_files import ShardFiles, ShardFormatError, expand_names
from ._tar_index import tar_members

__all__ = ["TarStream", "WebDatasetSource", "decode_fields", "from_webdataset", "group_key", "group_members", "index_tar"]

_COMPRESSED_TARS = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")  # what tarfile decompresses: such shards stream (TarStream)
SUFFIXES = (".tar", *_COMPRESSED_TARS)  # what a folder of shards holds



def group_key(member_name: str) -> tuple[str, str] | None:
    """``(key, extension)`` of a tar member, by WebDataset's rule; None for members it leaves out.

    The key is the member's path up to the first dot of its file name, the
    extension everything after that dot (lower-cased). Names with no dot,
    or nothing before it (hidden files), and WebDataset's ``__meta__``
    members are left out, as WebDataset does.

    >>> group_key("train/0001.seg.png"), group_key("0001.JPG"), group_key("README"), group_key("__info__")
    (('train/0001', 'seg.png'), ('0001', 'jpg'), None, None)
    """
    folder, base = posixpath.split(member_name)
    stem, dot, ext = base.partition(".")
    if not dot or not stem or not ext:
        return None
    if not folder and base.startswith("__") and base.endswith("__"):
        return None
    return (f"{folder}/{stem}" if folder else stem), ext.lower()


# ------------------------------------------------------------ decoding
def _integer(data: bytes) -> int:
    return int(data.decode("utf-8").strip())


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


BUILTIN_DECODERS = {
    **dict.fromkeys(("cls", "cls2", "class", "count", "index", "inx", "id"), _integer),
    **dict.fromkeys(("txt", "text", "transcript"), _text),
    **dict.fromkeys(("json", "jsn"), json.loads),
    "npy": _npy,
}


def _decoders(decode) -> dict:
    if decode is True:
        return dict(BUILTIN_DECODERS)
    if decode is False or decode is None:
        return {}
    if isinstance(decode, dict):
        for ext, fn in decode.items():
            if not isinstance(ext, str) or (fn is not None and not callable(fn)):
                raise TypeError(f"from_webdataset(decode=...): a dict maps an extension (str) to a function bytes -> value or None, got {ext!r}: {fn!r}")
        merged = dict(BUILTIN_DECODERS)
        merged.update({ext.lower().lstrip("."): fn for ext, fn in decode.items()})
        return {ext: fn for ext, fn in merged.items() if fn is not None}
    raise TypeError(f"from_webdataset(decode={decode!r}): decode is True (built-in decoders), False (bytes) or a dict {{extension: function}}")


# ------------------------------------------------------------ indexing
def group_members(members, name: str):
    """Yield ``(key, [(extension, payload), ...])`` for each run of consecutive members with one key.

    ``members`` gives ``(member name, is a regular file, payload)`` in tar
    order; the payload is whatever the caller attaches (offsets, or data).

    Raises:
        ShardFormatError: an extension twice in one sample (names the shard, key and member).
    """
    current, fields, seen = None, [], set()
    for number, (member, regular, payload) in enumerate(members):
        found = group_key(member) if regular else None
        if found is None:
            continue
        key, ext = found
        if key != current:
            if fields:
                yield current, fields
            current, fields, seen = key, [], set()
        if ext in seen:
            raise ShardFormatError(f"{name}: sample {key!r} holds {ext!r} twice (member {number}, {member!r}); a key's extensions must differ")
        seen.add(ext)
        fields.append((ext, payload))
    if fields:
        yield current, fields


def index_tar(f, name: str) -> list[tuple[str, list[tuple[str, tuple[int, int]]]]]:
    """``[(key, [(extension, (data offset, size)), ...]), ...]`` of one tar shard, from its headers.

    Raises:
        ShardFormatError: not a tar, a damaged header, data cut short, or an
            extension twice in one sample; the message names the shard, member and byte offset.
    """
    members = ((member, regular, (offset, size)) for member, offset, size, regular in tar_members(f, name))
    return list(group_members(members, name))


def decode_fields(sample: dict, fields, decoders: dict, where: str) -> dict:
    """Add ``fields`` (``[(extension, bytes)]``) to ``sample``, each decoded by its extension's last part."""
    for ext, data in fields:
        decode = decoders.get(ext.rsplit(".", 1)[-1])
        if decode is None:
            sample[ext] = data
            continue
        try:
            sample[ext] = decode(data)
        except Exception as e:
            raise ShardFormatError(f"{where}: cannot decode field {ext!r} with {getattr(decode, '__name__', decode)}: {e}") from e
    return sample


class _Index:
    """The index of every shard as flat arrays: a million samples cost a few arrays, not a million objects."""

    def __init__(self, shards: list[list]):
        keys, fields, field_ids = [], [], {}
        sample_shard, starts, offsets, sizes, field_of = [], [0], [], [], []
        for number, samples in enumerate(shards):
            for key, members in samples:
                keys.append(key.encode("utf-8"))
                sample_shard.append(number)
                for ext, (offset, size) in members:
                    if ext not in field_ids:
                        field_ids[ext] = len(fields)
                        fields.append(ext)
                    field_of.append(field_ids[ext])
                    offsets.append(offset)
                    sizes.append(size)
                starts.append(len(offsets))
        self.fields = fields
        self.shard = np.asarray(sample_shard, dtype=np.int32)
        self.starts = np.asarray(starts, dtype=np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.field_of = np.asarray(field_of, dtype=np.int32)
        lengths = np.fromiter((len(k) for k in keys), dtype=np.int64, count=len(keys))
        self.key_starts = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum(lengths, out=self.key_starts[1:])
        self.key_blob = np.frombuffer(b"".join(keys), dtype=np.uint8)

    def key(self, index: int) -> str:
        return self.key_blob[self.key_starts[index]:self.key_starts[index + 1]].tobytes().decode("utf-8")


class WebDatasetSource(Source):
    """Sample ``i`` is the ``i``-th key of the shards, in shard order then tar order.

    A sample is a dict: ``"__key__"`` (the key), ``"__url__"`` (its shard)
    and one entry per extension, decoded by `decoders` (else bytes).
    """

    def __init__(self, files: ShardFiles, index: _Index, decoders: dict):
        self.files, self.index, self.decoders = files, index, decoders

    def __len__(self) -> int:
        return len(self.index.shard)

    def read(self, index: int) -> dict:
        idx = self.index
        first, stop = idx.starts[index], idx.starts[index + 1]
        shard = int(idx.shard[index])
        sample = {"__key__": idx.key(index), "__url__": self.files.shown(shard)}
        if first == stop:
            return sample
        begin = int(idx.offsets[first:stop].min())
        end = int((idx.offsets[first:stop] + idx.sizes[first:stop]).max())
        span = self.files.read(shard, begin, end - begin)  # a sample's members lie together: one read
        if len(span) != end - begin:
            raise ShardFormatError(f"{self.where(index)}: the shard ends before the sample's data ({len(span)} of {end - begin} bytes); was it replaced?")
        fields = ((idx.fields[idx.field_of[m]], span[idx.offsets[m] - begin:idx.offsets[m] - begin + idx.sizes[m]]) for m in range(first, stop))
        return decode_fields(sample, fields, self.decoders, self.where(index))

    def take_counters(self) -> dict:
        return self.files.take_counts()

    def where(self, index: int) -> str:
        return f"{self.files.shown(int(self.index.shard[index]))} sample {self.index.key(index)!r}"

    def describe(self) -> str:
        count = len(self.files.names)
        return f"from_webdataset({count} shards, {len(self)} samples, fields {sorted(self.index.fields)}, first {self.files.shown(0)!r})"


class TarStream:
    """The generator factory for compressed shards (``.tar.gz``...): shard ``s`` is file ``s``, read front to back.

    A compressed tar has no offsets to index, so its samples stream, one
    shard per file, as `from_generator` shards do.
    """

    def __init__(self, files: ShardFiles, decoders: dict):
        self.files, self.decoders = files, decoders

    def __call__(self, shard: int, num_shards: int):
        name = self.files.shown(shard)
        with self.files.open(shard, scan=True) as raw:
            try:
                with tarfile.open(fileobj=raw, mode="r|*") as tar:
                    for key, fields in group_members(self._members(tar), name):
                        yield decode_fields({"__key__": key, "__url__": name}, fields, self.decoders, f"{name} sample {key!r}")
            except (tarfile.TarError, EOFError, OSError, zlib.error) as e:
                raise ShardFormatError(f"{name}: cannot read as a compressed tar ({type(e).__name__}: {e}); the shard is damaged or "
                                       "truncated") from e

    @staticmethod
    def _members(tar):
        for member in tar:
            data = tar.extractfile(member).read() if member.isreg() else None
            tar.members.clear()  # a stream keeps nothing
            yield member.name, member.isreg(), data


def from_webdataset(urls_or_paths, *, decode=True, storage_options: dict | None = None, cache_dir=None,
                    cache_limit=None) -> Pipeline:
    """A pipeline over the samples of WebDataset tar shards, read by index.

    Members are grouped into samples as WebDataset groups them: the key is
    a member's path up to the first dot of its file name, the rest of the
    name (lower-cased) is the field, and consecutive members with the same
    key are one sample. The shards' headers are read once, here, to index
    them (no data is read); after that each sample is one read, so
    ``shuffle()``, ``shard()``, any worker count and ``resume()`` behave as
    for any other source. Compressed shards (``.tar.gz``, ``.tgz``,
    ``.tar.bz2``, ``.tar.xz``) have no offsets to index: if any shard is
    compressed, the pipeline is a stream with one shard per file
    (`from_generator`; no ``len()``, ``shuffle()`` permutes the file order).

    Args:
        urls_or_paths: a shard, a list of shards (kept in order), WebDataset's
            brace notation (``"data/train-{000000..000099}.tar"``), a glob
            pattern or a folder (sorted); URLs (``s3://``, ``https://``)
            are read through fsspec: each shard is downloaded once into the
            local shard cache and read from there.
        decode: True: built-in decoders for ``cls``/``cls2``/``index``/``id``
            (int), ``txt``/``text`` (str), ``json`` (parsed) and ``npy``
            (array), everything else (images, audio) stays ``bytes`` for
            ``map()`` to decode (e.g. ``feedline.vision.decode``); False: every
            field is ``bytes``; a dict ``{extension: function}`` adds or
            replaces decoders (None keeps bytes). A decoder is chosen by
            the last part of the extension (``seg.png`` by ``png``).
        storage_options: fsspec options for URLs (endpoint, credentials).
        cache_dir: where remote shards are cached (default: the remote
            stores' cache, ``$FEEDLINE_CACHE_DIR`` or ``~/.cache/feedline/stores``);
            False reads them by byte ranges, one request per sample, caching nothing.
        cache_limit: bytes (or ``"20GiB"``) the cache may take (default ``"50GiB"``);
            least recently used shards are evicted beyond it.

    Returns:
        A pipeline of dicts ``{"__key__": str, "__url__": shard, field: value}``.

    Raises:
        FileNotFoundError: no shard matches.
        ShardFormatError: a shard is not a tar, or is damaged (the message
            names the shard, member and byte offset; for a compressed shard,
            when the stream reaches the damage).

    >>> import io, os, tarfile, tempfile, feedline as fl
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "shard-000.tar")
    >>> with tarfile.open(path, "w") as tar:
    ...     for name, data in [("a.txt", b"cat"), ("a.cls", b"3"), ("b.txt", b"dog"), ("b.cls", b"5")]:
    ...         info = tarfile.TarInfo(name); info.size = len(data); tar.addfile(info, io.BytesIO(data))
    >>> [(s["__key__"], s["txt"], s["cls"]) for s in fl.from_webdataset(path)]
    [('a', 'cat', 3), ('b', 'dog', 5)]
    """
    decoders = _decoders(decode)
    names = expand_names(urls_or_paths, "from_webdataset", storage_options, SUFFIXES)
    files = ShardFiles(names, storage_options, cache_dir=cache_dir, cache_limit=cache_limit)
    if any(name.lower().endswith(_COMPRESSED_TARS) for name in names):
        return from_generator(TarStream(files, decoders), len(names))
    return Pipeline(WebDatasetSource(files, _Index(files.scan_all(index_tar, "the tar headers of")), decoders))
