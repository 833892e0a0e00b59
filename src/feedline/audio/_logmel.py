"""`LogMel`: a log-mel spectrogram in NumPy, with constants computed once.

Per call: frame the signal (a strided view, no copy), multiply by the
window, real FFT (``numpy.fft.rfft`` in float64), power, one matrix
product with the mel filterbank (in float64, so that a batch, a sample and
every BLAS thread count give the same float32 numbers), and decibels. The filterbank
and window come from `feedline.audio._mel`, cached per configuration and
process, so a call does no set-up work and a `LogMel` pickles as its
settings alone (process workers build their constants on first use).

The numbers follow librosa's ``feature.melspectrogram`` followed by
``power_to_db`` with the same settings (checked in tests/test_audio.py);
the one deliberate difference is that ``top_db`` is applied per
spectrogram (per channel of each sample), so a batch gives the same result
as its samples one at a time.
"""

from __future__ import annotations

import numbers
import threading

import numpy as np

from ._mel import mel_filterbank, mel_projection, periodic_hann

__all__ = ["LogMel"]

_PAD_MODES = ("constant", "reflect")
# Signals transformed together: a batch is cut into passes of this many rows, so
# the float64 temporaries stay in cache (one row at a time or a whole batch were slower per row).
_ROWS_PER_PASS = 8
_NORMS = ("slaney", None)
# Per-thread work arrays (see `_buffer`), and the largest one kept between calls.
_THREAD = threading.local()
_BUFFER_MAX_BYTES = 8 << 20
# numpy.fft.rfft writes into a given array from NumPy 2.0 on.
_RFFT_OUT = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"LogMel({what}=...) must be a positive integer, got {value!r}")
    return int(value)


