"""Lazy imports of the decoder libraries, with an error that names the extra.

`feedline` itself needs only NumPy; the image libraries come with
``pip install 'feedline[vision]'`` and are imported on first use, so
``import feedline.vision`` is cheap and works without them.
"""

from __future__ import annotations

import functools
import importlib

from .._optional import require

__all__ = ["cv2", "optional_cv2", "pil_image", "simplejpeg"]


def _load(module: str, package: str, purpose: str):
    return require(module, "vision", f"feedline.vision ({purpose})", package=package)


@functools.cache
def simplejpeg():
    """simplejpeg (libjpeg-turbo): JPEG decoding, full size or reduced in the DCT domain."""
    return _load("simplejpeg", "simplejpeg", "to decode JPEG")


@functools.cache
def cv2():
    """OpenCV: PNG decoding and resizing."""
    return _load("cv2", "opencv-python-headless (OpenCV)", "to decode PNG and to resize")


@functools.cache
def optional_cv2():
    """OpenCV if it is installed, else None (for ops with a NumPy fallback)."""
    try:
        return importlib.import_module("cv2")
    except ImportError:
        return None


@functools.cache
def pil_image():
    """Pillow's ``Image``: palette and grey+alpha PNGs in ``mode="unchanged"``."""
    return _load("PIL.Image", "Pillow", "for palette or grey+alpha PNGs in mode='unchanged'")
