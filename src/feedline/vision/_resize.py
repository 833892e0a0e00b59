"""`resize`: to an exact size, or the shorter side to a length."""

from __future__ import annotations

import numbers

import numpy as np

from ._geometry import pair, shorter_side_size
from ._region import read_region

__all__ = ["resize"]


def resize(image, size, *, interpolation: str = "area", mode: str = "RGB", reduced_decode: bool = True,
           strict: bool = True) -> np.ndarray:
    """Resize to ``(height, width)``, or (an ``int``) so the shorter side is ``size``.

    Shrinking averages the pixels each output pixel covers (OpenCV
    ``INTER_AREA``; ``interpolation="linear"`` for ``INTER_LINEAR``,
    ``"nearest"`` for label masks), enlarging interpolates linearly. Given a JPEG file or
    bytes, the JPEG is decoded at 1/2, 1/4 or 1/8 scale whenever that is
    still at least the output size.

    Args:
        image: a decoded HWC (or HW) array, a file path, or encoded bytes.
        size: ``int``: the shorter side's length, aspect kept (the longer
            side rounded down, as torchvision); ``(height, width)``: exact.
        interpolation: ``"area"``, ``"linear"`` or ``"nearest"`` (see `random_resized_crop`).
        mode: decode mode for encoded input (see `decode`).
        reduced_decode: allow DCT-domain reduction for JPEGs.
        strict: for encoded input, as in `decode`.

    >>> import numpy as np, feedline.vision as fv
    >>> fv.resize(np.zeros((375, 500, 3), np.uint8), 256).shape
    (256, 341, 3)
    """
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        length = pair(size, "resize")[0]

        def out_size(box):
            return shorter_side_size(box[2], box[3], length)
    else:
        exact = pair(size, "resize")

        def out_size(box):
            return exact

    return read_region(image, lambda h, w: (0, 0, h, w), out_size, mode=mode, reduced_decode=reduced_decode,
                       interpolation=interpolation, op="resize", strict=strict)
