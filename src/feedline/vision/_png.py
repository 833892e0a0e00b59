"""PNG decoding: OpenCV (libpng) for pixels, a chunk walk for headers and errors.

Why OpenCV: it decodes PNGs as fast as Pillow or faster in every colour
type and releases the GIL for the whole decode, so the thread backend
scales; pyspng is a little faster on one core but holds the GIL, so two
threads gain nothing (benchmarks/decoders.py; docs/vision.md, "Decoders").

The chunk walk (signature, IHDR, every chunk complete, IEND present) costs
microseconds and runs before decoding, so a truncated file is reported as
truncated, with the chunk it ends in, instead of OpenCV's silent ``None``.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np

from . import _deps
from ._errors import ImageDecodeError
from ._interpolate import resize_array

__all__ = ["decode_png", "png_size"]

_COLOUR_TYPES = {0: "grey", 2: "RGB", 3: "palette", 4: "grey+alpha", 6: "RGBA"}


def _ihdr(data, name: str):
    """``(height, width, bit_depth, colour_type)`` from the IHDR chunk."""
    if len(data) < 33 or bytes(data[12:16]) != b"IHDR":
        raise ImageDecodeError(name, "png", f"truncated or damaged header ({len(data)} bytes, no IHDR chunk at byte 8)")
    width, height, depth, colour = struct.unpack(">IIBB", bytes(data[16:26]))
    if colour not in _COLOUR_TYPES or depth not in (1, 2, 4, 8, 16) or width == 0 or height == 0:
        raise ImageDecodeError(name, "png", f"invalid IHDR (width {width}, height {height}, bit depth {depth}, colour type {colour})")
    return height, width, depth, colour


def png_size(data, name: str) -> tuple[int, int]:
    """``(height, width)`` from the header, without decoding."""
    h, w, _, _ = _ihdr(data, name)
    return h, w


def _structure_problem(data) -> str | None:
    """Why the chunk structure is broken (truncation, no IEND), or None if it is whole."""
    pos, size, seen_idat = 8, len(data), False
    view = memoryview(data)
    while True:
        if pos + 8 > size:
            last = "the signature" if pos == 8 else "the last complete chunk"
            return f"truncated: the file ends after {last} at byte {pos} with no IEND chunk"
        length, kind = struct.unpack(">I4s", view[pos : pos + 8])
        kind = kind.decode("latin-1")
        end = pos + 12 + length
        if end > size:
            return f"truncated: the file ends inside the {kind} chunk (byte {size} of {end})"
        if kind == "IDAT":
            seen_idat = True
        elif kind == "IEND":
            return None if seen_idat else "no image data (no IDAT chunk)"
        pos = end


def _crc_problem(data) -> str | None:
    """The first chunk whose CRC does not match (only when decoding failed)."""
    pos, view = 8, memoryview(data)
    while pos + 12 <= len(data):
        length, kind = struct.unpack(">I4s", view[pos : pos + 8])
        body = view[pos + 4 : pos + 8 + length]
        (crc,) = struct.unpack(">I", view[pos + 8 + length : pos + 12 + length])
        if zlib.crc32(body) != crc:
            return f"damaged: CRC mismatch in the {kind.decode('latin-1')} chunk at byte {pos}"
        if kind == b"IEND":
            break
        pos += 12 + length
    return None


def decode_png(data, name: str, mode: str, reduce: int = 1) -> np.ndarray:
    """Decode PNG ``data`` to an HWC array in ``mode`` (see `feedline.vision.decode`)."""
    height, width, _depth, colour = _ihdr(data, name)
    problem = _structure_problem(data)
    if problem:
        raise ImageDecodeError(name, "png", problem)
    if mode == "unchanged" and colour in (3, 4):
        image = _pillow_unchanged(data, name)
    else:
        image = _opencv(data, name, mode)
    if image.shape[:2] != (height, width):
        raise ImageDecodeError(name, "png", f"decoded {image.shape[:2]} but the header says {(height, width)}")
    if reduce > 1:
        image = resize_array(image, -(-height // reduce), -(-width // reduce))
    return image


def _opencv(data, name: str, mode: str) -> np.ndarray:
    cv2 = _deps.cv2()
    buf = np.frombuffer(data, np.uint8)
    keep = cv2.IMREAD_IGNORE_ORIENTATION  # pixels as stored, like Pillow and libjpeg
    rgb_flag = getattr(cv2, "IMREAD_COLOR_RGB", None)  # OpenCV >= 4.10
    if mode == "RGB":
        image = cv2.imdecode(buf, (rgb_flag if rgb_flag is not None else cv2.IMREAD_COLOR) | keep)
        if image is not None and rgb_flag is None:
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    elif mode == "L":
        image = cv2.imdecode(buf, cv2.IMREAD_GRAYSCALE | keep)
    else:
        image = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED | keep)
        if image is not None and image.ndim == 3:
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB if image.shape[2] == 3 else cv2.COLOR_BGRA2RGBA)
    if image is None:
        reason = _crc_problem(data) or "libpng (through OpenCV) could not decode the compressed image data"
        raise ImageDecodeError(name, "png", reason)
    return image[..., None] if image.ndim == 2 else image


def _pillow_unchanged(data, name: str) -> np.ndarray:
    """Palette indices (HW1) or grey+alpha (HW2), which OpenCV would expand to colour."""
    image_mod = _deps.pil_image()
    try:
        with image_mod.open(io.BytesIO(data)) as im:
            array = np.asarray(im)  # mode P: the indices; mode LA: grey and alpha
    except (OSError, ValueError, SyntaxError) as exc:  # Pillow's decode failures
        reason = _crc_problem(data) or f"Pillow: {exc}"
        raise ImageDecodeError(name, "png", reason) from exc
    return array[..., None] if array.ndim == 2 else array
