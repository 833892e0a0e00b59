"""The ``feedline`` command line.

``feedline demo`` is the main job on an embedded default: it makes a small
image dataset, runs the same augmentation pipeline as a plain loop and
with feedline, and prints the speed-up and the epoch's stage profile.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

__all__ = ["main"]


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

    The jitter loops in Python on purpose: it holds the GIL like the
    hand-written augmentations of story 1 in USER_STORIES.md, the case
    where threads give nothing and processes are needed.
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

    from ._plan import sample_rng

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


def demo(args) -> int:
    import feedline as fl

    folder = args.data or os.path.join(tempfile.gettempdir(), "feedline-demo")
    os.makedirs(folder, exist_ok=True)
    print(f"feedline demo: {args.samples} images of {args.size}x{args.size}x3 in {folder}")
    paths = _make_images(folder, args.samples, args.size)
    labels = [i % 10 for i in range(len(paths))]
    samples = list(zip(paths, labels))

    t0 = time.perf_counter()
    naive_batches = sum(1 for _ in _naive(samples, args.batch))
    naive = time.perf_counter() - t0
    print(f"  plain loop (1 core):  {naive:6.2f} s  {len(samples) / naive:8.1f} samples/s  ({naive_batches} batches)")

    pipe = fl.from_files(paths, labels=labels).map(load_and_augment, workers=args.workers).batch(args.batch)
    with pipe:
        t0 = time.perf_counter()
        count = sum(len(x) for x, _ in pipe)
        elapsed = time.perf_counter() - t0
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="feedline", description="Keep accelerators fed: a parallel, deterministic input pipeline.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="run an augmentation pipeline the naive way and the feedline way, and compare")
    run.add_argument("--samples", type=int, default=600, help="number of images (default 600)")
    run.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    run.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    run.add_argument("--workers", type=int, default=None, help="worker count (default: one per core)")
    run.add_argument("--data", default=None, help="folder for the generated images (default: a temp folder)")
    run.set_defaults(handler=demo)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
