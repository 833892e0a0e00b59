"""The workload of ``feedline demo``.

`run` makes a small image dataset (random images saved as ``.npy`` files),
runs the same load-and-augment pipeline twice, first as a plain Python loop
on one core and then with feedline, and prints the speed-up and the stage
profile of feedline's epoch. ``feedline.cli`` parses the arguments.
"""

from __future__ import annotations

import os
import tempfile
import time

from .cli import _Progress

__all__ = ["load_and_augment", "run"]


def _make_images(folder: str, count: int, size: int) -> list[str]:
    import numpy as np

    rng = np.random.default_rng(0)
    paths = []
    for i in range(count):
        path = os.path.join(folder, f"img_{i:05d}.npy")
        if not os.path.exists(path):
            np.save(path, rng.integers(0, 256, (size, size, 3), dtype=np.uint8))
        paths.append(path)
    return paths


def load_and_augment(path_label, rng):
    """The demo's per-sample work: load, random crop, flip, and a Python-heavy colour jitter.

    The jitter loops in Python on purpose: like many hand-written
    augmentations, it works pixel by pixel in Python and holds the GIL the
    whole time, so threads run it one at a time and give no speed-up;
    only worker processes run it in parallel.
    """
    import numpy as np

    path, label = path_label
    image = np.load(path)
    top, left = rng.integers(0, image.shape[0] - 48, size=2)
    crop = image[top : top + 48, left : left + 48]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    gains = [float(g) for g in rng.uniform(0.8, 1.2, size=3)]
    means = [float(v) for v in crop.reshape(-1, 3).mean(axis=0)]
    total = 0.0
    for _ in range(60):  # about 4 ms of pure Python per sample
        for c in range(3):
            for k in range(150):
                total += gains[c] * means[c] * k % 7
    out = np.clip(crop.astype(np.float32) * np.asarray(gains, np.float32), 0, 255)
    return out.transpose(2, 0, 1), np.int64(label + (total < 0))


def _naive(samples, batch_size):
    """How a user writes it without a loader: one core, one sample at a time."""
    import numpy as np

    from .worker import sample_rng

    batch_x, batch_y = [], []
    for index, sample in enumerate(samples):
        x, y = load_and_augment(sample, sample_rng(0, 0, index, 0))
        batch_x.append(x)
        batch_y.append(y)
        if len(batch_x) == batch_size:
            yield np.stack(batch_x), np.stack(batch_y)
            batch_x, batch_y = [], []
    if batch_x:
        yield np.stack(batch_x), np.stack(batch_y)


def run(*, samples: int, size: int, batch: int, workers: int | None = None, data: str | None = None) -> int:
    """Run the demo (``feedline demo``) and print its report; returns the exit status.

    Args:
        samples: number of images.
        size: image side in pixels.
        batch: batch size.
        workers: feedline's worker count; None: one per core.
        data: folder for the generated images; None: one in the temp folder.
    """
    import feedline as fl

    folder = data or os.path.join(tempfile.gettempdir(), "feedline-demo")
    os.makedirs(folder, exist_ok=True)
    print(f"feedline demo: {samples} images of {size}x{size}x3 in {folder}")
    paths = _make_images(folder, samples, size)
    labels = [i % 10 for i in range(len(paths))]
    pairs = list(zip(paths, labels))

    total = -(-len(pairs) // batch)
    progress = _Progress(total, "plain loop")
    t0 = time.perf_counter()
    naive_batches = 0
    for _ in _naive(pairs, batch):
        naive_batches += 1
        progress.update(naive_batches, naive_batches * batch)
    naive = time.perf_counter() - t0
    progress.close()
    print(f"  plain loop (1 core):  {naive:6.2f} s  {len(pairs) / naive:8.1f} samples/s  ({naive_batches} batches)")

    pipe = fl.from_files(paths, labels=labels).map(load_and_augment, workers=workers).batch(batch)
    with pipe:
        progress = _Progress(total, "feedline")
        t0 = time.perf_counter()
        count = 0
        for done, (x, _) in enumerate(pipe, 1):
            count += len(x)
            progress.update(done, count)
        elapsed = time.perf_counter() - t0
        progress.close()
        stats = pipe.stats()
    cores = stats.workers
    print(f"  feedline ({stats.backend} x{cores}): {elapsed:6.2f} s  {count / elapsed:8.1f} samples/s")
    speedup = naive / elapsed
    print(f"  speed-up {speedup:.2f}x on {cores} workers ({speedup / max(cores, 1):.0%} of the {cores}-core ideal)")
    print()
    print(pipe)
    print()
    print(stats)
    return 0
