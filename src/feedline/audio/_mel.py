"""The constant parts of a log-mel spectrogram: mel filterbank and window.

Both depend only on the configuration, so they are computed once per
configuration and process (`functools.lru_cache`), on first use, and shared
read-only by every call and thread. Nothing here is pickled: a `LogMel`
sent to a process worker carries its settings, and the worker builds its
own copy once.

The filterbank follows librosa's ``librosa.filters.mel`` exactly (Slaney's
mel scale, or HTK's, with Slaney area normalisation), in float64 then cast
to float32; tests/test_audio.py checks it against librosa. It is written
out here rather than imported because librosa would be a heavy runtime
dependency (numba, scipy, scikit-learn) and its first ``filters.mel`` call
pays numba's start-up, once in every worker process.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["hz_to_mel", "mel_filterbank", "mel_to_hz", "periodic_hann"]

# Slaney's mel scale (librosa's default): linear below 1 kHz, logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def hz_to_mel(hz, htk: bool = False) -> np.ndarray:
    """Frequencies in Hz to mels (Slaney's scale, or HTK's with ``htk=True``)."""
    hz = np.asarray(hz, dtype=np.float64)
    if htk:
        return 2595.0 * np.log10(1.0 + hz / 700.0)
    mels = hz / _F_SP
    high = hz >= _MIN_LOG_HZ
    return np.where(high, _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOGSTEP, mels)


def mel_to_hz(mels, htk: bool = False) -> np.ndarray:
    """Mels to frequencies in Hz; the inverse of `hz_to_mel`."""
    mels = np.asarray(mels, dtype=np.float64)
    if htk:
        return 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    hz = _F_SP * mels
    high = mels >= _MIN_LOG_MEL
    return np.where(high, _MIN_LOG_HZ * np.exp(_LOGSTEP * (mels - _MIN_LOG_MEL)), hz)


@functools.lru_cache(maxsize=32)
def mel_filterbank(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float, htk: bool, norm: str | None) -> np.ndarray:
    """Triangular mel filters, ``(n_mels, 1 + n_fft // 2)`` float32, read-only, cached.

    ``norm="slaney"`` divides each triangle by its width in Hz (constant
    energy per filter), as librosa does by default; ``None`` leaves peaks at 1.
    """
    fft_hz = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate)
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min, htk), hz_to_mel(f_max, htk), n_mels + 2), htk)
    widths = np.diff(edges)
    ramps = edges[:, None] - fft_hz[None, :]
    lower = -ramps[:-2] / widths[:-1, None]
    upper = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(lower, upper))
    if norm == "slaney":
        weights *= (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[:, None]
    out = weights.astype(np.float32)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=32)
def mel_projection(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float, htk: bool, norm: str | None) -> np.ndarray:
    """`mel_filterbank`'s float32 values as float64, transposed: ``(1 + n_fft // 2, n_mels)``, read-only, cached.

    The power spectrogram is projected onto the mel bands in float64 so that
    every batch shape and BLAS thread count gives the same float32 result:
    OpenBLAS's float32 kernels on AVX-512 machines summed in another order
    for a batch than for one sample, and with several threads than with
    one (1-ulp differences between backends); float64's rounding errors
    are far below float32's step, so they vanish when the result is stored.
    """
    out = np.ascontiguousarray(mel_filterbank(sample_rate, n_fft, n_mels, f_min, f_max, htk, norm).T, dtype=np.float64)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=32)
def periodic_hann(n_fft: int, win_length: int) -> np.ndarray:
    """A periodic Hann window of ``win_length``, zero-padded to ``n_fft`` at both sides (librosa's layout), float64."""
    n = np.arange(win_length, dtype=np.float64)
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * n / win_length)
    left = (n_fft - win_length) // 2
    out = np.zeros(n_fft, dtype=np.float64)
    out[left : left + win_length] = window
    out.setflags(write=False)
    return out
