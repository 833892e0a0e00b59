"""Crop boxes and decode reductions: integer geometry, independent of any decoder.

A box is ``(top, left, height, width)`` in the pixels of the full-size
image. Boxes are drawn from the image's header size and the pipeline's
``rng`` only, and always consume the same random numbers, so an op gives
the same crop whether the image arrives decoded or encoded, and whatever
the decode reduction, backend or worker count.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["center_box", "check_rng", "pair", "random_resized_box", "reduction", "scale_box", "shorter_side_size"]

ATTEMPTS = 10  # as torchvision's RandomResizedCrop: then fall back to a centre crop


def pair(size, what: str) -> tuple[int, int]:
    """``size`` (an int, or ``(height, width)``) as ``(height, width)`` of positive ints."""
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size, size)
    try:
        h, w = size
    except (TypeError, ValueError):
        raise ValueError(f"{what}: size must be an int or (height, width), got {size!r}") from None
    for v in (h, w):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
            raise ValueError(f"{what}: size must be positive integers, got {size!r}")
    return int(h), int(w)


def check_rng(rng, op: str) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(
            f"{op}() needs the pipeline's rng (a numpy.random.Generator), got {type(rng).__name__}; "
            "write your map function as fn(sample, rng) and pass rng on"
        )
    return rng


def random_resized_box(height: int, width: int, rng: np.random.Generator, scale, ratio) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop box: an area fraction in ``scale``, an aspect ratio in ``ratio``.

    Draws all its random numbers at once (``2 * ATTEMPTS + 2``), whichever
    attempt succeeds.
    """
    lo, hi = float(scale[0]), float(scale[1])
    rlo, rhi = float(ratio[0]), float(ratio[1])
    if not (0 < lo <= hi) or not (0 < rlo <= rhi):
        raise ValueError(f"random_resized_crop: need 0 < scale[0] <= scale[1] and 0 < ratio[0] <= ratio[1]; got scale={scale}, ratio={ratio}")
    u = rng.random(2 * ATTEMPTS + 2)
    area = height * width
    log_lo, log_hi = math.log(rlo), math.log(rhi)
    for k in range(ATTEMPTS):
        target = area * (lo + (hi - lo) * u[2 * k])
        aspect = math.exp(log_lo + (log_hi - log_lo) * u[2 * k + 1])
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            top = int(u[-2] * (height - h + 1))
            left = int(u[-1] * (width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < rlo:
        w, h = width, min(height, round(width / rlo))
    elif in_ratio > rhi:
        h, w = height, min(width, round(height * rhi))
    else:
        h, w = height, width
    return (height - h) // 2, (width - w) // 2, h, w


def center_box(height: int, width: int, out_h: int, out_w: int) -> tuple[int, int, int, int]:
    """The centred ``out_h`` x ``out_w`` box, clipped to the image (top/left rounded down, as torchvision)."""
    h, w = min(out_h, height), min(out_w, width)
    return round((height - h) / 2.0), round((width - w) / 2.0), h, w


def shorter_side_size(height: int, width: int, size: int) -> tuple[int, int]:
    """Output size when the shorter side becomes ``size`` (aspect kept, as torchvision)."""
    if height <= width:
        return size, max(1, int(size * width / height))
    return max(1, int(size * height / width)), size


def reduction(box_h: int, box_w: int, out_h: int, out_w: int) -> int:
    """The largest of 8, 4, 2, 1 that keeps the box at least as large as the output.

    Decoding at 1/f and then shrinking never enlarges: the box still has at
    least ``out`` pixels each way at the reduced scale.
    """
    for f in (8, 4, 2):
        if box_h // f >= out_h and box_w // f >= out_w:
            return f
    return 1


def scale_box(box, f: int, height: int, width: int) -> tuple[int, int, int, int]:
    """``box`` (full-size pixels) in an image decoded at ``1/f`` (``height`` x ``width``), rounded to pixels."""
    top, left, h, w = box
    if f == 1:
        return box
    y0, x0 = round(top / f), round(left / f)
    y1, x1 = min(height, max(y0 + 1, round((top + h) / f))), min(width, max(x0 + 1, round((left + w) / f)))
    y0, x0 = min(y0, y1 - 1), min(x0, x1 - 1)
    return y0, x0, y1 - y0, x1 - x0
