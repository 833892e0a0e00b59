"""Decoding WAV and FLAC files into NumPy arrays, whole or a window of frames.

Layout: every function here returns ``(channels, frames)``, C-contiguous,
``float32`` in ``[-1, 1)`` or ``int16`` (the file's samples scaled to the
full int16 range by libsndfile). Channels-first because that is what
spectrograms, 1-D convolutions and torchaudio use, and a mono file is
``(1, frames)`` so that mono and stereo code paths are the same.

Readers: a path to a 16-bit PCM WAV file is read by `feedline.audio._wav`
(header parse and one ``readinto``: faster than libsndfile on short
clips, same result); everything else (FLAC, other WAV encodings, bytes,
file objects) by libsndfile through soundfile.

A window (`load_audio` with ``start``/``frames``, `load_random_crop`) is
read by seeking: only the frames of the window are decoded, for WAV (a file
offset) and for FLAC (libsndfile seeks through the seek table and decodes
from the nearest frame boundary).
"""

from __future__ import annotations

import contextlib
import io
import numbers
import os
import re
from dataclasses import dataclass

import numpy as np

from ._backend import soundfile, supported_formats
from ._crop import check_length, crop_start
from ._errors import AudioDecodeError, describe
from ._wav import Pcm16Wav, read_pcm16_header

__all__ = ["DTYPES", "AudioInfo", "audio_info", "load_audio", "load_random_crop"]

# The sample types one can ask for: float32 for models; int16 to keep the
# data 2 bytes a sample (half the memory and shared-memory traffic).
DTYPES = ("float32", "int16")

# libsndfile's open log says "data : <declared> (should be <available>)" when
# a WAV's data chunk claims more bytes than the file holds; it then silently
# decodes only what is there. feedline treats that as a truncated file.
_WAV_DATA_SHORT = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
_WAV_FORMATS = ("WAV", "WAVEX")
# Streaming writers that do not know the length write these sizes; not truncation.
_WAV_UNKNOWN_SIZES = (0, 0xFFFFFFFF)


@dataclass(frozen=True)
class AudioInfo:
    """What an audio file holds, from its header (nothing is decoded).

    Attributes:
        frames: samples per channel.
        sample_rate: frames per second (Hz).
        channels: number of channels.
        format: container, e.g. ``"WAV"`` or ``"FLAC"``.
        subtype: sample encoding, e.g. ``"PCM_16"`` or ``"FLOAT"``.

    Made by `audio_info` (see its example).

    >>> from feedline.audio import AudioInfo
    >>> AudioInfo(frames=48000, sample_rate=16000, channels=1, format="WAV", subtype="PCM_16").duration
    3.0
    """

    frames: int
    sample_rate: int
    channels: int
    format: str
    subtype: str

    @property
    def duration(self) -> float:
        """Seconds of audio."""
        return self.frames / self.sample_rate if self.sample_rate else 0.0


# ------------------------------------------------------------------ readers
class _Wav16Reader:
    """A 16-bit PCM WAV, converted exactly as libsndfile converts (x / 32768 for float32)."""

    def __init__(self, wav: Pcm16Wav, name: str):
        self._wav, self.name = wav, name
        self.frames, self.samplerate, self.channels = wav.frames, wav.samplerate, wav.channels
        self.format, self.subtype = wav.format, wav.subtype

    def read(self, start: int, count: int, dtype: str) -> np.ndarray:
        """``(channels, <= count)`` frames from ``start``."""
        data = self._wav.read(start, count).T
        if dtype == "int16":
            return np.ascontiguousarray(data, dtype=np.int16)
        out = np.empty(data.shape, dtype=np.float32)
        np.multiply(data, np.float32(1 / 32768), out=out)
        return out


class _SoundFileReader:
    """A libsndfile handle, decoding straight into the asked dtype."""

    def __init__(self, handle, name: str):
        self._handle, self.name = handle, name
        self.frames, self.samplerate, self.channels = handle.frames, handle.samplerate, handle.channels
        self.format, self.subtype = handle.format, handle.subtype

    def read(self, start: int, count: int, dtype: str) -> np.ndarray:
        """``(channels, <= count)`` frames from ``start``."""
        sf = soundfile()
        try:
            if start:
                self._handle.seek(start)
            data = self._handle.read(count, dtype=dtype, always_2d=True)
        except sf.SoundFileError as e:
            raise AudioDecodeError(
                self.name, f"{_reason(e)} (reading frames {start}-{start + count}; the file may be truncated or corrupt)"
            ) from e
        return np.ascontiguousarray(data.T)


