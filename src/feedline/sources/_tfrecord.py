"""`from_tfrecord`: the records of TFRecord files, by index, with their CRC32C checks.

A TFRecord file is a sequence of records: ``uint64 length``, ``uint32
masked CRC32C of the length``, ``data``, ``uint32 masked CRC32C of the
data`` (little-endian). Reading the 12-byte headers and skipping the data
gives every record's offset, so the files are indexed once, in the
consumer, and then sample ``i`` is one read from any worker: every feedline
guarantee holds. The length's CRC is checked while indexing, the data's at
every read. Compressed files (GZIP, ZLIB) cannot be read by offset: they
become a sharded stream, one file per shard. Details: docs/formats.md.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import numpy as np

from .._optional import require
from ..pipeline._pipeline import Pipeline
from ._base import Source
from ._generator import from_generator
from ._shard_files import ShardFiles, ShardFormatError, expand_names
from ._tf_example import check_feature_kinds, decode_example, feature_kinds

__all__ = ["TFRecordSource", "from_tfrecord", "masked_crc32c", "resolve_decode"]

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MASK_DELTA = 0xA282EAD8  # TFRecord's mask constant (tensorflow/core/lib/hash/crc32c.h)
_CRC32C = None  # google_crc32c.value, imported on first use
SUFFIXES = (".tfrecord", ".tfrecords", ".tfrec", ".tfrecord.gz")  # what a folder of TFRecords holds


def masked_crc32c(data: bytes) -> int:
    """The masked CRC32C that TFRecord stores: ``rotate_right(crc, 15) + 0xa282ead8`` (mod 2**32).

    >>> hex(masked_crc32c(b"123456789"))  # CRC32C check value 0xe3069283, masked
    '0xc78ab0e5'
    """
    global _CRC32C
    if _CRC32C is None:
        _CRC32C = require("google_crc32c", "tfrecord", "checking TFRecord CRCs", package="google-crc32c").value
    crc = _CRC32C(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def resolve_decode(decode, what: str):
    """``"example"`` -> the tf.train.Example decoder; None -> None (bytes); a function -> itself."""
    if decode == "example":
        return decode_example
    if decode is None or callable(decode):
        return decode
    raise TypeError(f"{what}(decode={decode!r}): decode is 'example' (tf.train.Example to a dict), None (the record's bytes) "
                    "or a function bytes -> sample")


def _check_header(header: bytes, name: str, record: int, offset: int) -> int:
    length, crc = _HEADER.unpack(header)
    if masked_crc32c(header[:8]) != crc:
        raise ShardFormatError(
            f"{name}: record {record} (byte {offset}) is damaged: the CRC of its length does not match. If the file is "
            "compressed, pass compression='GZIP' or 'ZLIB'; otherwise re-create or re-download it"
        )
    return length


def _scan(f, name: str) -> tuple[list[int], list[int]]:
    """(offsets, lengths) of every record of an uncompressed TFRecord file, from its headers."""
    end = f.seek(0, 2)
    f.seek(0)
    offsets, lengths = [], []
    offset = 0
    while offset < end:
        header = f.read(_HEADER.size)
        record = len(offsets)
        if len(header) < _HEADER.size:
            raise ShardFormatError(f"{name}: record {record} (byte {offset}) is cut short: the file ends inside its header; the file was truncated")
        length = _check_header(header, name, record, offset)
        stop = offset + _HEADER.size + length + _FOOTER.size
        if stop > end:
            raise ShardFormatError(
                f"{name}: record {record} (byte {offset}) is cut short: its {length} bytes run past the end of the file "
                f"({end} bytes); the file was truncated"
            )
        offsets.append(offset)
        lengths.append(length)
        offset = f.seek(stop)
    return offsets, lengths


def _check_data(data, crc: int, name: str, record: int, offset: int) -> None:
    if masked_crc32c(data) != crc:
        raise ShardFormatError(f"{name}: record {record} (byte {offset}) is damaged: the CRC of its data does not match; "
                               "re-create or re-download the file")


class TFRecordSource(Source):
    """Sample ``i`` is the ``i``-th record of the files (in file order), checked and decoded.

    The index is two int64 arrays (record offsets and lengths) and the
    first record of each file: compact for millions of records.
    """

    def __init__(self, files: ShardFiles, offsets: np.ndarray, lengths: np.ndarray, starts: np.ndarray, decode):
        self.files, self.offsets, self.lengths, self.starts, self.decode = files, offsets, lengths, starts, decode

    def __len__(self) -> int:
        return len(self.offsets)

    def _locate(self, index: int) -> tuple[int, int]:
        number = int(np.searchsorted(self.starts, index, side="right")) - 1
        return number, index - int(self.starts[number])

    def read(self, index: int):
        sample = self._record(index)
        if self.decode is decode_example:
            self._check_kinds(sample, index)
        return sample

    def _check_kinds(self, sample: dict, index: int) -> None:
        """Refuse a feature whose kind differs from the first record's (of the first file), read once per process."""
        reference = self.__dict__.get("_first_kinds")
        if reference is None:
            reference = self._first_kinds = feature_kinds(sample if index == 0 else self._record(0))
        number, record = self._locate(index)
        check_feature_kinds(sample, reference, f"{self.files.shown(number)} record {record}", f"{self.files.shown(0)} record 0")

    def _record(self, index: int):
        number, record = self._locate(index)
        name = self.files.shown(number)
        offset, length = int(self.offsets[index]), int(self.lengths[index])
        size = _HEADER.size + length + _FOOTER.size
        raw = self.files.read(number, offset, size)
        if len(raw) != size:
            raise ShardFormatError(f"{name}: record {record} (byte {offset}) ends early ({len(raw)} of {size} bytes); was the file replaced?")
        if _check_header(raw[:_HEADER.size], name, record, offset) != length:
            raise ShardFormatError(f"{name}: record {record} (byte {offset}) changed length since the index was built; was the file replaced?")
        data = raw[_HEADER.size:_HEADER.size + length]
        _check_data(data, _FOOTER.unpack_from(raw, size - _FOOTER.size)[0], name, record, offset)
        if self.decode is None:
            return data
        try:
            return self.decode(data)
        except Exception as e:
            raise ShardFormatError(f"{name}: record {record} cannot be decoded ({e}); pass decode=None for the record's bytes, "
                                   "or a function of your own") from e

    def take_counters(self) -> dict:
        return self.files.take_counts()

    def where(self, index: int) -> str:
        number, record = self._locate(index)
        return f"{self.files.shown(number)} record {record}"

    def describe(self) -> str:
        return f"from_tfrecord({len(self.files.names)} files, {len(self)} records, first {self.files.shown(0)!r})"


