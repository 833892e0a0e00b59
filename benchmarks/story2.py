"""Story 2: 512x512 PNG + colour-coded mask -> crop, float, one-hot, batch 4 (the ``seg`` workload).

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks run --workload seg           # every loader; table in benchmarks/RESULTS.md
    python -m benchmarks run --workload seg --quick   # smoke test
    python -m benchmarks.story2 [--quick ...]         # the same as run --workload seg [...]

The user of story 2 (USER_STORIES.md) trains a Keras segmentation model on
512x512 RGB PNGs with colour-coded PNG label masks, through a Keras
``DataGenerator``: per sample ``cv2.imread`` + ``cvtColor`` of the image and
of the mask, a crop, ``np.float32(image) / 255.0``, and ``one_hot_it``: a
Python loop over the label colours, ``np.all(np.equal(label, colour),
axis=-1)`` for each, stacked and cast to float32. That code is `load_image`,
`one_hot_it` and `user_sample` below, as they wrote it; it is the shared
per-sample function every loader runs (`seg_sample`). The one change: the
crop is at a random offset drawn from the sample's index (`crop_offset`)
instead of their top-left ``[:h, :w]``, the same in every loader.

Native loader ``feedline-native``: the same work with ``feedline.vision``
ops: ``fv.decode`` of both PNGs, the same crop, ``fv.colour_mask_to_index``
per sample, ``fv.normalize`` (x / 255) and ``fv.one_hot`` on the whole
batch in ``map_batch``; automatic backend.

Data (`dataset`): 96 pairs (quick: 16), written once with Pillow under the
benchmark cache folder: a 512x512 RGB photo-like PNG (`imagedata.photo`
tinted by the label regions, ~0.5 MB) and its 512x512 RGB label PNG with 6
classes in CamVid-like colours. Crop 384x384; a batch is images
``(4, 384, 384, 3)`` float32 in 0-1, one-hot masks ``(4, 384, 384, 6)``
float32, and the indices. OpenCV's own thread pool is pinned to 1 thread
in every process (`_cv2`), as feedline does in its workers.

Last results: benchmarks/RESULTS.md, section "seg".
"""

from __future__ import annotations

import os
import sys

import numpy as np

from .loaders import feedline_native
from .workloads import Workload

__all__ = ["feedline_batch", "feedline_sample", "one_hot_it", "seg_sample", "seg_workload", "user_sample"]

SEED = 20240917
SIDE = 512
CROP = 384
BATCH = 4
COUNT = 96

# The label colours, in class order (CamVid-like; what the user's get_label_info(csv) returns).
CLASS_NAMES = ("void", "sky", "building", "tree", "road", "car")
LABEL_VALUES = [[0, 0, 0], [128, 128, 128], [128, 0, 0], [128, 128, 0], [128, 64, 128], [64, 0, 128]]


def _cv2():
    """OpenCV, its thread pool pinned to one thread (what feedline does in its workers), in every loader."""
    import cv2

    if cv2.getNumThreads() != 1:
        cv2.setNumThreads(1)
    return cv2


# ----------------------------------------------------------------------- data
def label_map(seed: int) -> np.ndarray:
    """``(SIDE, SIDE)`` uint8 class ids of a street-like scene (sky, buildings, trees, road, cars, void)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:SIDE, 0:SIDE]
    horizon = SIDE * rng.uniform(0.35, 0.5) + 12 * np.sin(2 * np.pi * (x / SIDE * rng.uniform(1, 3) + rng.uniform(0, 1)))
    cls = np.where(y < horizon, 1, 0).astype(np.uint8)  # sky above, void below
    for _ in range(int(rng.integers(3, 7))):  # buildings standing on the horizon
        left, width = rng.integers(0, SIDE - 40), rng.integers(40, 160)
        top = int(rng.uniform(0.1, 0.35) * SIDE)
        cls[(x >= left) & (x < left + width) & (y >= top) & (y < horizon + 20)] = 2
    for _ in range(int(rng.integers(2, 6))):  # trees: round crowns
        cy, cx, r = rng.uniform(0.25, 0.55) * SIDE, rng.uniform(0, SIDE), rng.uniform(20, 60)
        cls[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = 3
    road_top = horizon + 30
    half = (y - road_top) * rng.uniform(0.6, 1.1) + 20
    cls[(y > road_top) & (np.abs(x - SIDE / 2 - rng.uniform(-60, 60)) < half)] = 4
    for _ in range(int(rng.integers(1, 5))):  # cars on the road
        cy, cx = rng.uniform(0.65, 0.9) * SIDE, rng.uniform(0.1, 0.9) * SIDE
        h, w = rng.uniform(25, 50), rng.uniform(50, 110)
        cls[(np.abs(y - cy) < h / 2) & (np.abs(x - cx) < w / 2)] = 5
    return cls


def scene(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(photo-like RGB image, RGB colour-coded mask), both ``(SIDE, SIDE, 3)`` uint8."""
    from .imagedata import photo

    cls = label_map(seed)
    colours = np.array(LABEL_VALUES, np.uint8)
    tint = colours[cls].astype(np.float32) + np.array([40, 40, 40], np.float32)
    image = np.clip(photo(SIDE, SIDE, seed).astype(np.float32) * 0.6 + tint * 0.4, 0, 255).astype(np.uint8)
    return image, colours[cls]


