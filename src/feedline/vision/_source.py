"""What an image op accepts: a decoded array, or encoded bytes from a file or buffer.

`Encoded` holds the bytes and a name for errors, and tells the format from
the first bytes (never from the file extension: ImageNet has a PNG named
``.JPEG``).
"""

from __future__ import annotations

import os

import numpy as np

from ._errors import ImageDecodeError

__all__ = ["Encoded", "as_image", "is_encoded", "sniff"]

_MAGIC = (
    (b"\xff\xd8\xff", "jpeg"),
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
    (b"\x00\x00\x00\x0cjP  ", "JPEG 2000"),
)


def sniff(data) -> str:
    """``"jpeg"``, ``"png"``, another format's name, or ``"unknown"``, from the first bytes."""
    head = bytes(data[:12])
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[4:12] in (b"ftypavif", b"ftypheic", b"ftypmif1"):
        return "AVIF/HEIF"
    return "unknown"


def is_encoded(src) -> bool:
    """True for a path or a bytes-like buffer; False for a decoded array."""
    return isinstance(src, (str, os.PathLike, bytes, bytearray, memoryview))


class Encoded:
    """An encoded image: its bytes, a name for messages, and its format."""

    __slots__ = ("data", "format", "name")

    def __init__(self, src):
        if isinstance(src, (str, os.PathLike)):
            self.name = os.fspath(src)
            with open(self.name, "rb") as f:  # FileNotFoundError already names the path
                self.data = f.read()
        elif isinstance(src, (bytes, bytearray, memoryview)):
            self.data = src
            self.name = f"<{len(src)} bytes>"
        else:
            raise TypeError(
                f"expected an image: a file path, encoded bytes, or a decoded NumPy array; got {type(src).__name__}"
            )
        self.format = sniff(self.data)
        if self.format not in ("jpeg", "png"):
            if len(self.data) == 0:
                raise ImageDecodeError(self.name, "an image", "the file is empty")
            found = "unrecognised bytes" if self.format == "unknown" else f"a {self.format} file"
            raise ImageDecodeError(
                self.name,
                "an image",
                f"it is {found} (starts with {bytes(self.data[:8])!r})",
                "feedline.vision decodes JPEG and PNG; convert the file, or skip such samples with map(..., on_error='skip')",
            )


def as_image(image, op: str) -> np.ndarray:
    """Check that ``image`` is a decoded HWC (or HW) array, for ops that need one."""
    if not isinstance(image, np.ndarray):
        raise TypeError(f"{op}() needs a decoded image (a NumPy array, HWC or HW); got {type(image).__name__}")
    if image.ndim not in (2, 3) or image.shape[0] == 0 or image.shape[1] == 0:
        raise ValueError(f"{op}() needs an HWC or HW image with non-zero height and width; got shape {image.shape}")
    return image
