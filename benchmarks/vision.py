"""ImageNet-style training input: the ``jpeg`` and ``store`` workloads.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks run --workload jpeg            # every loader; table in benchmarks/RESULTS.md
    python -m benchmarks run --workload store --quick   # smoke test
    python -m benchmarks.vision                         # the same as --workload jpeg --workload store

jpeg: synthetic photos (`imagedata.photo`; 3 of 4 landscape 500x375, 1 of
4 portrait 375x500, quality-90 JPEG, ~70 KB), cached under the benchmark
cache folder. The shared per-sample function, `jpeg_sample`, is what a
torchvision user runs, written out with PIL and NumPy (torchvision from
PyPI does not install beside this project's torch 2.13 CPU build): PIL
decode, ``RandomResizedCrop(224)`` (scale 0.08-1, ratio 3/4-4/3, bilinear),
``RandomHorizontalFlip``, ``ToTensor`` + ``Normalize`` (ImageNet mean and
std), CHW float32; batch 64. Its random draws come from
``random.Random((SEED, index))``, the same in every loader. Native loaders:
``feedline-native`` (feedline.vision: DCT-domain reduced JPEG decode, crop,
flip per sample, normalise on the whole batch in ``map_batch``) and
``tf-native`` (``tf.io.decode_and_crop_jpeg`` + ``tf.image`` ops, the
TF ImageNet recipe).

store: the jpeg workload after the decode has been done once: the same
photos decoded to uint8 (portraits turned to landscape so every image is
375x500x3) and stored, then `store_sample` (the same crop, flip and
normalise from the array). Each loader reads its own format where it has
one: NumPy memory map (``data``: the generic loaders, DataLoader over a
memmap among them), a feedline store (``feedline-store``,
``fl.from_store``), an ArrayRecord file (``grain-arrayrecord``) and a
TFRecord file (``tf-tfrecord``). The files stay in the page cache (the
host has 24 GiB), so this measures reading and parsing, not the disk.

Last results: benchmarks/RESULTS.md, sections "jpeg" and "store".
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys

import numpy as np

from .imagedata import jpeg_folder
from .loaders import (
    Run,
    feedline_native,
    feedline_pipeline,
    grain_mp,
    tf_output_signature,
)
from .workloads import SEED, Workload, cache_dir

__all__ = ["jpeg_sample", "jpeg_workload", "pil_box", "store_sample", "store_workload"]

SIZE = 224
BATCH = 64
MEAN = np.array((0.485, 0.456, 0.406), np.float32)
STD = np.array((0.229, 0.224, 0.225), np.float32)
STORE_SHAPE = (375, 500, 3)


# ------------------------------------------- the shared function (PIL + NumPy)
def pil_box(width, height, rand, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's ``RandomResizedCrop.get_params``, written out: (top, left, h, w)."""
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target = area * rand.uniform(*scale)
        aspect = math.exp(rand.uniform(*log_ratio))
        w = round(math.sqrt(target * aspect))
        h = round(math.sqrt(target / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rand.randint(0, height - h), rand.randint(0, width - w), h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, round(width / min(ratio))
    elif in_ratio > max(ratio):
        h, w = height, round(height * max(ratio))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _augment(im, index) -> np.ndarray:
    """RandomResizedCrop + RandomHorizontalFlip + ToTensor + Normalize of a PIL image, drawn from ``index``."""
    from PIL import Image

    rand = random.Random(SEED * 1_000_003 + int(index))
    top, left, h, w = pil_box(im.width, im.height, rand)
    im = im.resize((SIZE, SIZE), Image.BILINEAR, box=(left, top, left + w, top + h))
    if rand.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    x = np.asarray(im, dtype=np.float32) * np.float32(1 / 255)
    return np.ascontiguousarray(((x - MEAN) / STD).transpose(2, 0, 1))


def jpeg_sample(sample):
    """``(path, index) -> (CHW float32 224x224, index)``: PIL decode, then `_augment`."""
    from PIL import Image

    path, index = sample
    with Image.open(str(path)) as im:
        im = im.convert("RGB")
    return _augment(im, index), index


def store_sample(sample):
    """``(HWC uint8 image, index) -> (CHW float32 224x224, index)``: `_augment` of a decoded image."""
    from PIL import Image

    image, index = sample
    return _augment(Image.fromarray(np.asarray(image)), index), index


# ------------------------------------------------------- jpeg: native loaders
def native_sample(sample, rng):
    """feedline.vision: reduced decode + random-resized-crop + flip, uint8 HWC (normalised per batch)."""
    import feedline.vision as fv

    path, index = sample
    return fv.flip(fv.random_resized_crop(str(path), SIZE, rng), rng), index


def native_normalise(batch):
    import feedline.vision as fv

    images, index = batch
    return fv.normalize(images, tuple(MEAN), tuple(STD), layout="NCHW"), index


@contextlib.contextmanager
def _tf_native(w: Workload):
    import tensorflow as tf

    mean, std = tf.constant(MEAN), tf.constant(STD)

    def load(path, index):
        data = tf.io.read_file(path)
        seed = tf.stack([index, index])
        begin, extent, _ = tf.image.stateless_sample_distorted_bounding_box(
            tf.io.extract_jpeg_shape(data), tf.zeros([1, 0, 4]), seed=seed, area_range=(0.08, 1.0),
            aspect_ratio_range=(3 / 4, 4 / 3), max_attempts=10, use_image_if_no_bounding_boxes=True)
        window = tf.stack([begin[0], begin[1], extent[0], extent[1]])
        image = tf.io.decode_and_crop_jpeg(data, window, channels=3)
        image = tf.image.resize(image, (SIZE, SIZE))  # bilinear, float32
        image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
        image = (image / 255.0 - mean) / std
        return tf.transpose(image, (2, 0, 1)), index

    ds = (tf.data.Dataset.from_tensor_slices((w.data.astype(str), w.index))
          .map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .batch(w.batch_size).prefetch(tf.data.AUTOTUNE))
    yield Run(ds.as_numpy_iterator(), "decode_and_crop_jpeg + tf.image, AUTOTUNE")


def jpeg_workload(quick: bool) -> Workload:
    n = 128 if quick else 512
    paths = jpeg_folder(n)
    kb = np.mean([os.path.getsize(p) for p in paths]) / 1e3
    return Workload(
        name="jpeg",
        data=np.array(paths),
        batch_size=BATCH,
        fn=jpeg_sample,
        description=f"{n} JPEG photos (500x375, 1 in 4 portrait, quality 90, ~{kb:.0f} KB) -> PIL decode, "
        f"RandomResizedCrop {SIZE} + flip + normalise (torchvision's recipe in PIL + NumPy), CHW float32; batch {BATCH}",
        hand={"backend": "thread", "workers": 2},
        hand_why="PIL releases the GIL while it decodes and resizes, and threads pay no start-up",
        native={"feedline-native": feedline_native(native_sample, native_normalise,
                                                     "feedline.vision, normalise in map_batch"), "tf-native": _tf_native},
        notes={
            "feedline-native": "from_arrays(paths).map(fv.random_resized_crop (reduced JPEG decode) + fv.flip)"
                               ".batch(64).map_batch(fv.normalize NCHW), automatic backend",
            "tf-native": "from_tensor_slices(paths).map(decode_and_crop_jpeg + stateless_sample_distorted_bounding_box "
                         "+ tf.image.resize + stateless flip + normalise, AUTOTUNE).batch(64).prefetch(AUTOTUNE)",
        },
    )


# --------------------------------------------------------------------- store
def _decoded(paths) -> np.memmap:
    """The photos decoded once into a ``(N, 375, 500, 3)`` uint8 memory map (cached)."""
    from PIL import Image

    path = os.path.join(cache_dir(), f"store-{len(paths)}.u8")
    shape = (len(paths),) + STORE_SHAPE
    if not os.path.exists(path):
        out = np.lib.format.open_memmap(path + ".part.npy", mode="w+", dtype=np.uint8, shape=shape)
        for i, p in enumerate(paths):
            with Image.open(p) as im:
                a = np.asarray(im.convert("RGB"))
            out[i] = a if a.shape == STORE_SHAPE else a.transpose(1, 0, 2)
        out.flush()
        del out
        os.replace(path + ".part.npy", path)
    return np.load(path, mmap_mode="r")


def _array_record(images: np.ndarray) -> str:
    """An ArrayRecord file, one record a sample: 8-byte little-endian index + the raw image bytes."""
    path = os.path.join(cache_dir(), f"store-{len(images)}.array_record")
    if not os.path.exists(path):
        from array_record.python.array_record_module import ArrayRecordWriter

        writer = ArrayRecordWriter(path + ".part", "group_size:1")
        for i in range(len(images)):
            writer.write(np.int64(i).tobytes() + images[i].tobytes())
        writer.close()
        os.replace(path + ".part", path)
    return path


def _tfrecord(images: np.ndarray) -> str:
    """A TFRecord file of ``tf.train.Example(image: raw bytes, index: int64)``."""
    path = os.path.join(cache_dir(), f"store-{len(images)}.tfrecord")
    if not os.path.exists(path):
        import tensorflow as tf

        with tf.io.TFRecordWriter(path + ".part") as writer:
            for i in range(len(images)):
                ex = tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[images[i].tobytes()])),
                    "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
                }))
                writer.write(ex.SerializeToString())
        os.replace(path + ".part", path)
    return path