@contextlib.contextmanager
def _reader(file, sample_rate: int | None):
    """An open reader for ``file``; every failure is an error naming the file."""
    name = describe(file)
    with contextlib.ExitStack() as stack:
        reader = None
        if isinstance(file, (str, os.PathLike)):
            f = stack.enter_context(open(file, "rb"))  # FileNotFoundError etc. name the file
            wav = read_pcm16_header(f)
            if wav is not None:
                if wav.truncated:
                    raise _truncated(name, wav.data_bytes, wav.file_bytes - wav.data_offset)
                reader = _Wav16Reader(wav, name)
            else:
                stack.close()  # libsndfile opens the file itself
        if reader is None:
            reader = _SoundFileReader(stack.enter_context(_open_soundfile(file, name)), name)
        if sample_rate is not None and reader.samplerate != sample_rate:
            raise AudioDecodeError(
                name,
                f"sample rate is {reader.samplerate} Hz, expected {sample_rate} Hz "
                "(feedline does not resample: resample the files once beforehand, or pass sample_rate=None)",
            )
        yield reader


@contextlib.contextmanager
def _open_soundfile(file, name: str):
    sf = soundfile()
    target = io.BytesIO(file) if isinstance(file, (bytes, bytearray, memoryview)) else file
    try:
        handle = sf.SoundFile(target)
    except sf.SoundFileError as e:
        reason = _reason(e)
        if "not recognised" in reason.lower() or "unknown format" in reason.lower():
            reason = f"{reason} ({supported_formats()})"
        raise AudioDecodeError(name, reason) from e
    with handle:
        if handle.format in _WAV_FORMATS:
            short = _WAV_DATA_SHORT.search(handle.extra_info)
            if short is not None and int(short[1]) not in _WAV_UNKNOWN_SIZES:
                raise _truncated(name, int(short[1]), int(short[2]))
        yield handle


def _truncated(name: str, declared: int, present: int) -> AudioDecodeError:
    return AudioDecodeError(
        name,
        f"truncated: the header declares {declared} bytes of samples but the file holds {present} "
        f"({present / max(declared, 1):.0%})",
    )


def _reason(error: Exception) -> str:
    """libsndfile's message without soundfile's "Error opening '...': " prefix (we name the file ourselves)."""
    text = str(error)
    if text.startswith("Error opening ") and ": " in text:
        text = text.split(": ", 1)[1]
    return text.strip() or type(error).__name__


def _read(reader, start: int, count: int, dtype: str, mono: bool) -> np.ndarray:
    """``count`` frames from ``start``, as ``(channels, count)`` (or ``(1, count)`` with ``mono``)."""
    data = reader.read(start, count, dtype)
    if data.shape[1] < count:
        raise AudioDecodeError(
            reader.name,
            f"truncated: the header declares {reader.frames} frames but decoding stopped at frame {start + data.shape[1]}",
        )
    if mono and data.shape[0] > 1:
        mixed = data.mean(axis=0, dtype=np.float32)
        if dtype == "int16":
            mixed = np.rint(mixed).astype(np.int16)
        return mixed[None, :]
    return data


# --------------------------------------------------------------- arguments
def _check_dtype(dtype) -> str:
    if isinstance(dtype, str) and dtype in DTYPES:  # the common case first: np.dtype(...).name is slow beside a lookup
        return dtype
    try:
        name = np.dtype(dtype).name if dtype is not None else None
    except TypeError:
        name = None
    if name not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return name


def _check_rate(sample_rate) -> None:
    if sample_rate is not None and (isinstance(sample_rate, bool) or not isinstance(sample_rate, numbers.Integral) or sample_rate < 1):
        raise ValueError(f"sample_rate must be a positive integer (Hz) or None, got {sample_rate!r}")


