"""Read a box of an image at an output size, decoding as little as possible.

The one path every geometric op takes: find the image size (array shape,
or the file's header), choose the box from that size (so the box never
depends on how the image will be decoded), then, for a JPEG, decode at the
largest of 1/8, 1/4, 1/2 that still leaves the box at least as large as the
output, cut the box out (rounded to whole pixels of the reduced image) and
resample it to the output size.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._decode import check_mode, decode_encoded, size_of
from ._geometry import reduction, scale_box
from ._interpolate import check_interpolation, resize_array
from ._source import Encoded, as_image, is_encoded

__all__ = ["read_region"]


def read_region(
    src,
    box_for: Callable[[int, int], tuple],
    out_size: Callable[[tuple], tuple[int, int]],
    *,
    mode: str,
    reduced_decode: bool,
    interpolation: str,
    op: str,
    strict: bool = True,
) -> np.ndarray:
    """``src`` cropped to ``box_for(height, width)`` and resized to ``out_size(box)``.

    Args:
        src: a decoded HWC/HW array, a file path, or encoded bytes.
        box_for: ``(height, width) -> (top, left, h, w)`` in full-size pixels.
        out_size: ``box -> (out_h, out_w)``.
        mode: decode mode for encoded input (see `decode`).
        reduced_decode: allow JPEG DCT-domain reduction.
        interpolation: ``"area"``, ``"linear"`` or ``"nearest"`` (see `resize_array`).
        op: the op's name, for errors.
        strict: for encoded input, as in `decode`.
    """
    check_interpolation(interpolation, op)
    if is_encoded(src):
        check_mode(mode)
        enc = Encoded(src)
        height, width = size_of(enc)
        box = box_for(height, width)
        out_h, out_w = out_size(box)
        # "nearest" promises unblended pixels; a reduced JPEG decode averages blocks.
        reducible = reduced_decode and enc.format == "jpeg" and interpolation != "nearest"
        f = reduction(box[2], box[3], out_h, out_w) if reducible else 1
        image = decode_encoded(enc, mode, f, strict)
        box = scale_box(box, f, image.shape[0], image.shape[1])
    else:
        image = as_image(src, op)
        box = box_for(image.shape[0], image.shape[1])
        out_h, out_w = out_size(box)
    top, left, h, w = box
    return resize_array(image[top : top + h, left : left + w], out_h, out_w, interpolation)
