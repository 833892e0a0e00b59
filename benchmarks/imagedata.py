"""Synthetic photographs for the image benchmarks, made deterministically.

Nothing is downloaded: `photo` paints smooth colour fields, sharp-edged
blobs and sensor-like noise, which JPEG and PNG compress about as they
compress real photographs (a 500x375 `photo` is ~70 KB as a quality-90
JPEG; ImageNet's average training JPEG is ~110 KB at a similar size).

`jpeg_folder` writes (and caches) a folder of such JPEGs under
`workloads.cache_dir()`, so repeated runs reuse the files.
"""

from __future__ import annotations

import io
import os

import numpy as np

__all__ = ["encode_jpeg", "encode_png", "jpeg_folder", "photo"]


def photo(height: int, width: int, seed: int) -> np.ndarray:
    """A ``(height, width, 3)`` uint8 RGB image that compresses like a photograph."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height, dtype=np.float32)[:, None]
    x = np.linspace(0, 1, width, dtype=np.float32)[None, :]
    img = np.zeros((height, width, 3), np.float32)
    for c in range(3):
        acc = np.full((height, width), rng.uniform(60, 190), np.float32)
        for _ in range(6):
            fx, fy = rng.uniform(0.5, 12, 2)
            acc += rng.uniform(5, 35) * np.sin(2 * np.pi * (fx * x + fy * y) + rng.uniform(0, 6.28))
        img[..., c] = acc
    for _ in range(8):  # objects: sharp edges, flat colour
        cy, cx = rng.uniform(0, 1, 2)
        r = rng.uniform(0.03, 0.2)
        inside = ((y - cy) ** 2 + (x - cx) ** 2) < r * r
        img[inside] = img[inside] * 0.4 + rng.uniform(0, 255, 3).astype(np.float32) * 0.6
    img += rng.normal(0, 8, img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode_jpeg(image: np.ndarray, quality: int = 90) -> bytes:
    """JPEG bytes (Pillow, 4:2:0 chroma subsampling, the common camera/web setting)."""
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def encode_png(image: np.ndarray, mode: str) -> bytes:
    """PNG bytes of ``image`` stored as ``mode``: RGB, L, P, RGBA, RGB16 or L16."""
    from PIL import Image

    if mode in ("RGB16", "L16"):
        import cv2  # Pillow cannot write 16-bit colour PNGs

        wide = image.astype(np.uint16) * np.uint16(257)  # full 16-bit range, high byte = the 8-bit value
        if mode == "L16":
            wide = wide[..., 0]
        else:
            wide = wide[..., ::-1]  # OpenCV writes BGR
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(wide))
        if not ok:
            raise RuntimeError("cv2.imencode failed to write a 16-bit PNG")
        return buf.tobytes()
    im = Image.fromarray(image)
    if mode == "L":
        im = im.convert("L")
    elif mode == "P":
        im = im.quantize(256)
    elif mode == "RGBA":
        alpha = Image.fromarray(image[..., 1])
        im = im.convert("RGBA")
        im.putalpha(alpha)
    elif mode != "RGB":
        raise ValueError(f"unknown PNG mode {mode!r}")
    buf = io.BytesIO()
    im.save(buf, "PNG")
    return buf.getvalue()


def jpeg_folder(count: int, height: int = 375, width: int = 500, quality: int = 90) -> list[str]:
    """Paths of ``count`` cached JPEG photos (written on first use)."""
    from .workloads import cache_dir

    folder = os.path.join(cache_dir(), f"jpeg-{width}x{height}-q{quality}")
    os.makedirs(folder, exist_ok=True)
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"{i:06d}.jpg")
        if not os.path.exists(path):
            # Alternate landscape and portrait, like a photo collection.
            h, w = (height, width) if i % 4 else (width, height)
            tmp = path + ".part"
            with open(tmp, "wb") as f:
                f.write(encode_jpeg(photo(h, w, seed=i), quality))
            os.replace(tmp, path)
        paths.append(path)
    return paths
