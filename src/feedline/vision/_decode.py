"""`decode`: JPEG or PNG bytes (or a file) to a NumPy array in a documented layout."""

from __future__ import annotations

import numpy as np

from ._jpeg import decode_jpeg, jpeg_size
from ._png import decode_png, png_size
from ._source import Encoded

__all__ = ["MODES", "decode", "decode_encoded", "image_size", "size_of"]

MODES = ("RGB", "L", "unchanged")
"""The ``mode`` values of `decode`: ``"RGB"`` (HxWx3), ``"L"`` (grey, HxWx1) or ``"unchanged"`` (the channels and depth as stored)."""
REDUCTIONS = (1, 2, 4, 8)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} is not supported; the supported modes are {', '.join(map(repr, MODES))}")


def decode_encoded(enc: Encoded, mode: str, reduce: int = 1, strict: bool = True) -> np.ndarray:
    """Decode an `Encoded` image (format already known); ``strict`` as in `decode`."""
    if enc.format == "jpeg":
        return decode_jpeg(enc.data, enc.name, mode, reduce, strict)
    return decode_png(enc.data, enc.name, mode, reduce)


def size_of(enc: Encoded) -> tuple[int, int]:
    """``(height, width)`` of an `Encoded` image, from its header."""
    return jpeg_size(enc.data, enc.name) if enc.format == "jpeg" else png_size(enc.data, enc.name)


def decode(src, *, mode: str = "RGB", reduce: int = 1, strict: bool = True) -> np.ndarray:
    """Decode a JPEG or PNG file or buffer to a NumPy array.

    The format is read from the first bytes, not the file name. ``decode``
    can be given to ``map`` directly: ``pipe.map(fv.decode)``. Layouts
    (always 3-D, height x width x channels, C-contiguous):

    ``mode="RGB"`` (default): ``uint8`` with 3 channels, R, G, B.
        grey is repeated into the 3 channels; palette is looked up in the
        palette; alpha (RGBA, grey+alpha, palette transparency) is dropped,
        not composited; 16-bit samples keep their high byte (``v >> 8``);
        CMYK/YCCK JPEGs are converted by libjpeg-turbo.
    ``mode="L"``: ``uint8`` with 1 channel. Colour JPEGs give their Y
        (luma) plane directly; colour PNGs are converted with the BT.601
        weights (0.299 R + 0.587 G + 0.114 B); 16-bit keeps the high byte.
    ``mode="unchanged"``: the channels and depth as stored: grey (H, W, 1),
        grey+alpha (H, W, 2), RGB (H, W, 3), RGBA (H, W, 4); 16-bit PNGs
        stay ``uint16``; palette PNGs give their palette indices (H, W, 1),
        which is what a class-index mask stored as a palette PNG holds;
        grey of 1, 2 or 4 bits is scaled to 0-255.

    EXIF orientation is not applied: pixels come as stored.

    Args:
        src: a file path, or encoded bytes (``bytes``, ``bytearray``,
            ``memoryview``).
        mode: ``"RGB"``, ``"L"`` or ``"unchanged"``.
        reduce: 1, 2, 4 or 8: return the image at ``1/reduce`` of its
            size, ``ceil(height / reduce)`` x ``ceil(width / reduce)``.
            JPEGs are reduced inside the decoder (DCT-domain scaling, much
            cheaper than a full decode); PNGs are decoded, then shrunk
            (area averaging).
        strict: True (default): a JPEG that libjpeg-turbo reports as
            corrupt (damaged compressed data, stray bytes between markers)
            raises `ImageDecodeError`, like a truncated one. False: decode
            what libjpeg-turbo can recover (the damaged part comes out
            grey or smeared); a truncated JPEG still raises. PNGs are
            checked either way (chunk structure, and libpng's CRC and
            zlib checks). No decoder can notice damage that still reads
            as valid JPEG data (JPEG has no checksum): such a file decodes
            to wrong pixels without an error, with either setting.

    Returns:
        The array (see the layouts above).

    Raises:
        ImageDecodeError: the data is truncated, damaged (see ``strict``),
            or not a JPEG or PNG; the message names the file and gives the
            decoder's reason. It is a `feedline.DecodeError` (and a
            ``ValueError``).
        ValueError: an unsupported ``mode`` or ``reduce`` (the message
            lists the supported ones).
        ImportError: the decoder library is missing (install
            ``feedline[vision]``).

    >>> import numpy as np, feedline.vision as fv
    >>> from PIL import Image; import io
    >>> buf = io.BytesIO(); Image.new("RGB", (40, 30), (200, 10, 10)).save(buf, "PNG")
    >>> fv.decode(buf.getvalue()).shape
    (30, 40, 3)
    >>> fv.decode(buf.getvalue(), reduce=4).shape
    (8, 10, 3)
    """
    check_mode(mode)
    if reduce not in REDUCTIONS:
        raise ValueError(f"reduce={reduce!r} is not supported; use one of {', '.join(map(str, REDUCTIONS))}")
    return decode_encoded(Encoded(src), mode, reduce, strict)


def image_size(src) -> tuple[int, int]:
    """``(height, width)`` of a JPEG or PNG file or buffer, read from its header only.

    >>> import feedline.vision as fv
    >>> from PIL import Image; import io
    >>> buf = io.BytesIO(); Image.new("L", (40, 30)).save(buf, "JPEG")
    >>> fv.image_size(buf.getvalue())
    (30, 40)
    """
    return size_of(Encoded(src))
