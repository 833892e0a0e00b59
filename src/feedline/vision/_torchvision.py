"""`from_torchvision`: a torchvision.transforms.v2 pipeline as a reproducible ``fn(sample, rng)``.

A torchvision v2 transform drops into ``map`` as it is, written the
torchvision way (``lambda img: t(torch.from_numpy(img).permute(2, 0, 1))``):
the batch stacks the tensors it returns like arrays. But v2 transforms draw
their random parameters from torch's process-wide generator, so the
augmentation then differs between runs, worker counts and backends.

`from_torchvision` ties the draw to the pipeline's ``rng``: each sample's
transform runs under ``torch.random.fork_rng`` with the generator seeded
from ``rng``, so the output is a function of ``(seed, epoch, index)`` only.
Because that generator is shared by every thread of a process, the seeded
call holds a lock: on the thread backend, reproducible torchvision
transforms run one at a time (use ``backend="process"``, where each worker
has its own generator, or ``reproducible=False`` to give up the guarantee
and run threads freely).
"""

from __future__ import annotations

import threading

import numpy as np

from ._geometry import check_rng

__all__ = ["TorchvisionOp", "from_torchvision"]


def from_torchvision(transform, *, reproducible: bool = True) -> TorchvisionOp:
    """Wrap a torchvision (v2) transform as ``fn(sample, rng)`` for ``Pipeline.map``.

    Args:
        transform: a ``torchvision.transforms.v2`` transform or ``Compose``
            (any callable taking a CHW tensor works).
        reproducible: seed torch's generator from the pipeline's ``rng`` for
            each sample (default). False calls the transform as it is.

    Returns:
        A picklable callable ``(sample, rng)``. A sample is an HWC image
        array (what `feedline.vision.decode` returns) or a dict with an
        ``"image"`` and optionally a ``"mask"`` (HW or HWC) that get the same
        geometric transform. Arrays come back as NumPy in torchvision's
        layout: CHW images (float32 after ``ToDtype``), HW masks.

    Example (torchvision installed)::

        from torchvision.transforms import v2
        t = v2.Compose([v2.RandomResizedCrop(224), v2.RandomHorizontalFlip(),
                        v2.ToDtype(torch.float32, scale=True), v2.Normalize(mean, std)])
        pipe = fl.from_files(paths).map(fv.decode).map(fv.from_torchvision(t), backend="process")
    """
    if not callable(transform):
        raise TypeError(f"from_torchvision() needs a torchvision transform (a callable); got {type(transform).__name__}")
    return TorchvisionOp(transform, reproducible)


class TorchvisionOp:
    """A torchvision transform run on NumPy samples, re-seeded from the pipeline's ``rng``."""

    def __init__(self, transform, reproducible: bool = True):
        self.transform = transform
        self.reproducible = reproducible
        self._lock = threading.Lock()

    def __call__(self, sample, rng: np.random.Generator):
        import torch
        from torchvision import tv_tensors

        check_rng(rng, "from_torchvision")
        if isinstance(sample, np.ndarray):
            inputs = tv_tensors.Image(_chw(torch, sample))
        elif isinstance(sample, dict) and "image" in sample:
            inputs = dict(sample)
            inputs["image"] = tv_tensors.Image(_chw(torch, sample["image"]))
            if "mask" in sample:
                inputs["mask"] = tv_tensors.Mask(torch.from_numpy(np.ascontiguousarray(sample["mask"])))
        else:
            raise TypeError(
                f"from_torchvision: a sample is an HWC image array or a dict with 'image' (and 'mask'); "
                f"got {type(sample).__name__}. Unpack it in your own function: lambda s, rng: (op(s[0], rng), s[1])"
            )
        if not self.reproducible:
            return _to_numpy(self.transform(inputs))
        seed = int(rng.integers(0, 2**63))
        with self._lock, torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = self.transform(inputs)
        return _to_numpy(out)

    def __getstate__(self):  # the lock stays behind
        return {"transform": self.transform, "reproducible": self.reproducible}

    def __setstate__(self, state):
        self.__init__(state["transform"], state["reproducible"])


def _chw(torch, image: np.ndarray):
    if image.ndim == 2:
        image = image[:, :, None]
    if image.ndim != 3:
        raise ValueError(f"from_torchvision: an image must be HW or HWC; got shape {image.shape}")
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)


def _to_numpy(out):
    if isinstance(out, dict):
        return {key: _to_numpy(value) for key, value in out.items()}
    if hasattr(out, "numpy") and hasattr(out, "detach"):
        return out.detach().cpu().numpy()
    return out