# ------------------------------------------------------------ compressed files: a stream per file
class _ZlibReader:
    """``read(n)`` over a ZLIB-compressed file object, decompressing as it goes."""

    def __init__(self, raw):
        self.raw, self.inflate, self.buffer = raw, zlib.decompressobj(), b""

    def read(self, n: int) -> bytes:
        while len(self.buffer) < n and not self.inflate.eof:
            chunk = self.raw.read(1 << 16)
            self.buffer += self.inflate.decompress(chunk) if chunk else self.inflate.flush()
            if not chunk:
                break
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


class CompressedRecords:
    """The generator factory of compressed TFRecord files: shard ``s`` is file ``s``, read front to back."""

    def __init__(self, files: ShardFiles, compression: str, decode):
        self.files, self.compression, self.decode = files, compression, decode

    def __call__(self, shard: int, num_shards: int):
        name = self.files.shown(shard)
        with self.files.open(shard, scan=True) as raw:
            stream = gzip.GzipFile(fileobj=raw, mode="rb") if self.compression == "GZIP" else _ZlibReader(raw)
            record, offset = 0, 0
            while True:
                try:
                    header = stream.read(_HEADER.size)
                    if not header:
                        return
                    if len(header) < _HEADER.size:
                        raise ShardFormatError(f"{name}: record {record} is cut short (the file ends inside its header)")
                    length = _check_header(header, name, record, offset)
                    body = stream.read(length + _FOOTER.size)
                except (OSError, EOFError, zlib.error) as e:
                    raise ShardFormatError(f"{name}: cannot decompress record {record} as {self.compression} ({e})") from e
                if len(body) < length + _FOOTER.size:
                    raise ShardFormatError(f"{name}: record {record} is cut short (the file ends inside its data)")
                _check_data(body[:length], _FOOTER.unpack_from(body, length)[0], name, record, offset)
                yield body[:length] if self.decode is None else self.decode(body[:length])
                record, offset = record + 1, offset + _HEADER.size + length + _FOOTER.size


