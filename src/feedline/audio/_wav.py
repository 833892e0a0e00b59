"""A fast reader for the most common training-audio file: 16-bit PCM WAV.

On short clips soundfile's time goes to overhead, not decoding (opening
through libsndfile, its buffered reads and int16-to-float loop); parsing
the RIFF header here and reading the samples with one ``readinto`` is
several times faster (measured in docs/audio.md, "Which library decodes"). The
result is the same array, bit for bit (tests/test_audio.py compares the
two readers).

Only plain ``WAVE_FORMAT_PCM`` with 16-bit samples and a known data length
is read here; `read_pcm16_header` returns None for anything else (float or 24-bit
samples, WAVE_FORMAT_EXTENSIBLE, RF64, a streamed file whose header does
not know its length, a file that is not WAV at all), and the caller hands
the file to libsndfile, which reads those and produces the error messages
for files it cannot read.
"""

from __future__ import annotations

import os
import struct

import numpy as np

__all__ = ["Pcm16Wav", "read_pcm16_header"]

_PCM = 1
_UNKNOWN_SIZES = (0, 0xFFFFFFFF)  # written by streaming writers: libsndfile works the length out
_MAX_CHUNKS = 64  # chunks before "data" we are willing to skip (LIST, fact, bext, ...)


class Pcm16Wav:
    """The header of an open 16-bit PCM WAV file, and a reader of frame windows.

    It reads from the file object it was made with and does not own it:
    whoever opened the file closes it.
    """

    format = "WAV"
    subtype = "PCM_16"

    def __init__(self, f, channels: int, sample_rate: int, data_offset: int, data_bytes: int, file_bytes: int):
        self._f = f
        self.channels = channels
        self.samplerate = sample_rate
        self.data_offset = data_offset
        self.data_bytes = data_bytes
        self.file_bytes = file_bytes
        self.frames = data_bytes // (2 * channels)

    @property
    def truncated(self) -> bool:
        """The header declares more sample bytes than the file holds."""
        return self.data_offset + self.data_bytes > self.file_bytes

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` frames from ``start`` as ``(count, channels)`` little-endian int16 (fewer if the file is short)."""
        block = 2 * self.channels
        out = np.empty((count, self.channels), dtype="<i2")
        if count == 0:
            return out
        self._f.seek(self.data_offset + start * block)
        got = self._f.readinto(memoryview(out).cast("B"))
        return out[: got // block]


def read_pcm16_header(f) -> Pcm16Wav | None:
    """`Pcm16Wav` for the open binary file ``f`` if it is a 16-bit PCM WAV file, else None."""
    try:
        header = _parse(f)
    except (OSError, struct.error):
        return None
    if header is None:
        return None
    channels, rate, offset, size = header
    return Pcm16Wav(f, channels, rate, offset, size, os.fstat(f.fileno()).st_size)


def _parse(f):
    """``(channels, rate, data_offset, data_bytes)`` of a plain 16-bit PCM WAV, else None."""
    head = f.read(12)
    if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    fmt = None
    position = 12
    for _ in range(_MAX_CHUNKS):
        chunk = f.read(8)
        if len(chunk) < 8:
            return None
        name, size = chunk[:4], struct.unpack("<I", chunk[4:])[0]
        position += 8
        if name == b"data":
            if fmt is None or size in _UNKNOWN_SIZES:
                return None
            tag, channels, rate, _, align, bits = fmt
            if tag != _PCM or bits != 16 or channels < 1 or align != 2 * channels or rate < 1:
                return None
            return channels, rate, position, size
        padded = size + (size & 1)  # chunks are word-aligned
        if name == b"fmt ":
            if size < 16:
                return None
            body = f.read(padded)
            fmt = struct.unpack("<HHIIHH", body[:16])
        else:
            f.seek(padded, os.SEEK_CUR)
        position += padded
    return None
