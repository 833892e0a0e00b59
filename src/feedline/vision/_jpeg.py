"""JPEG decoding with simplejpeg (libjpeg-turbo), full size or reduced in the DCT domain.

Why simplejpeg: in ``benchmarks/decoders.py`` it is the fastest JPEG
decoder on one core (500x375: 1357/s; OpenCV 1234, PyTurboJPEG 1278,
Pillow 1092), pip installs it by itself (libjpeg-turbo 3 inside the wheel;
PyTurboJPEG needs a system library), it releases the GIL while decoding,
reads the header without decoding, and decodes at exactly 1/2, 1/4 or 1/8
scale: the inverse DCT then produces a smaller image directly, so a
500x375 photo bound for a 224x224 crop costs a fraction of a full decode.

Orientation: EXIF orientation is not applied (pixels as stored, as Pillow
and torchvision's decoders do by default).
"""

from __future__ import annotations

import numpy as np

from . import _deps
from ._errors import ImageDecodeError

__all__ = ["STRICT_HINT", "decode_jpeg", "jpeg_size"]


def _header(data, name: str):
    try:
        return _deps.simplejpeg().decode_jpeg_header(data)
    except ValueError as exc:
        raise ImageDecodeError(name, "jpeg", f"libjpeg-turbo: {exc}") from exc


def jpeg_size(data, name: str) -> tuple[int, int]:
    """``(height, width)`` from the header, without decoding."""
    height, width, _, _ = _header(data, name)
    return height, width


STRICT_HINT = ("the compressed data is damaged: re-create or remove the file, skip such samples with "
               "map(..., on_error='skip'), or accept what libjpeg-turbo can recover with strict=False")


def decode_jpeg(data, name: str, mode: str, reduce: int = 1, strict: bool = True) -> np.ndarray:
    """Decode JPEG ``data`` to HWC uint8 in ``mode`` at ``1/reduce`` scale (see `feedline.vision.decode`).

    A truncated file is always an error. ``strict`` (the default): so is
    anything else libjpeg-turbo reports as corrupt data (a bad Huffman
    code, an unknown marker inside the compressed data, stray bytes
    between markers): such a file decodes to wrong pixels (grey or
    smeared blocks from the damage on), so it raises instead.
    ``strict=False`` decodes what libjpeg-turbo can recover (the old
    behaviour; the damaged region comes out grey or smeared). Damage that still parses as valid
    compressed data cannot be detected by any decoder (JPEG has no
    checksum) and decodes silently either way.
    """
    simplejpeg = _deps.simplejpeg()
    height, width, colourspace, _ = _header(data, name)
    grey = mode == "L" or (mode == "unchanged" and colourspace == "Gray")
    kwargs = {"colorspace": "GRAY" if grey else "RGB"}
    if reduce > 1:
        # The only scale >= reduce whose output is at least ceil(size / reduce) is 1/reduce itself.
        kwargs.update(min_height=-(-height // reduce), min_width=-(-width // reduce), min_factor=reduce)
    try:
        return simplejpeg.decode_jpeg(data, strict=True, **kwargs)
    except ValueError as exc:
        if "Premature end" in str(exc):
            raise ImageDecodeError(name, "jpeg", f"truncated (libjpeg-turbo: {exc})") from exc
        if strict:
            raise ImageDecodeError(name, "jpeg", f"damaged (libjpeg-turbo: {exc})", STRICT_HINT) from exc
        first = exc
    try:
        return simplejpeg.decode_jpeg(data, strict=False, **kwargs)
    except ValueError as exc:
        raise ImageDecodeError(name, "jpeg", f"libjpeg-turbo: {first}") from exc