def dataset(count: int) -> tuple[list[str], list[str]]:
    """Paths of ``count`` (image PNG, mask PNG) pairs, written once (Pillow) under `workloads.cache_dir`."""
    from PIL import Image

    from .workloads import cache_dir

    folder = os.path.join(cache_dir(), f"story2-png-{SIDE}-{count}")
    images = [os.path.join(folder, f"image_{i:04d}.png") for i in range(count)]
    masks = [os.path.join(folder, f"label_{i:04d}.png") for i in range(count)]
    if not all(os.path.exists(p) for p in images + masks):
        os.makedirs(folder, exist_ok=True)
        for i in range(count):
            image, mask = scene(SEED + i)
            for arr, path in ((image, images[i]), (mask, masks[i])):
                tmp = path + ".part.png"
                Image.fromarray(arr).save(tmp)
                os.replace(tmp, path)
    return images, masks


def crop_offset(index) -> tuple[int, int]:
    """(top, left) of sample ``index``'s crop: drawn from the index, the same in every loader."""
    top, left = np.random.default_rng((SEED, int(index))).integers(0, SIDE - CROP + 1, size=2)
    return int(top), int(left)


# --------------------------------------------------------- the user's code
def load_image(path):
    """The user's helper, verbatim: ``cv2.cvtColor(cv2.imread(path, -1), cv2.COLOR_BGR2RGB)``."""
    cv2 = _cv2()
    image = cv2.cvtColor(cv2.imread(path, -1), cv2.COLOR_BGR2RGB)
    return image


def one_hot_it(label, label_values):
    """The user's one-hot (Semantic-Segmentation-Suite's ``one_hot_it``): a loop over the colours."""
    semantic_map = []
    for colour in label_values:
        equality = np.equal(label, colour)
        class_map = np.all(equality, axis=-1)
        semantic_map.append(class_map)
    semantic_map = np.stack(semantic_map, axis=-1)
    return semantic_map


def user_sample(image_path, label_path, index):
    """One sample as the user's DataGenerator makes it: ``(image float32 HWC, one-hot float32 HWK)``."""
    top, left = crop_offset(index)
    input_image = load_image(str(image_path))[top : top + CROP, left : left + CROP]
    output_image = load_image(str(label_path))[top : top + CROP, left : left + CROP]
    # Prep the data. Make sure the labels are in one-hot format
    input_image = np.float32(input_image) / 255.0
    output_image = np.float32(one_hot_it(label=output_image, label_values=LABEL_VALUES))
    return input_image, output_image


def seg_sample(sample):
    """The shared per-sample function: ``((image path, mask path), index) -> (image, one-hot, index)``."""
    (image_path, label_path), index = sample
    x, y = user_sample(image_path, label_path, index)
    return x, y, index


# ------------------------------------------------------- feedline.vision
def feedline_sample(sample):
    """``(image path, mask path, index) -> (uint8 crop, uint8 class ids, index)`` with feedline.vision."""
    import feedline.vision as fv

    image_path, mask_path, index = sample
    top, left = crop_offset(index)
    image = fv.decode(str(image_path))[top : top + CROP, left : left + CROP]
    mask = fv.decode(str(mask_path))[top : top + CROP, left : left + CROP]
    return image, fv.colour_mask_to_index(mask, LABEL_VALUES), index


def feedline_batch(batch):
    """On the whole batch, in the worker: float32 x / 255 and float32 one-hot."""
    import feedline.vision as fv

    images, classes, index = batch
    return fv.normalize(images), fv.one_hot(classes, len(LABEL_VALUES)), index


def native_sample(sample):
    """``((image path, mask path), index)`` -> `feedline_sample`'s uint8 crop, class ids and index."""
    (image_path, mask_path), index = sample
    return feedline_sample((image_path, mask_path, index))


def seg_workload(quick: bool) -> Workload:
    n = 16 if quick else COUNT
    images, masks = dataset(COUNT)  # written once; quick takes the first 16
    images, masks = images[:n], masks[:n]
    mb = np.mean([os.path.getsize(p) for p in images]) / 1e6
    return Workload(
        name="seg",
        data=np.stack([np.array(images), np.array(masks)], axis=1),
        batch_size=BATCH,
        fn=seg_sample,
        description=f"story 2: {n} pairs of 512x512 RGB PNG photo-like images (~{mb:.2f} MB) and RGB colour-coded "
        f"label PNGs ({len(LABEL_VALUES)} classes) -> the user's code: cv2.imread + cvtColor, random {CROP}x{CROP} "
        f"crop, float32 / 255, one-hot by a loop over the colours; batch {BATCH}",
        hand={"backend": "thread", "workers": 2},
        hand_why="OpenCV's decode and NumPy's whole-array comparisons release the GIL",
        native={"feedline-native": feedline_native(native_sample, feedline_batch,
                                                     "feedline.vision, normalise + one-hot in map_batch")},
        notes={"feedline-native": "feedline.vision ops: fv.decode both PNGs, crop, fv.colour_mask_to_index per sample; "
                                  "fv.normalize + fv.one_hot in map_batch; automatic backend"},
    )


if __name__ == "__main__":
    from benchmarks.__main__ import main

    sys.exit(main(["run", "--workload", "seg"] + sys.argv[1:]))
