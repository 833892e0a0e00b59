"""The workload of ``feedline demo``.

`run` makes a small image dataset (random images saved as ``.npy`` files),
runs the same load-and-augment pipeline as a plain Python loop on one core,
then for two epochs with feedline (the first includes starting the workers
and choosing the backend, the second is what later epochs cost), and prints
the speed-up, why there is none when a small run shows none, and the stage
profile of feedline's second epoch. ``feedline.cli`` parses the arguments.
"""

from __future__ import annotations

import os
import tempfile
import time

from ._progress import Progress
from .engine._remembered import STARTED_ON_IT

__all__ = ["explain", "load_and_augment", "run"]


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


def _feedline_epoch(pipe, total: int, label: str) -> tuple[float, int]:
    """Run one epoch of ``pipe``; (seconds, samples)."""
    progress = Progress(total, label)
    t0 = time.perf_counter()
    count = 0
    for done, (x, _) in enumerate(pipe, 1):
        count += len(x)
        progress.update(done, count)
    elapsed = time.perf_counter() - t0
    progress.close()
    return elapsed, count


def explain(samples: int, naive: float, cold: float, warm: float, cold_stats, warm_stats, load: float | None = None) -> list[str]:
    """What the three timings show, in words: the speed-up, or why there is none at this size.

    ``naive``: the plain loop; ``cold``: feedline's first epoch (workers
    starting, the backend being chosen); ``warm``: its next epoch, as every
    later epoch of a training run. ``load``: the 1-minute load average
    before the demo started (other programs' demand for the cores).
    Returns the lines to print.
    """
    workers, cores = warm_stats.workers, warm_stats.cores
    steady, first = naive / warm, naive / cold
    lines = [f"  speed-up {steady:.2f}x per epoch once running ({warm_stats.backend} x{workers}: "
             f"{steady / max(workers, 1):.0%} of the {workers}-worker ideal); first epoch {first:.2f}x"]
    cpu = warm_stats.cpu_share
    if steady <= 1.05:
        if workers <= 1 or cores <= 1:
            why = (f"feedline runs {workers} worker here ({cores} core available): without a second core nothing runs "
                   "in parallel, so no loader beats a plain loop; it can still overlap loading with training")
        elif warm_stats.backend == "thread" and not warm_stats.trial:
            why = (f"feedline is still choosing its backend (threads run while the process workers start; it measures the processes, then the threads if they could win, over a run's first "
                   f"batches, and two epochs of {warm_stats.batches} batches were too few to finish); meanwhile threads "
                   "run this workload, Python that holds the GIL, one sample at a time. Later epochs run on what it "
                   "picks; try --samples 600 or more")
        elif warm_stats.backend == "thread":
            rates = warm_stats.trial
            why = (f"feedline measured threads against processes ({rates.get('thread', 0):.0f} against "
                   f"{rates.get('process', 0):.0f} samples/s; processes need 1.1x to be chosen) and kept threads, which "
                   "run this workload, Python that holds the GIL, one sample at a time (see the advice below)")
        elif load is not None and load >= 0.75 * cores:
            got = f"; the workers' tasks had a core {cpu:.0%} of the time" if cpu is not None else ""
            why = (f"other programs are using this machine's cores (1-minute load average {load:.1f} on {cores} cores "
                   f"before the demo started{got}); run the demo on an idle machine")
        else:
            why = (f"the epoch is {warm_stats.batches} batches for {workers} workers: per-epoch costs (handing out the "
                   "first tasks, collecting the last) are a large part of so short an epoch; try --samples 600 or more")
        lines.append(f"  no speed-up at this size: {why}")
    elif first < 1:
        extra = max(cold - warm, 0.0)
        trial = ", and measuring threads against processes to choose the backend" if cold_stats.trial else ""
        lines.append(
            f"  the first epoch is slower than the plain loop: it includes start-up ({extra:.2f} s more than the next "
            f"epoch: starting {cold_stats.workers} workers{trial}), which {samples} samples do not amortise. It is "
            "paid once per run: a training run's later epochs go at the next epoch's rate")
        per_naive, per_warm = naive / samples, warm / samples
        lines[-1] += f"; from about {extra / (per_naive - per_warm):,.0f} samples, even the first epoch is faster"
    return lines


def run(*, samples: int, size: int, batch: int, workers: int | None = None, data: str | None = None) -> int:
    """Run the demo (``feedline demo``) and print its report; returns the exit status.

    The plain loop runs once; feedline runs two epochs: the first includes
    starting the workers and choosing the backend (paid once per run), the
    second is what every later epoch of a training run costs. The report
    gives both, and says why when a small run shows no speed-up.

    Args:
        samples: number of images.
        size: image side in pixels.
        batch: batch size.
        workers: feedline's worker count; None: one per core.
        data: folder for the generated images; None: one in the temp folder.
    """
    import feedline as fl

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None  # before our own work adds to it
    folder = data or os.path.join(tempfile.gettempdir(), "feedline-demo")
    os.makedirs(folder, exist_ok=True)
    print(f"feedline demo: {samples} images of {size}x{size}x3 in {folder}")
    paths = _make_images(folder, samples, size)
    labels = [i % 10 for i in range(len(paths))]
    pairs = list(zip(paths, labels))

    total = -(-len(pairs) // batch)
    progress = Progress(total, "plain loop")
    t0 = time.perf_counter()
    naive_batches = 0
    for _ in _naive(pairs, batch):
        naive_batches += 1
        progress.update(naive_batches, naive_batches * batch)
    naive = time.perf_counter() - t0
    progress.close()
    print(f"  plain loop (1 core):          {naive:6.2f} s  {len(pairs) / naive:8.1f} samples/s  ({naive_batches} batches)")

    pipe = fl.from_files(paths, labels=labels).map(load_and_augment, workers=workers).batch(batch)
    with pipe:
        cold, count = _feedline_epoch(pipe, total, "feedline, first epoch")
        cold_stats = pipe.stats()
        print(f"  feedline, first epoch:        {cold:6.2f} s  {count / cold:8.1f} samples/s  "
              f"(starts {cold_stats.workers} workers, {_how_chosen(cold_stats.decision)})")
        warm, count = _feedline_epoch(pipe, total, "feedline, next epoch")
        stats = pipe.stats()
    print(f"  feedline, next epoch:         {warm:6.2f} s  {count / warm:8.1f} samples/s  "
          f"({stats.backend} x{stats.workers}, workers already running)")
    for line in explain(len(pairs), naive, cold, warm, cold_stats, stats, load):
        print(line)
    print()
    print(pipe)
    print()
    print(stats)
    return 0


def _how_chosen(decision: str) -> str:
    """How the first epoch's backend came about: a trial in this run, or a verdict remembered from an earlier one."""
    return "on the backend an earlier run's trial chose" if STARTED_ON_IT in decision else "chooses the backend"
