"""Story 3: images that do not fit in memory, a generator, and corrupt files.

The user streams tens of GB of images from disk into Keras. What went wrong:

1. A generator cannot be sent to worker processes (``PicklingError`` in
   Keras 2's ``fit_generator(workers>0, use_multiprocessing=True)``).
2. Where it can be copied (fork), each worker runs its own copy of the
   stream, so every sample is delivered once per worker, not once.
3. Their ``Sequence`` catches each failed load, marks the sample
   ``valid=0`` and goes on: corrupt samples still reach training as zeros,
   and nobody knows how many there were.
4. No clear gain from parallel loading.

This script reproduces 1-3 on a small synthetic folder (400 PNG files, 6 of
them corrupt), trains the user's Sequence with Keras (no workers, then 2
threads), then the same
loading with feedline: files are read by index, on demand (never all in
memory), each sample exactly once per epoch for any number of workers, the
shuffle reproducible from its seed, corrupt files skipped, counted and
named.

Run (about 30-50 s on 2 CPU cores):

    python examples/story3_larger_than_memory.py
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import time
import warnings

import numpy as np
from PIL import Image, ImageFilter

COUNT, SIDE, INPUT, BATCH, EPOCHS, CLASSES = 400, 256, 96, 32, 2, 4
CORRUPT = {17, 120, 233, 301, 345, 388}


def make_folder(folder: str) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(0)
    paths, labels = [], rng.integers(0, CLASSES, size=COUNT)
    for i in range(COUNT):
        path = os.path.join(folder, f"{i:04d}.png")
        image = rng.integers(0, 256, size=(SIDE, SIDE, 3), dtype=np.uint8)
        image[..., labels[i] % 3] //= 2  # the label leaves a trace the model can learn
        Image.fromarray(image).save(path)
        if i in CORRUPT:
            with open(path, "r+b") as f:
                f.truncate(200)  # a file cut short, as after a failed copy
        paths.append(path)
    return paths, labels


def load(path: str, rng: np.random.Generator) -> np.ndarray:
    """Decode, random rotation, blur, resize, scale: the user's per-image work."""
    with Image.open(path) as image:
        image = image.convert("RGB").rotate(float(rng.uniform(-15, 15)), resample=Image.BILINEAR)
        image = image.filter(ImageFilter.GaussianBlur(1)).resize((INPUT, INPUT), Image.LANCZOS)
        return np.asarray(image, dtype=np.float32) / 255.0


def stream(paths, labels):
    """The user's generator: the whole dataset, one sample at a time."""
    rng = np.random.default_rng(0)
    for path, label in zip(paths, labels):
        try:
            yield load(path, rng), label
        except OSError:
            continue


def _drain(generator, results) -> None:
    results.put(sum(1 for _ in generator))


def copies_of_the_stream(paths, labels) -> str:
    """What a process pool does with a generator: pickle it (spawn) or copy it (fork)."""
    generator = stream(paths, labels)
    try:
        pickle.dumps(generator)
        pickling = "pickle.dumps(generator) worked?"
    except TypeError as e:
        pickling = f"pickle.dumps(generator) -> TypeError: {e}"
    if "fork" not in multiprocessing.get_all_start_methods():
        return pickling
    # Two forked workers sharing "the" generator, as Keras 2 did: each runs its own copy.
    context = multiprocessing.get_context("fork")
    results = context.SimpleQueue()
    workers = [context.Process(target=_drain, args=(generator, results)) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    delivered = [results.get() for _ in workers]
    readable = len(paths) - len(CORRUPT & set(range(len(paths))))
    return (f"{pickling}\n      2 forked workers, one generator: {sum(delivered)} samples delivered "
            f"for {readable} readable files (each worker ran the whole stream)")


class SequenceData:
    """The user's Sequence: catch every load error, mark the sample invalid, carry on."""

    def __init__(self, paths, labels):
        self.paths, self.labels = paths, labels
        self.rng = np.random.default_rng(0)

    def __len__(self):
        return len(self.paths) // BATCH

    def __getitem__(self, index):
        x = np.zeros((BATCH, INPUT, INPUT, 3), np.float32)
        valid = np.ones(BATCH, np.float32)
        for row, i in enumerate(range(index * BATCH, (index + 1) * BATCH)):
            try:
                x[row] = load(self.paths[i], self.rng)
            except OSError:
                valid[row] = 0  # the zero image still goes to training
        return x, self.labels[index * BATCH : (index + 1) * BATCH], valid


def main():
    with tempfile.TemporaryDirectory() as folder:
        paths, labels = make_folder(folder)
        print(f"Story 3: {COUNT} PNG files ({len(CORRUPT)} corrupt), batch {BATCH}, {EPOCHS} epochs, {os.cpu_count()} CPUs\n")

        # 1 and 2, before any framework is imported (forking a process that runs TensorFlow is unsafe).
        print("  old: a generator and worker processes")
        print("      " + copies_of_the_stream(paths[:60], labels[:60]))

        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import keras

        import feedline as fl

        def build_model():
            model = keras.Sequential([
                keras.Input((INPUT, INPUT, 3)),
                keras.layers.Conv2D(8, 3, strides=2, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(CLASSES, activation="softmax"),
            ])
            model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
            return model

        class KerasSequence(SequenceData, keras.utils.Sequence):
            def __init__(self, *args, **kwargs):
                SequenceData.__init__(self, *args)
                keras.utils.Sequence.__init__(self, **kwargs)

        # 3 and 4: the user's Sequence, without and with Keras worker threads.
        invalid = sum(1 for i in CORRUPT if i < len(SequenceData(paths, labels)) * BATCH)  # rows that get valid=0
        for workers, what in ((1, "no workers"), (2, "2 threads ")):
            start = time.perf_counter()
            build_model().fit(KerasSequence(paths, labels, workers=workers), epochs=EPOCHS, verbose=0)
            print(f"  old: Keras Sequence, {what}, valid=0   {time.perf_counter() - start:6.1f} s   "
                  f"({invalid} zero images trained on per epoch, silently)")

        # feedline: files by index, decoded in workers, corrupt files skipped and named.
        # (The Sequence itself would also work: feedline.adapters.keras.from_keras_sequence(SequenceData(...)).)
        pipe = fl.from_files(paths, labels=labels).shuffle(seed=42).map(lambda s, rng: (load(s[0], rng), s[1]), on_error="skip").batch(BATCH)
        with pipe, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            start = time.perf_counter()
            build_model().fit(pipe.keras(), epochs=EPOCHS, verbose=0)
            new = time.perf_counter() - start
            stats = pipe.stats()
            print(f"  new: feedline, {stats.backend} x{stats.workers}, on_error='skip'  {new:6.1f} s   "
                  f"({len(stats.skipped)} corrupt files skipped per epoch, none trained on)")
            print(f"      skipped: {', '.join(os.path.basename(paths[i]) for i, _ in stats.skipped)}")
            print(f"      warnings: {len(caught)} (one per epoch, naming the skipped samples)")

            # Exactly once, and the order is a function of the seed only.
            delivered = sum(len(y) for _, y in pipe)

        def order_of_epoch_0():
            labelled = fl.from_files(paths, labels=labels).shuffle(seed=42).map(lambda sample: sample[1]).batch(BATCH)
            with labelled:
                return [int(v) for batch in labelled.epoch(0) for v in batch]

        print(f"      one more epoch: {delivered} samples = {COUNT} files - {len(CORRUPT)} corrupt, each once; "
              f"epoch 0's order is the same in two runs with seed=42: {order_of_epoch_0() == order_of_epoch_0()}")

main()
