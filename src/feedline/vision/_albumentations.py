"""`from_albumentations`: an albumentations pipeline as a reproducible ``fn(sample, rng)``.

A user's albumentations ``Compose`` drops into ``map`` as it is
(``pipe.map(lambda s: aug(image=s)["image"])``), on the thread and process
backends: albumentations works in OpenCV, which releases the GIL. But it
draws from its own random state, so the augmentation then differs from run
to run and between backends. `from_albumentations` ties it to the
pipeline's ``rng``: before each sample, the transform is re-seeded from
``rng``, which makes the output a function of ``(seed, epoch, index)``
only.

Re-seeding changes the transform's state, so each thread works on its own
copy (made once per thread with ``copy.deepcopy``); process workers have
their own copy anyway.
"""

from __future__ import annotations

import copy
import threading

import numpy as np

from ._geometry import check_rng

__all__ = ["AlbumentationsOp", "from_albumentations"]


def from_albumentations(transform) -> AlbumentationsOp:
    """Wrap an albumentations transform as ``fn(sample, rng)`` for ``Pipeline.map``.

    Args:
        transform: an albumentations ``Compose`` (or single transform) with
            ``set_random_seed`` (albumentations 2.x).

    Returns:
        A picklable callable ``(sample, rng)``. A sample is an image array
        (the augmented image is returned) or a dict of targets
        (``{"image": ..., "mask": ...}``; the dict albumentations returns).

    Each sample's augmentation is drawn from the pipeline's seed, so an
    epoch repeats exactly (albumentations installed):

    >>> import albumentations as A
    >>> import numpy as np, feedline as fl, feedline.vision as fv
    >>> aug = A.Compose([A.RandomCrop(24, 24), A.HorizontalFlip()])
    >>> images = np.random.default_rng(0).integers(0, 255, (4, 32, 32, 3), dtype=np.uint8)
    >>> pipe = fl.from_arrays(images).map(fv.from_albumentations(aug), backend="serial").batch(4)
    >>> first, again = next(iter(pipe.epoch(0))), next(iter(pipe.epoch(0)))
    >>> first.shape, bool((first == again).all())
    ((4, 24, 24, 3), True)
    >>> pipe.close()
    """
    if not callable(transform) or not hasattr(transform, "set_random_seed"):
        raise TypeError(
            f"from_albumentations() needs an albumentations transform with set_random_seed() "
            f"(albumentations 2.x); got {type(transform).__name__}"
        )
    return AlbumentationsOp(transform)


class AlbumentationsOp:
    """An albumentations transform re-seeded from the pipeline's ``rng`` for each sample."""

    def __init__(self, transform):
        self.transform = transform
        self._local = threading.local()

    def __call__(self, sample, rng: np.random.Generator):
        check_rng(rng, "from_albumentations")
        transform = getattr(self._local, "transform", None)
        if transform is None:
            transform = self._local.transform = copy.deepcopy(self.transform)
        transform.set_random_seed(int(rng.integers(0, 2**32)))
        if isinstance(sample, dict):
            return transform(**sample)
        if isinstance(sample, np.ndarray):
            return transform(image=sample)["image"]
        raise TypeError(
            f"from_albumentations: a sample is an image array or a dict of targets (image=, mask=, ...); "
            f"got {type(sample).__name__}. Unpack it in your own function: "
            "lambda s, rng: (fn(s[0], rng), s[1])"
        )

    def __getstate__(self):  # the thread-local copies stay behind
        return {"transform": self.transform}

    def __setstate__(self, state):
        self.transform = state["transform"]
        self._local = threading.local()

    def __repr__(self) -> str:
        return f"from_albumentations({self.transform!r:.200})"