# ------------------------------------------------------------------ public
def audio_info(file) -> AudioInfo:
    """The header of an audio file: frames, sample rate, channels, format.

    Args:
        file: a path, bytes, or a binary file object.

    Raises:
        AudioDecodeError: not a readable audio file (names the file and why).
        FileNotFoundError: no such file.

    >>> import os, tempfile, wave
    >>> from feedline.audio import audio_info
    >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
    >>> path = os.path.join(tmp.name, "clip.wav")
    >>> with wave.open(path, "wb") as w:  # half a second of 16 kHz mono silence
    ...     w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000); w.writeframes(bytes(16000))
    >>> info = audio_info(path)
    >>> info.frames, info.sample_rate, info.channels, info.subtype, info.duration
    (8000, 16000, 1, 'PCM_16', 0.5)
    """
    with _reader(file, None) as reader:
        return AudioInfo(reader.frames, reader.samplerate, reader.channels, reader.format, reader.subtype)


def load_audio(
    file,
    *,
    start: int = 0,
    frames: int | None = None,
    dtype: str = "float32",
    mono: bool = False,
    sample_rate: int | None = None,
) -> np.ndarray:
    """Decode a WAV or FLAC file (or a window of it) into ``(channels, frames)``.

    Only the requested window is decoded: the reader seeks to ``start``.

    Args:
        file: a path, bytes (e.g. a field of a feedline store), or a binary
            file object. Paths are read in C (libsndfile, GIL released) or,
            for 16-bit PCM WAV, with one ``readinto``; bytes and file
            objects go through Python callbacks.
        start: first frame to read.
        frames: how many frames to read (at most: fewer if the file ends
            first); ``None`` reads to the end.
        dtype: ``"float32"`` (in ``[-1, 1)``) or ``"int16"``.
        mono: average the channels into one, ``(1, frames)``.
        sample_rate: if given, the file must have this rate (an error
            otherwise; feedline does not resample).

    Returns:
        A C-contiguous array of shape ``(channels, frames)``.

    Raises:
        AudioDecodeError: truncated, corrupt, non-audio or unsupported file,
            or a different sample rate; the message names the file and why.
        FileNotFoundError: no such file.
        ValueError: bad ``start``, ``frames`` or ``dtype``.

    >>> import io, numpy as np, soundfile
    >>> buf = io.BytesIO()
    >>> soundfile.write(buf, np.zeros((1600, 2), np.int16), 16000, format="WAV")
    >>> load_audio(buf.getvalue(), start=100, frames=400).shape
    (2, 400)
    """
    dtype = _check_dtype(dtype)
    _check_rate(sample_rate)
    if isinstance(start, bool) or not isinstance(start, numbers.Integral) or start < 0:
        raise ValueError(f"start must be a frame number >= 0, got {start!r}")
    if frames is not None:
        frames = check_length(frames, "frames")
    with _reader(file, sample_rate) as reader:
        total = reader.frames
        if start > total:
            raise ValueError(f"start={start} is past the end of {reader.name!r}, which has {total} frames")
        count = total - start if frames is None else min(frames, total - start)
        return _read(reader, int(start), count, dtype, mono)


def load_random_crop(
    file,
    length: int,
    rng: np.random.Generator,
    *,
    dtype: str = "float32",
    mono: bool = False,
    sample_rate: int | None = None,
) -> np.ndarray:
    """Decode a random window of ``length`` frames of a file: ``(channels, length)``.

    The window is chosen exactly as `random_crop` chooses it on the decoded
    array (same ``rng`` state, same window), but only its frames are
    decoded. A file shorter than ``length`` is read whole and zero-padded at
    the end, so every result has the same shape.

    Args:
        file: a path, bytes, or a binary file object.
        length: frames to return.
        rng: the ``numpy.random.Generator`` a ``map`` function receives.
        dtype, mono, sample_rate: as for `load_audio`.

    Raises:
        AudioDecodeError, FileNotFoundError, ValueError: as for `load_audio`.

    >>> import io, numpy as np, soundfile
    >>> buf = io.BytesIO()
    >>> soundfile.write(buf, np.zeros(32000, np.int16), 16000, format="FLAC")
    >>> load_random_crop(buf.getvalue(), 16000, np.random.default_rng(0)).shape
    (1, 16000)
    """
    dtype = _check_dtype(dtype)
    _check_rate(sample_rate)
    length = check_length(length)
    with _reader(file, sample_rate) as reader:
        total = reader.frames
        start = crop_start(total, length, rng)
        data = _read(reader, start, min(length, total), dtype, mono)
    if data.shape[1] == length:
        return data
    out = np.zeros((data.shape[0], length), dtype=data.dtype)
    out[:, : data.shape[1]] = data
    return out
