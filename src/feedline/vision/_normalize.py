"""`normalize`: a uint8 batch to normalised float32, NHWC or NCHW, in one pass over memory.

``(x / 255 - mean) / std`` is computed as ``x * a + b`` with per-channel
``a = 1 / (255 std)``, ``b = -mean / std``, in blocks small enough to stay
in the CPU cache: each block is read once as uint8 and written once as
float32. NHWC works on whole rows with ``a``, ``b`` tiled along the row (a
long inner loop instead of one of length C); NCHW works one (image,
channel) plane at a time, so the transposition costs nothing extra. Either
way it is several times faster than ``((x.astype(float32) / 255 - mean) / std)``
and a transpose (benchmarks/RESULTS.md, "Where the defaults come from").
NumPy releases the GIL in each block, so threads can overlap it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "normalize"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
"""Per-channel RGB mean of ImageNet on a 0-1 scale, for `normalize` (the values torchvision's models were trained with)."""
IMAGENET_STD = (0.229, 0.224, 0.225)
"""Per-channel RGB standard deviation of ImageNet on a 0-1 scale, for `normalize`."""
_ROWS_PER_BLOCK = 16
_LAYOUTS = ("NHWC", "NCHW")


def _per_channel(value, channels: int, what: str, default: float) -> np.ndarray:
    if value is None:
        return np.full(channels, default, np.float64)
    arr = np.asarray(value, np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, channels)
    if arr.size != channels:
        raise ValueError(f"normalize: {what} has {arr.size} values but the images have {channels} channels")
    return arr


def normalize(batch: np.ndarray, mean=None, std=None, *, layout: str = "NHWC", out: np.ndarray | None = None) -> np.ndarray:
    """``(batch / 255 - mean) / std`` as float32, in NHWC or NCHW layout.

    Meant for ``map_batch`` on batches of ``uint8`` images, where it runs
    in the worker that built the batch.

    Args:
        batch: ``uint8`` images, ``(N, H, W, C)`` (or one image ``(H, W, C)``).
        mean, std: per-channel values on the 0-1 scale (torchvision's
            convention; `IMAGENET_MEAN`, `IMAGENET_STD`), or one number for
            every channel. None: mean 0, std 1 (just ``x / 255``).
        layout: ``"NHWC"`` (channels last, Keras/JAX/TF) or ``"NCHW"``
            (channels first, PyTorch); ``"HWC"``/``"CHW"`` for one image.
        out: optional float32 array of the output shape to write into.

    Returns:
        A C-contiguous float32 array in ``layout``.

    >>> import numpy as np, feedline.vision as fv
    >>> x = np.full((2, 4, 4, 3), 255, np.uint8)
    >>> y = fv.normalize(x, mean=0.5, std=0.5, layout="NCHW")
    >>> y.shape, y.dtype, float(y.max())
    ((2, 3, 4, 4), dtype('float32'), 1.0)
    """
    if not isinstance(batch, np.ndarray) or batch.dtype != np.uint8:
        got = f"{batch.dtype} array" if isinstance(batch, np.ndarray) else type(batch).__name__
        raise TypeError(f"normalize() takes uint8 images (N, H, W, C); got a {got}. Apply it to the image part of the batch, e.g. map_batch(lambda b: (fv.normalize(b[0]), b[1]))")
    single = batch.ndim == 3
    layout = {"HWC": "NHWC", "CHW": "NCHW"}.get(layout, layout)
    if layout not in _LAYOUTS:
        raise ValueError(f"normalize(layout={layout!r}): use 'NHWC' or 'NCHW' ('HWC' or 'CHW' for one image)")
    if batch.ndim not in (3, 4):
        raise ValueError(f"normalize() takes (N, H, W, C) images; got shape {batch.shape}")
    x = batch[None] if single else batch
    n, h, w, c = x.shape
    mean64 = _per_channel(mean, c, "mean", 0.0)
    std64 = _per_channel(std, c, "std", 1.0)
    if np.any(std64 == 0):
        raise ValueError("normalize: std must not be 0")
    a = (1.0 / (255.0 * std64)).astype(np.float32)
    b = (-mean64 / std64).astype(np.float32)
    shape = (n, h, w, c) if layout == "NHWC" else (n, c, h, w)
    wanted = shape[1:] if single else shape
    if out is None:
        out = np.empty(wanted, np.float32)
    elif out.shape != wanted or out.dtype != np.float32 or not out.flags.c_contiguous:
        raise ValueError(f"normalize(out=...): need a C-contiguous float32 array of shape {wanted}")
    o = out.reshape(shape)
    if layout == "NHWC":
        rows_in = x.reshape(n * h, w * c)
        rows_out = o.reshape(n * h, w * c)
        a_row, b_row = np.tile(a, w), np.tile(b, w)
        for start in range(0, n * h, _ROWS_PER_BLOCK):
            block = rows_out[start : start + _ROWS_PER_BLOCK]
            np.multiply(rows_in[start : start + _ROWS_PER_BLOCK], a_row, out=block, dtype=np.float32)
            np.add(block, b_row, out=block)
    else:
        for i in range(n):
            for ch in range(c):
                plane = o[i, ch]
                np.multiply(x[i, :, :, ch], a[ch], out=plane, dtype=np.float32)
                np.add(plane, b[ch], out=plane)
    return out
