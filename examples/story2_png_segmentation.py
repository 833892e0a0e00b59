"""Story 2: 512x512 PNG segmentation where the CPU, not the GPU, is the bottleneck.

The user decodes 512x512 PNG images and colour-coded PNG masks, crops, scales
to float and one-hots the mask, for a Keras model. A Keras DataGenerator with
workers and tf.data both left the GPU waiting. What they needed: to know
which stage is slow and whether training waits for data, and to stop
decoding PNGs every epoch.

This script makes a small synthetic dataset (96 image/mask pairs) and trains
the same tiny segmentation model four ways:

- old: a Keras Sequence (DataGenerator) with 2 worker threads;
- old: tf.data from the files (decode_png, parallel map, prefetch);
- new: feedline decoding the PNGs in parallel, then printing its profile:
  the verdict says whether training waited for data and which stage costs;
- new: feedline after decoding once into a NumPy file (what the profile
  advises; ``feedline convert`` / ``.cache()`` will do this in one command),
  with the random crop still done per epoch.

Run (about 30-50 s on 2 CPU cores):

    python examples/story2_png_segmentation.py
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
from PIL import Image

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras

import feedline as fl

COUNT, SIDE, CROP, BATCH, EPOCHS = 96, 512, 256, 3, 3
COLOURS = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0]], np.uint8)  # class k is drawn in COLOURS[k]


def make_dataset(folder: str) -> tuple[list[str], list[str]]:
    """Noisy gradient images and blob masks, as PNG files."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:SIDE, 0:SIDE]
    images, masks = [], []
    for i in range(COUNT):
        base = ((xx + yy * (i % 5)) % 256).astype(np.int16)
        image = np.clip(base[..., None] + rng.integers(-40, 41, size=(SIDE, SIDE, 3)), 0, 255).astype(np.uint8)
        cy, cx = rng.integers(64, SIDE - 64, size=2)
        label = ((yy - cy) ** 2 + (xx - cx) ** 2 < 80**2).astype(np.uint8) * (1 + i % 2)
        images.append(os.path.join(folder, f"img{i:03d}.png"))
        masks.append(os.path.join(folder, f"mask{i:03d}.png"))
        Image.fromarray(image).save(images[-1])
        Image.fromarray(COLOURS[label]).save(masks[-1])
    return images, masks


def crop_and_encode(image: np.ndarray, mask: np.ndarray, rng: np.random.Generator):
    """Random crop, scale to [0, 1], one-hot the colour-coded mask."""
    top, left = rng.integers(0, SIDE - CROP + 1, size=2)
    image = image[top : top + CROP, left : left + CROP].astype(np.float32) / 255.0
    mask = mask[top : top + CROP, left : left + CROP]
    onehot = np.stack([(mask == colour).all(axis=-1) for colour in COLOURS], axis=-1).astype(np.float32)
    return image, onehot


def load_pair(paths, rng):
    image_path, mask_path = paths
    return crop_and_encode(np.asarray(Image.open(image_path).convert("RGB")), np.asarray(Image.open(mask_path).convert("RGB")), rng)


class DataGenerator(keras.utils.Sequence):
    """The user's generator: decodes every PNG every epoch."""

    def __init__(self, images, masks, **kwargs):
        super().__init__(**kwargs)
        self.images, self.masks = images, masks
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return len(self.images) // BATCH

    def __getitem__(self, index):
        pairs = [load_pair(p, self.rng) for p in zip(self.images[index * BATCH : (index + 1) * BATCH], self.masks[index * BATCH : (index + 1) * BATCH])]
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def tf_data(images, masks):
    import tensorflow as tf

    colours = tf.constant(COLOURS)

    def load(image_path, mask_path):
        image = tf.io.decode_png(tf.io.read_file(image_path), channels=3)
        mask = tf.io.decode_png(tf.io.read_file(mask_path), channels=3)
        both = tf.image.random_crop(tf.concat([image, mask], axis=-1), (CROP, CROP, 6))
        onehot = tf.cast(tf.reduce_all(both[..., None, 3:] == colours, axis=-1), tf.float32)
        return tf.cast(both[..., :3], tf.float32) / 255.0, onehot

    ds = tf.data.Dataset.from_tensor_slices((images, masks)).shuffle(len(images))
    return ds.map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(BATCH, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def build_model():
    # Small on purpose: on the user's GPUs the model step was cheap and the input was the bottleneck.
    model = keras.Sequential([
        keras.Input((CROP, CROP, 3)),
        keras.layers.AveragePooling2D(4),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu"),
        keras.layers.Conv2D(len(COLOURS), 1),
        keras.layers.UpSampling2D(4),
        keras.layers.Softmax(),
    ])
    model.compile(optimizer="adam", loss="categorical_crossentropy")
    return model


def timed_fit(data) -> float:
    model = build_model()
    start = time.perf_counter()
    model.fit(data, epochs=EPOCHS, verbose=0, shuffle=False)  # each input shuffles itself
    return time.perf_counter() - start


def main():
    with tempfile.TemporaryDirectory() as folder:
        images, masks = make_dataset(folder)
        print(f"Story 2: {COUNT} PNG pairs of {SIDE}x{SIDE}, crop {CROP}, batch {BATCH}, {EPOCHS} epochs, "
              f"Keras backend {keras.backend.backend()}, {os.cpu_count()} CPUs\n")
        print(f"  old: Keras DataGenerator, 2 threads      {timed_fit(DataGenerator(images, masks, workers=2)):6.1f} s")
        if keras.backend.backend() == "tensorflow":
            print(f"  old: tf.data, parallel map, prefetch     {timed_fit(tf_data(images, masks)):6.1f} s")

        pipe = fl.from_files(images, labels=masks).shuffle(seed=0).map(load_pair).batch(BATCH, drop_remainder=True)
        with pipe:
            print(f"  new: feedline, decoding PNGs             {timed_fit(pipe.keras()):6.1f} s\n")
            print("  feedline's profile of the last epoch (is training waiting? which stage is slow?):")
            print("    " + str(pipe.stats()).replace("\n", "\n    ") + "\n")

        # Decode once (feedline convert / .cache() will do this in one command).
        start = time.perf_counter()
        decoded_images = np.lib.format.open_memmap(os.path.join(folder, "images.npy"), "w+", np.uint8, (COUNT, SIDE, SIDE, 3))
        decoded_masks = np.lib.format.open_memmap(os.path.join(folder, "masks.npy"), "w+", np.uint8, (COUNT, SIDE, SIDE, 3))
        for i, (image_path, mask_path) in enumerate(zip(images, masks)):
            decoded_images[i] = np.asarray(Image.open(image_path).convert("RGB"))
            decoded_masks[i] = np.asarray(Image.open(mask_path).convert("RGB"))
        decoded_images.flush()
        decoded_masks.flush()
        once = time.perf_counter() - start
        stored = fl.from_arrays(np.load(os.path.join(folder, "images.npy"), mmap_mode="r"), np.load(os.path.join(folder, "masks.npy"), mmap_mode="r"))
        pipe = stored.shuffle(seed=0).map(lambda pair, rng: crop_and_encode(pair[0], pair[1], rng)).batch(BATCH, drop_remainder=True)
        with pipe:
            print(f"  new: feedline, decoded once ({once:.1f} s, memory-mapped) {timed_fit(pipe.keras()):6.1f} s")


main()