def _feedline_store_path(images: np.ndarray, index: np.ndarray) -> str:
    """A feedline store of ``(image, index)`` samples, written once with ``.cache()``."""
    import feedline as fl

    path = os.path.join(cache_dir(), f"store-{len(images)}.feedline")
    with fl.from_arrays(images, index).cache(path).batch(256) as pipe:
        for _ in pipe:  # the first pass writes the store; later runs find it complete
            pass
    return path


def parse_record(record: bytes):
    """An ArrayRecord record -> ``(HWC uint8 image, index)``."""
    index = np.frombuffer(record, np.int64, count=1)[0]
    return np.frombuffer(record, np.uint8, offset=8).reshape(STORE_SHAPE), index


def _grain_arrayrecord(w: Workload):
    import grain

    ds_path = w.files["array_record"]
    return grain_mp(w, grain.sources.ArrayRecordDataSource([ds_path]), _parse_and_augment)


def _parse_and_augment(record: bytes):
    return store_sample(parse_record(record))


@contextlib.contextmanager
def _tf_tfrecord(w: Workload):
    import tensorflow as tf

    dtypes, shapes = tf_output_signature(w)
    spec = {"image": tf.io.FixedLenFeature([], tf.string), "index": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        ex = tf.io.parse_single_example(record, spec)
        return tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), STORE_SHAPE), ex["index"]

    def augment(image, index):
        out = tf.numpy_function(lambda a, i: list(store_sample((a, i))), [image, index], dtypes, stateful=False)
        for t, shape in zip(out, shapes):
            t.set_shape(shape)
        return tuple(out)

    ds = (tf.data.TFRecordDataset(w.files["tfrecord"])
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .map(augment, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .batch(w.batch_size).prefetch(tf.data.AUTOTUNE))
    yield Run(ds.as_numpy_iterator(), "TFRecordDataset, parse + numpy_function, AUTOTUNE")


def _feedline_store(w: Workload):
    import feedline as fl

    pipe = fl.from_store(w.files["feedline"]).map(store_sample).batch(w.batch_size)
    return feedline_pipeline(pipe, "from_store")


def _feedline_store_missing() -> str:
    """'' if feedline's store imports, else why not."""
    try:
        import feedline.store  # noqa: F401
        from feedline import from_store  # noqa: F401
    except ImportError as e:  # not written yet: the workload runs without it
        return f"feedline.store does not import yet ({type(e).__name__}: {str(e)[:120]})"
    return ""


def store_workload(quick: bool) -> Workload:
    n = 64 if quick else 512
    images = _decoded(jpeg_folder(n))
    w = Workload(
        name="store",
        data=images,
        batch_size=BATCH,
        fn=store_sample,
        description=f"the jpeg workload's first {n} photos decoded once to uint8 375x500x3 "
        f"({images.nbytes / 2**20:.0f} MiB) and read from a store -> the same crop {SIZE} + flip + normalise; "
        f"batch {BATCH}. Generic loaders read a NumPy memory map",
        hand={"backend": "thread", "workers": 2},
        hand_why="PIL releases the GIL while it resizes, and threads pay no start-up",
        native={"grain-arrayrecord": _grain_arrayrecord, "tf-tfrecord": _tf_tfrecord},
        native_exact={"grain-arrayrecord", "tf-tfrecord", "feedline-store"},
        notes={
            "grain-arrayrecord": "grain.MapDataset.source(ArrayRecordDataSource).map(parse + the shared function)"
                                 ".batch(64).to_iter_dataset().mp_prefetch(num_workers=2)",
            "tf-tfrecord": "TFRecordDataset.map(parse_single_example + decode_raw, AUTOTUNE).map(numpy_function("
                           "the shared function), AUTOTUNE).batch(64).prefetch(AUTOTUNE)",
            "feedline-store": "fl.from_store(path).map(the shared function).batch(64), automatic backend; "
                              "the store written once by fl.from_arrays(images, index).cache(path)",
        },
    )
    w.files = {"array_record": _array_record(images), "tfrecord": _tfrecord(images)}
    missing = _feedline_store_missing()
    if missing:
        w.skipped["feedline-store"] = missing
    else:
        w.files["feedline"] = _feedline_store_path(images, w.index)
        w.native["feedline-store"] = _feedline_store
    return w


if __name__ == "__main__":
    from benchmarks.__main__ import main

    sys.exit(main(["run", "--workload", "jpeg", "--workload", "store"] + sys.argv[1:]))