class LogMel:
    """A log-mel spectrogram op: ``(..., frames)`` samples to ``(..., n_mels, n_frames)`` dB.

    Use it as a ``map`` function after decoding, or as a ``map_batch``
    function on a whole batch (the leading axes are kept, and the result of
    a batch equals its samples one by one). The mel filterbank and window
    are computed once per configuration in each process, on the first call.

    Defaults are those of speech front ends at 16 kHz: 25 ms windows
    (``n_fft=400``) every 10 ms (``hop_length=160``), 64 mel bands, power spectrum, decibels clipped 80 dB
    below each spectrogram's peak (librosa's ``power_to_db`` defaults).

    Args:
        sample_rate: Hz of the input; only sets the mel frequencies (the
            input is not resampled: load with ``sample_rate=`` to check it).
        n_fft: FFT size in samples.
        hop_length: samples between frames.
        n_mels: mel bands.
        win_length: Hann window length (``<= n_fft``, centred); default ``n_fft``.
        f_min, f_max: frequency range of the filters in Hz (``f_max``
            default ``sample_rate / 2``).
        power: 2.0 for power, 1.0 for magnitude.
        center: pad ``n_fft // 2`` on both sides so frame ``t`` is centred
            on sample ``t * hop_length`` (librosa's and torchaudio's default).
        pad_mode: ``"constant"`` (zeros, librosa's default) or ``"reflect"``.
        htk: HTK's mel scale instead of Slaney's.
        norm: ``"slaney"`` (area-normalised filters, librosa's default) or ``None``.
        top_db: clip each spectrogram at ``peak - top_db`` dB; ``None`` to keep all.
        amin: floor of the power before the logarithm.
        ref: the power that maps to 0 dB.

    Raises:
        ValueError: an invalid setting (on construction, not on first use).

    >>> import numpy as np
    >>> from feedline.audio import LogMel
    >>> logmel = LogMel(sample_rate=16000, n_mels=64)
    >>> x = np.sin(2 * np.pi * 440 * np.arange(16000) / 16000).astype(np.float32)
    >>> logmel(x).shape, logmel(x[None]).shape, logmel(np.stack([x[None]] * 3)).shape
    ((64, 101), (1, 64, 101), (3, 1, 64, 101))
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_fft: int = 400,
        hop_length: int = 160,
        n_mels: int = 64,
        *,
        win_length: int | None = None,
        f_min: float = 0.0,
        f_max: float | None = None,
        power: float = 2.0,
        center: bool = True,
        pad_mode: str = "constant",
        htk: bool = False,
        norm: str | None = "slaney",
        top_db: float | None = 80.0,
        amin: float = 1e-10,
        ref: float = 1.0,
    ):
        self.sample_rate = _positive_int(sample_rate, "sample_rate")
        self.n_fft = _positive_int(n_fft, "n_fft")
        self.hop_length = _positive_int(hop_length, "hop_length")
        self.n_mels = _positive_int(n_mels, "n_mels")
        self.win_length = self.n_fft if win_length is None else _positive_int(win_length, "win_length")
        if self.win_length > self.n_fft:
            raise ValueError(f"LogMel(win_length={self.win_length}) must be <= n_fft={self.n_fft}")
        self.f_min = float(f_min)
        self.f_max = float(self.sample_rate / 2 if f_max is None else f_max)
        if not 0.0 <= self.f_min < self.f_max <= self.sample_rate / 2:
            raise ValueError(
                f"LogMel needs 0 <= f_min < f_max <= sample_rate / 2 = {self.sample_rate / 2:g}; "
                f"got f_min={self.f_min:g}, f_max={self.f_max:g}"
            )
        if power not in (1.0, 2.0):
            raise ValueError(f"LogMel(power=...) must be 2.0 (power) or 1.0 (magnitude), got {power!r}")
        self.power = float(power)
        self.center = bool(center)
        if pad_mode not in _PAD_MODES:
            raise ValueError(f"LogMel(pad_mode=...) must be one of {', '.join(_PAD_MODES)}, got {pad_mode!r}")
        self.pad_mode = pad_mode
        self.htk = bool(htk)
        if norm not in _NORMS:
            raise ValueError(f"LogMel(norm=...) must be 'slaney' or None, got {norm!r}")
        self.norm = norm
        if top_db is not None and not top_db >= 0:
            raise ValueError(f"LogMel(top_db=...) must be >= 0 or None, got {top_db!r}")
        self.top_db = None if top_db is None else float(top_db)
        if not amin > 0:
            raise ValueError(f"LogMel(amin=...) must be > 0, got {amin!r}")
        self.amin = float(amin)
        if not ref > 0:
            raise ValueError(f"LogMel(ref=...) must be > 0, got {ref!r}")
        self.ref = float(ref)

    # The settings are the whole state: equality, hashing, printing and
    # pickling use them, and the cached constants are looked up from them.
    def _settings(self) -> dict:
        return dict(self.__dict__)

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and other._settings() == self._settings()

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._settings().items())))

    def __repr__(self) -> str:
        return (
            f"LogMel(sample_rate={self.sample_rate}, n_fft={self.n_fft}, hop_length={self.hop_length}, "
            f"n_mels={self.n_mels}, win_length={self.win_length}, f_min={self.f_min:g}, f_max={self.f_max:g}, "
            f"power={self.power:g}, center={self.center}, pad_mode={self.pad_mode!r}, htk={self.htk}, "
            f"norm={self.norm!r}, top_db={self.top_db}, amin={self.amin:g}, ref={self.ref:g})"
        )

    def filterbank(self) -> np.ndarray:
        """The mel filterbank, ``(n_mels, 1 + n_fft // 2)`` float32, read-only (cached)."""
        return mel_filterbank(self.sample_rate, self.n_fft, self.n_mels, self.f_min, self.f_max, self.htk, self.norm)

    def window(self) -> np.ndarray:
        """The analysis window, ``(n_fft,)`` float64, read-only (cached)."""
        return periodic_hann(self.n_fft, self.win_length)

    def num_frames(self, length: int) -> int:
        """Spectrogram frames for a signal of ``length`` samples."""
        padded = length + 2 * (self.n_fft // 2) if self.center else length
        return 1 + (padded - self.n_fft) // self.hop_length if padded >= self.n_fft else 0

    def __call__(self, samples) -> np.ndarray:
        """The log-mel spectrogram of ``samples`` (time on the last axis), float32 dB.

        Integer input is converted to float32 by value (not rescaled): load
        with ``dtype="float32"`` for samples in ``[-1, 1)``.
        """
        x = np.asarray(samples, dtype=np.float32)
        if x.ndim == 0:
            raise ValueError("LogMel needs samples with time on the last axis, got a 0-d array")
        lead, length = x.shape[:-1], x.shape[-1]
        rows = int(np.prod(lead, dtype=np.int64))
        if rows <= _ROWS_PER_PASS:
            return self._transform(x)
        flat = x.reshape(rows, length)
        out = np.empty((rows, self.n_mels, self.num_frames(length)), dtype=np.float32)
        for first in range(0, rows, _ROWS_PER_PASS):
            out[first : first + _ROWS_PER_PASS] = self._transform(flat[first : first + _ROWS_PER_PASS])
        return out.reshape(lead + out.shape[1:])

    def _transform(self, x: np.ndarray) -> np.ndarray:
        """`__call__` on a float32 array with few rows; temporaries live in per-thread buffers."""
        n_fft, half = self.n_fft, self.n_fft // 2
        length = x.shape[-1]
        if self.center:
            if self.pad_mode == "reflect":
                if length <= half:
                    raise ValueError(f"LogMel(pad_mode='reflect') needs more than n_fft // 2 = {half} samples, got {length}")
                x = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(half, half)], mode="reflect")
            else:  # zeros; np.pad costs several times more than this
                padded = _buffer("padded", x.shape[:-1] + (length + 2 * half,), np.float32)
                padded[..., :half] = 0.0
                padded[..., half + length :] = 0.0
                padded[..., half : half + length] = x
                x = padded
        elif length < n_fft:
            raise ValueError(f"LogMel(center=False) needs at least n_fft = {n_fft} samples, got {length}")
        else:
            x = np.ascontiguousarray(x)
        # Frames as a strided view of the (contiguous) signal: no copy.
        count = 1 + (x.shape[-1] - n_fft) // self.hop_length
        item = x.itemsize
        frames = np.lib.stride_tricks.as_strided(
            x, x.shape[:-1] + (count, n_fft), x.strides[:-1] + (self.hop_length * item, item), writeable=False
        )
        # float64 frames: NumPy's float32 rfft of a 2-D array is several times slower than
        # its float64 one, and librosa transforms in float64 too.
        windowed = np.multiply(frames, self.window(), out=_buffer("windowed", frames.shape, np.float64))
        n_freq = n_fft // 2 + 1
        spectrum_shape = frames.shape[:-1] + (n_freq,)
        if _RFFT_OUT:
            spectrum = np.fft.rfft(windowed, axis=-1, out=_buffer("spectrum", spectrum_shape, np.complex128))
        else:
            spectrum = np.fft.rfft(windowed, axis=-1)
        power = _buffer("power", spectrum_shape, np.float64)
        if self.power == 2.0:
            np.multiply(spectrum.real, spectrum.real, out=power)
            np.add(power, np.multiply(spectrum.imag, spectrum.imag, out=_buffer("imag2", spectrum_shape, np.float64)),
                   out=power)
        else:
            np.abs(spectrum, out=power)
        # One 2-D matrix product for any leading shape (a stacked matmul is not BLAS in
        # NumPy: several times slower on a batch), in float64 so that the float32 result does
        # not depend on the batch's shape or BLAS's threads (`mel_projection`); then
        # decibels, then (..., n_mels, n_frames).
        flat = power.reshape(-1, n_freq)
        projection = mel_projection(self.sample_rate, self.n_fft, self.n_mels, self.f_min, self.f_max, self.htk, self.norm)
        wide = np.matmul(flat, projection, out=_buffer("mel64", (flat.shape[0], self.n_mels), np.float64))
        mel = _buffer("mel", wide.shape, np.float32)
        np.copyto(mel, wide, casting="same_kind")
        np.maximum(mel, self.amin, out=mel)
        np.log10(mel, out=mel)
        mel *= 10.0
        mel -= 10.0 * np.log10(max(self.ref, self.amin))
        mel = mel.reshape(power.shape[:-1] + (self.n_mels,))
        if self.top_db is not None:
            peak = mel.max(axis=(-2, -1), keepdims=True)
            np.maximum(mel, peak - self.top_db, out=mel)
        return np.swapaxes(mel, -1, -2).copy(order="C")  # always a new array: the buffers are reused


def _buffer(name: str, shape: tuple, dtype) -> np.ndarray:
    """A work array of this thread, reused by the next call with the same shape.

    Why: the temporaries of one call are above glibc's mmap threshold, and
    in a fresh worker process glibc returned them to the system after every
    call and faulted them in again on the next, so workers spent much of
    their CPU in the kernel (docs/audio.md, "Log-mel"). Reusing the arrays
    removes the churn.
    Arrays over `_BUFFER_MAX_BYTES` (very long signals) are not kept.
    """
    buffers = getattr(_THREAD, "buffers", None)
    if buffers is None:
        buffers = _THREAD.buffers = {}
    array = buffers.get(name)
    if array is None or array.shape != shape or array.dtype != dtype:
        array = np.empty(shape, dtype)
        if array.nbytes <= _BUFFER_MAX_BYTES:
            buffers[name] = array
    return array
