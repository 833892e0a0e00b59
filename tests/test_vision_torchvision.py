"""torchvision.transforms.v2 inside ``map``: as it is, and reproducible with `from_torchvision`.

torchvision from PyPI does not import beside the CPU torch build CI installs
(torch 2.13.0 from local disk), so CI skips this module; it runs where
torch and torchvision match, e.g. ``pip install torch==2.14.1
torchvision==0.29.1`` (see docs/vision.md for the last run's result).
"""

from __future__ import annotations

import sys

import cloudpickle
import numpy as np
import pytest

torch = pytest.importorskip("torch")
try:
    from torchvision.transforms import v2
except Exception as exc:  # PyPI torchvision against another torch build fails at import with a RuntimeError
    pytest.skip(f"torchvision does not import here: {exc}", allow_module_level=True)
cv2 = pytest.importorskip("cv2")

import feedline as fl
import feedline.vision as fv

cloudpickle.register_pickle_by_value(sys.modules[__name__])

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    pytest.importorskip("simplejpeg")  # fv.decode's JPEG decoder (the GPU machine's image has none)
    folder = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    paths = []
    for i, (h, w) in enumerate([(75, 100), (100, 75), (60, 90), (90, 90)] * 3):
        image = rng.integers(0, 255, (h, w, 3), dtype=np.uint8)
        path = str(folder / f"{i}.jpg")
        cv2.imwrite(path, image)
        paths.append(path)
    return paths


def imagenet_transform():
    return v2.Compose([
        v2.RandomResizedCrop(32, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_torchvision_pipeline_drops_into_map_as_it_is(photos, backend, no_leaks):
    t = imagenet_transform()
    pipe = fl.from_files(photos).map(fv.decode).map(lambda img: t(torch.from_numpy(img).permute(2, 0, 1)), backend=backend, workers=2).batch(4)
    with pipe:
        batches = [b for b in pipe]
    assert [b.shape for b in batches] == [(4, 3, 32, 32)] * 3  # tensors are stacked like arrays
    assert batches[0].dtype == np.float32


def test_from_torchvision_is_reproducible_on_every_backend(photos, no_leaks):
    op = fv.from_torchvision(imagenet_transform())
    results = {}
    for backend in ("serial", "thread", "process"):
        pipe = fl.from_files(photos).shuffle(seed=4).map(fv.decode).map(op, backend=backend, workers=None if backend == "serial" else 2).batch(4)
        with pipe:
            results[backend] = [np.concatenate([b.copy() for b in pipe.epoch(e)]) for e in range(2)]
    assert results["serial"][0].shape == (12, 3, 32, 32)
    assert not np.array_equal(results["serial"][0], results["serial"][1])  # new crops each epoch
    for backend in ("thread", "process"):
        for got, want in zip(results[backend], results["serial"]):
            np.testing.assert_array_equal(got, want)


def test_from_torchvision_transforms_image_and_mask_together():
    op = fv.from_torchvision(v2.Compose([v2.RandomHorizontalFlip(p=1.0), v2.RandomCrop(8)]))
    image = np.arange(16 * 16 * 3, dtype=np.uint8).reshape(16, 16, 3)
    mask = image[..., 0].copy()
    out = op({"image": image, "mask": mask}, np.random.default_rng(1))
    assert out["image"].shape == (3, 8, 8) and out["mask"].shape == (8, 8)
    np.testing.assert_array_equal(out["image"][0], out["mask"])  # the same crop and flip on both


def test_from_torchvision_names_what_it_accepts():
    op = fv.from_torchvision(v2.RandomHorizontalFlip())
    with pytest.raises(TypeError, match="HWC image array or a dict"):
        op(("not", "an image"), np.random.default_rng(0))
    with pytest.raises(TypeError, match="needs a torchvision transform"):
        fv.from_torchvision("RandomHorizontalFlip")
