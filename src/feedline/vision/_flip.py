"""`flip`: mirror an image, always or with probability ``p`` drawn from the pipeline's rng."""

from __future__ import annotations

import numpy as np

from . import _deps
from ._geometry import check_rng
from ._source import as_image

__all__ = ["flip"]

_AXES = {"horizontal": 1, "vertical": 0}  # OpenCV's flipCode happens to equal NumPy's axis
_CV2_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.float32))


def flip(image: np.ndarray, rng: np.random.Generator | None = None, *, p: float = 0.5, direction: str = "horizontal") -> np.ndarray:
    """Mirror ``image`` left-right (or top-bottom); with ``rng``, only with probability ``p``.

    ``flip`` can be given to ``map`` directly: ``pipe.map(fv.flip)`` flips
    each image with probability 0.5, reproducibly. With ``rng`` exactly one
    number is drawn, flipped or not.

    Returns:
        A C-contiguous copy when flipped (safe for ``torch.from_numpy``),
        ``image`` itself when not.

    >>> import numpy as np, feedline.vision as fv
    >>> fv.flip(np.array([[1, 2, 3]]))
    array([[3, 2, 1]])
    """
    image = as_image(image, "flip")
    if direction not in _AXES:
        raise ValueError(f"flip(direction={direction!r}): use 'horizontal' or 'vertical'")
    if rng is not None:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"flip(p={p!r}): p is a probability, between 0 and 1")
        if not check_rng(rng, "flip").random() < p:
            return image
    cv2 = _deps.optional_cv2()
    if cv2 is not None and image.dtype in _CV2_DTYPES and (image.ndim == 2 or image.shape[2] <= 4):
        out = cv2.flip(image, _AXES[direction])  # far faster than NumPy's strided copy of 3-byte pixels
        return out[..., None] if out.ndim < image.ndim else out
    return np.flip(image, _AXES[direction]).copy()