# ------------------------------------------------------------ the factory
def from_tfrecord(paths, *, decode="example", compression: str | None = None, storage_options: dict | None = None,
                  cache_dir=None, cache_limit=None) -> Pipeline:
    """A pipeline over the records of TFRecord files, by index, without TensorFlow.

    The files' record headers are read once, here (the length CRCs are
    checked); then each record is one read, its data CRC checked, so
    ``shuffle()``, ``shard()``, any worker count and ``resume()`` behave as
    for any other source. A damaged record raises a `ShardFormatError`
    naming the file, the record number and its byte offset (while
    indexing, or when it is read, through ``map(on_error=...)``).

    Args:
        paths: a file, a list of files (kept in order), a glob pattern or
            a folder (sorted), brace ranges (``"train-{00..09}.tfrecord"``);
            URLs (``s3://``, ``https://``) are read through fsspec: each file
            is downloaded once into the local shard cache and read from there.
        decode: ``"example"``: a ``tf.train.Example`` becomes ``{name:
            value}`` (``int64_list`` -> int64 array, ``float_list`` ->
            float32 array, ``bytes_list`` -> list of bytes); None: the
            record's ``bytes``; or a function ``bytes -> sample`` (e.g. for
            ``SequenceExample`` or records that are not protobufs).
        compression: None, ``"GZIP"`` or ``"ZLIB"`` (as TensorFlow's
            ``compression_type``). Compressed files cannot be read by
            offset: each file becomes one shard of a stream
            (`from_generator`), read front to back by one worker, and the
            pipeline has no length.
        storage_options: fsspec options for URLs (endpoint, credentials).
        cache_dir: where remote files are cached (default: the remote
            stores' cache); False reads them by byte ranges, caching nothing.
        cache_limit: bytes (or ``"20GiB"``) the cache may take (default ``"50GiB"``).

    Raises:
        FileNotFoundError: no file matches.
        ShardFormatError: a damaged or truncated file (names file, record and byte offset); with
            ``decode="example"``, a feature whose kind differs from the first record's (when it is read).
        ImportError: ``google-crc32c`` (or protobuf, for ``"example"``) is missing: ``pip install 'feedline[tfrecord]'``.

    >>> import os, struct, tempfile, feedline as fl
    >>> from feedline.sources._tfrecord import masked_crc32c
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "data.tfrecord")
    >>> with open(path, "wb") as f:
    ...     for data in (b"first", b"second"):
    ...         length = struct.pack("<Q", len(data))
    ...         _ = f.write(length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data)))
    >>> list(fl.from_tfrecord(path, decode=None))
    [b'first', b'second']
    """
    decoder = resolve_decode(decode, "from_tfrecord")
    if compression is not None and compression not in ("GZIP", "ZLIB"):
        raise ValueError(f"from_tfrecord(compression={compression!r}): use None, 'GZIP' or 'ZLIB'")
    masked_crc32c(b"")  # fail now, not in a worker, when google-crc32c is missing
    names = expand_names(paths, "from_tfrecord", storage_options, SUFFIXES)
    files = ShardFiles(names, storage_options, cache_dir=cache_dir, cache_limit=cache_limit)
    if compression is not None:
        return from_generator(CompressedRecords(files, compression, decoder), len(names))

    scanned = files.scan_all(_scan, "the record headers of")
    counts = [len(offsets) for offsets, _ in scanned]
    starts = np.zeros(len(names), dtype=np.int64)
    np.cumsum(counts[:-1], out=starts[1:])
    offsets = np.fromiter((o for file_offsets, _ in scanned for o in file_offsets), dtype=np.int64, count=sum(counts))
    lengths = np.fromiter((n for _, file_lengths in scanned for n in file_lengths), dtype=np.int64, count=sum(counts))
    return Pipeline(TFRecordSource(files, offsets, lengths, starts, decoder))
