"""The ``jpeg:QUALITY`` and ``png`` field encodings: arrays in, arrays out.

A field written with an image encoding holds the encoded bytes (Arrow
``large_binary``, so any tool reads the files as JPEG/PNG); reading decodes
them back to an array of the written shape, with the decoders of
`feedline.vision` (simplejpeg for JPEG, OpenCV for PNG; both release the
GIL, so gathers scale on the thread backend).

- ``jpeg:Q``: uint8, ``(H, W)``, ``(H, W, 1)`` or ``(H, W, 3)`` RGB;
  simplejpeg (libjpeg-turbo), 4:2:0 chroma subsampling for colour, the
  setting of most photo datasets. Lossy: pixels come back close, not equal.
- ``png``: uint8 or uint16, ``(H, W)`` or ``(H, W, 1|3|4)`` (grey, RGB,
  RGBA); OpenCV, its default (fast) compression level. Lossless.

`EncodedImage` lets a pipeline encode in its workers and hand the writer
finished bytes (``feedline convert`` does this), so encoding runs on every
core instead of in the writing process.
"""

from __future__ import annotations

import numpy as np

from ._errors import StoreError

__all__ = ["EncodedImage", "check_image", "decode_image", "encode_image"]


class EncodedImage:
    """An image already encoded as ``encoding`` (``"jpeg:90"``, ``"png"``), with its array shape and dtype."""

    __slots__ = ("data", "dtype", "encoding", "shape")

    def __init__(self, data: bytes, shape: tuple, dtype: str, encoding: str):
        self.data, self.shape, self.dtype, self.encoding = bytes(data), tuple(shape), np.dtype(dtype).str, encoding

    def __reduce__(self):
        return (EncodedImage, (self.data, self.shape, self.dtype, self.encoding))

    def __repr__(self) -> str:
        return f"EncodedImage({self.encoding}, shape={self.shape}, {len(self.data)} bytes)"


def check_image(shape: tuple, dtype, kind: str, field: str) -> None:
    """Raise `StoreError` unless arrays of ``shape``/``dtype`` can be encoded as ``kind`` (``jpeg``/``png``)."""
    dtype = np.dtype(dtype)
    channels = 1 if len(shape) == 2 else (shape[2] if len(shape) == 3 else None)
    if kind == "jpeg":
        ok = dtype == np.uint8 and channels in (1, 3)
        need = "uint8 images of shape (H, W), (H, W, 1) or (H, W, 3)"
    else:
        ok = dtype in (np.uint8, np.uint16) and channels in (1, 3, 4)
        need = "uint8 or uint16 images of shape (H, W) or (H, W, 1|3|4)"
    if not ok:
        raise StoreError(
            f"field {field!r} holds {dtype} arrays of shape {tuple(shape)}; the {kind} encoding takes {need}. "
            "Use encoding 'raw', 'zstd' or 'lz4' for this field."
        )


def encode_image(image: np.ndarray, encoding: str, field: str) -> bytes:
    """Encode one image for a field of the given encoding (see the module docstring)."""
    from ._format import parse_encoding

    kind, quality = parse_encoding(encoding, field)
    check_image(image.shape, image.dtype, kind, field)
    if kind == "jpeg":
        from ..vision import _deps

        simplejpeg = _deps.simplejpeg()
        grey = image.ndim == 2 or image.shape[2] == 1
        pixels = np.ascontiguousarray(image.reshape(image.shape[0], image.shape[1], 1 if grey else 3))
        return simplejpeg.encode_jpeg(
            pixels, quality=quality, colorspace="GRAY" if grey else "RGB", colorsubsampling="Gray" if grey else "420"
        )
    from ..vision import _deps

    cv2 = _deps.cv2()
    pixels = image
    if image.ndim == 3 and image.shape[2] == 3:
        pixels = image[..., ::-1]  # OpenCV writes BGR
    elif image.ndim == 3 and image.shape[2] == 4:
        pixels = image[..., [2, 1, 0, 3]]
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(pixels))
    if not ok:
        raise StoreError(f"OpenCV could not encode a {image.dtype} image of shape {image.shape} of field {field!r} as PNG")
    return buf.tobytes()


def decode_image(data, encoding: str, ndim: int, channels: int, name: str) -> np.ndarray:
    """Decode a stored image back to an array of ``ndim`` dimensions and ``channels`` channels.

    ``name`` describes the sample for errors (store, field and row).
    """
    from .._errors import DecodeError
    from ..vision import decode

    try:
        if encoding.startswith("jpeg"):
            image = decode(data, mode="L" if channels == 1 else "RGB")
        else:
            image = decode(data, mode="unchanged")
    except DecodeError as e:
        raise StoreError(f"{name}: the stored {encoding} image cannot be decoded ({e.reason}); the store is damaged, write it again") from e
    if ndim == 2:
        return image.reshape(image.shape[0], image.shape[1])
    if image.shape[2] != channels:
        raise StoreError(f"{name}: decoded {image.shape[2]} channels where the store says {channels}; the store is damaged")
    return image
