"""Random crops of audio: of a decoded array, or (in `_decode`) of a file."""

from __future__ import annotations

import numbers

import numpy as np

__all__ = ["check_length", "crop_start", "random_crop"]


def check_length(length, what: str = "length") -> int:
    """``length`` as a positive int, or ValueError naming it."""
    if isinstance(length, bool) or not isinstance(length, numbers.Integral) or length < 1:
        raise ValueError(f"{what} must be a positive number of frames (an integer >= 1), got {length!r}")
    return int(length)


def crop_start(total: int, length: int, rng: np.random.Generator) -> int:
    """The first frame of a random window of ``length`` frames out of ``total``.

    Uniform over ``0 .. total - length``; one draw from ``rng`` when there is
    a choice, none when ``total <= length`` (the whole signal is taken and
    padded). `random_crop` and `load_random_crop` both use it, so cropping a
    decoded array and cropping at decode time pick the same window.
    """
    if total <= length:
        return 0
    return int(rng.integers(0, total - length + 1))


def random_crop(samples: np.ndarray, length: int, rng: np.random.Generator) -> np.ndarray:
    """A random window of ``length`` frames along the last axis of ``samples``.

    Works on any layout whose last axis is time: ``(frames,)``,
    ``(channels, frames)`` (what `load_audio` returns) or a batch
    ``(batch, channels, frames)`` (one window for the whole batch). A signal
    shorter than ``length`` is zero-padded at the end, so every crop has the
    same shape and batches stack.

    Args:
        samples: the signal, time on the last axis.
        length: frames to keep.
        rng: the ``numpy.random.Generator`` a ``map`` function receives as
            its second argument; the same generator state gives the same window.

    Returns:
        A view of ``samples`` (no copy) when it is at least ``length`` long,
        else a zero-padded copy.

    Raises:
        ValueError: ``length`` is not a positive integer, or ``samples`` is 0-d.

    >>> import numpy as np
    >>> from feedline.audio import random_crop
    >>> x = np.arange(10, dtype=np.float32)
    >>> random_crop(x, 4, np.random.default_rng(0)).tolist()
    [5.0, 6.0, 7.0, 8.0]
    >>> random_crop(x[:2], 4, np.random.default_rng(0)).tolist()
    [0.0, 1.0, 0.0, 0.0]
    """
    length = check_length(length)
    samples = np.asarray(samples)
    if samples.ndim == 0:
        raise ValueError("random_crop() needs an array with time on its last axis, got a 0-d array")
    total = samples.shape[-1]
    start = crop_start(total, length, rng)
    if total >= length:
        return samples[..., start : start + length]
    out = np.zeros(samples.shape[:-1] + (length,), dtype=samples.dtype)
    out[..., :total] = samples
    return out
