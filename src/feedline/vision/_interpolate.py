"""Resampling an array to an exact size (OpenCV), the one place every op resizes.

``interpolation="area"`` (the default) shrinks by averaging the input
pixels each output pixel covers (OpenCV ``INTER_AREA``): no aliasing, and
the natural continuation of a JPEG decoded at 1/2, 1/4 or 1/8, which
averages 2x2, 4x4 or 8x8 blocks (FFCV resizes this way too).
``"linear"`` (OpenCV ``INTER_LINEAR``, as albumentations) is several times
faster but aliases when it shrinks by more than about a factor 1.5.
Enlarging is linear.
``"nearest"`` copies the nearest input pixel, for label masks, whose
values must not be blended.
OpenCV releases the GIL while it resizes.
"""

from __future__ import annotations

import numpy as np

from . import _deps

__all__ = ["INTERPOLATIONS", "check_interpolation", "resize_array"]

INTERPOLATIONS = ("area", "linear", "nearest")


def check_interpolation(interpolation: str, op: str) -> None:
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"{op}(interpolation={interpolation!r}): use one of {', '.join(map(repr, INTERPOLATIONS))}")


def resize_array(image: np.ndarray, height: int, width: int, interpolation: str = "area") -> np.ndarray:
    """``image`` (HWC or HW) resampled to ``height`` x ``width``; the channel axis is kept."""
    h, w = image.shape[:2]
    if (h, w) == (height, width):
        return image
    cv2 = _deps.cv2()
    shrink = height <= h and width <= w
    channels = image.shape[2] if image.ndim == 3 else None
    if channels is not None and channels > 4:
        # OpenCV resizes at most 4 channels at once for some types: go in groups.
        parts = [resize_array(image[..., k : k + 4], height, width, interpolation) for k in range(0, channels, 4)]
        return np.concatenate(parts, axis=2)
    if interpolation == "nearest":
        flag = cv2.INTER_NEAREST_EXACT if hasattr(cv2, "INTER_NEAREST_EXACT") else cv2.INTER_NEAREST
    else:
        flag = cv2.INTER_AREA if (shrink and interpolation == "area") else cv2.INTER_LINEAR
    out = cv2.resize(image, (width, height), interpolation=flag)
    if channels == 1:
        out = out[..., None]  # OpenCV drops a single channel axis
    return out
