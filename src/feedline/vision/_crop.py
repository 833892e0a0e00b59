"""`random_resized_crop` and `center_crop`."""

from __future__ import annotations

import numpy as np

from ._decode import decode
from ._geometry import center_box, check_rng, pair, random_resized_box
from ._region import read_region
from ._source import as_image, is_encoded

__all__ = ["RATIO", "SCALE", "center_crop", "random_resized_crop"]

# torchvision's RandomResizedCrop defaults; `plan_random_resized_crop` takes the same, so the GPU path crops where this one does.
SCALE = (0.08, 1.0)  # the box's area, as a fraction of the image's
RATIO = (3 / 4, 4 / 3)  # the box's width / height


def random_resized_crop(
    image,
    size,
    rng: np.random.Generator,
    *,
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
    interpolation: str = "area",
    mode: str = "RGB",
    reduced_decode: bool = True,
    strict: bool = True,
) -> np.ndarray:
    """Crop a random area and aspect ratio, resized to ``size`` (the ImageNet training crop).

    The box follows torchvision's ``RandomResizedCrop``: up to 10 tries at
    an area fraction uniform in ``scale`` and an aspect ratio log-uniform in
    ``ratio``, then a centre crop. It is drawn from ``rng`` and the image
    size only, so it is the same whatever the backend, worker count, and
    however the image is decoded.

    Given a JPEG file or bytes (rather than a decoded array), the JPEG is
    decoded at 1/2, 1/4 or 1/8 scale in the DCT domain whenever the box is
    still at least ``size`` at that scale: a 224 crop of a 500x375 photo
    usually decodes a quarter of the pixels or fewer. The box is then
    placed to the nearest pixel of the reduced image (at most half an
    output pixel off), so the result is close to, not bit-identical with,
    decoding at full size (``reduced_decode=False``).

    Args:
        image: a decoded HWC (or HW) array, a file path, or encoded bytes.
        size: output ``int`` (square) or ``(height, width)``.
        rng: the pipeline's generator (``map(fn)`` with ``fn(sample, rng)``).
        scale: range of the box's area as a fraction of the image's.
        ratio: range of the box's width / height.
        interpolation: ``"area"`` (default: averages, no aliasing),
            ``"linear"`` (faster resampling that aliases when shrinking
            more than about a factor 1.5; albumentations' default), or ``"nearest"``
            (for label masks). To crop an image and its mask alike, give
            both a generator made from the same seed (see docs/vision.md).
        mode: decode mode for encoded input (see `decode`).
        reduced_decode: allow DCT-domain reduction for JPEGs.
        strict: for encoded input: a damaged JPEG raises (default), or
            False decodes what can be recovered (see `decode`).

    Returns:
        ``(height, width, C)`` array (``(height, width)`` for an HW input).

    >>> import numpy as np, feedline.vision as fv
    >>> img = np.zeros((375, 500, 3), np.uint8)
    >>> fv.random_resized_crop(img, 224, np.random.default_rng(0)).shape
    (224, 224, 3)
    """
    out = pair(size, "random_resized_crop")
    check_rng(rng, "random_resized_crop")
    return read_region(
        image,
        lambda h, w: random_resized_box(h, w, rng, scale, ratio),
        lambda box: out,
        mode=mode,
        reduced_decode=reduced_decode,
        interpolation=interpolation,
        op="random_resized_crop",
        strict=strict,
    )


def center_crop(image, size, *, mode: str = "RGB", strict: bool = True) -> np.ndarray:
    """The centred ``size`` crop; an image smaller than ``size`` is padded with zeros (as torchvision).

    No resampling: combine with `resize` for the evaluation transform,
    ``center_crop(resize(path, 256), 224)`` (the resize decodes JPEGs at a
    reduced scale when it can).

    Args:
        image: a decoded HWC (or HW) array, a file path, or encoded bytes.
        size: ``int`` (square) or ``(height, width)``.
        mode: decode mode for encoded input (see `decode`).
        strict: for encoded input, as in `decode`.

    >>> import numpy as np, feedline.vision as fv
    >>> fv.center_crop(np.arange(25).reshape(5, 5), 3)
    array([[ 6,  7,  8],
           [11, 12, 13],
           [16, 17, 18]])
    """
    out_h, out_w = pair(size, "center_crop")
    if is_encoded(image):
        image = decode(image, mode=mode, strict=strict)
    image = as_image(image, "center_crop")
    height, width = image.shape[:2]
    top, left, h, w = center_box(height, width, out_h, out_w)
    crop = image[top : top + h, left : left + w]
    if (h, w) == (out_h, out_w):
        return np.ascontiguousarray(crop)
    padded = np.zeros((out_h, out_w) + image.shape[2:], image.dtype)
    y, x = (out_h - h) // 2, (out_w - w) // 2
    padded[y : y + h, x : x + w] = crop
    return padded
