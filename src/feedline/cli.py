"""The ``feedline`` command line.

``feedline demo`` is the main job on an embedded default: it makes a small
image dataset, runs the same augmentation pipeline as a plain loop and
with feedline, and prints the speed-up and the epoch's stage profile.
``feedline bench TARGET`` profiles a pipeline of yours. ``feedline convert
SRC DST`` and ``feedline inspect STORE`` are defined in `feedline.store._cli`.
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

    total = -(-len(samples) // args.batch)
    progress = _Progress(total, "plain loop")
    t0 = time.perf_counter()
    naive_batches = 0
    for x, _ in _naive(samples, args.batch):
        naive_batches += 1
        progress.update(naive_batches, naive_batches * args.batch)
    naive = time.perf_counter() - t0
    progress.close()
    print(f"  plain loop (1 core):  {naive:6.2f} s  {len(samples) / naive:8.1f} samples/s  ({naive_batches} batches)")

    pipe = fl.from_files(paths, labels=labels).map(load_and_augment, workers=args.workers).batch(args.batch)
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


def _load_target(target: str):
    """``module:attr`` or ``path/to/file.py:attr`` -> a pipeline (or a function returning one)."""
    import importlib
    import importlib.util

    if ":" not in target:
        raise SystemExit(f"feedline bench: TARGET must look like module:attr or path/to/file.py:attr, got {target!r}")
    where, attr = target.rsplit(":", 1)
    if where.endswith(".py") or os.path.sep in where:
        if not os.path.isfile(where):
            raise SystemExit(f"feedline bench: no file {where!r}")
        spec = importlib.util.spec_from_file_location("feedline_bench_target", where)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:  # as `python -m` does: modules of the current directory import
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise SystemExit(f"feedline bench: cannot import {where!r}: {e}") from e
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"feedline bench: {where!r} has no attribute {attr!r}") from None
    import feedline as fl

    if not isinstance(obj, fl.Pipeline) and callable(obj):
        obj = obj()
    if not isinstance(obj, fl.Pipeline):
        raise SystemExit(f"feedline bench: {target} is a {type(obj).__name__}, not a feedline pipeline (or a function returning one)")
    return obj


class _Progress:
    """A one-line progress display on stderr (no dependency); silent when not a terminal."""

    def __init__(self, total: int | None, label: str):
        self.total, self.label = total, label
        self.live = sys.stderr.isatty()
        self.last = 0.0
        self.start = time.perf_counter()

    def update(self, done: int, samples: int) -> None:
        now = time.perf_counter()
        if not self.live or now - self.last < 0.1:
            return
        self.last = now
        rate = samples / max(now - self.start, 1e-9)
        of = f"/{self.total}" if self.total else ""
        eta = ""
        if self.total and done:
            eta = f", {((now - self.start) / done) * (self.total - done):.0f} s left"
        sys.stderr.write(f"\r{self.label}: {done}{of} batches, {rate:,.0f} samples/s{eta}   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()


def bench(args) -> int:
    import json

    pipe = _load_target(args.target)
    try:
        total = len(pipe)
    except TypeError:
        total = None
    if args.batches is not None:
        total = min(total, args.batches) if total else args.batches
    print(pipe)
    with pipe:
        stats = None
        done = 0
        deadline = time.perf_counter() + args.seconds if args.seconds else None
        progress = _Progress(total, "feedline bench")
        try:
            while True:
                it = iter(pipe)
                for _ in it:
                    done += 1
                    progress.update(done, it.stats().samples)
                    if (total is not None and done >= total) or (deadline and time.perf_counter() > deadline):
                        break
                else:
                    if deadline and time.perf_counter() < deadline:
                        continue  # a short epoch: run another until the time is up
                stats = it.stats()
                break
        finally:
            progress.close()
    if args.trace:
        stats.save_trace(args.trace)
    if args.plot:
        stats.save_plot(args.plot)
    if args.json:
        print(json.dumps(stats.as_dict(), default=str, indent=2))
    else:
        print(stats)
        if args.trace:
            print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
        if args.plot:
            print(f"plot written to {args.plot}")
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
    run = commands.add_parser(
        "bench",
        help="time a pipeline of yours and report where the time goes",
        description="Runs a pipeline (module:attr or path/to/file.py:attr: a pipeline, or a function with no "
        "arguments returning one) and prints throughput, the stage profile, the verdict and advice.",
    )
    run.add_argument("target", help="module:attr or path/to/file.py:attr")
    run.add_argument("--batches", type=int, default=None, help="stop after this many batches (default: one epoch)")
    run.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (epochs repeat)")
    run.add_argument("--trace", default=None, help="write a Chrome trace-event JSON file (Perfetto, chrome://tracing)")
    run.add_argument("--plot", default=None, help="write a PNG of throughput and stall over time (needs matplotlib)")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.set_defaults(handler=bench)
    from .store._cli import add_commands as add_store_commands

    add_store_commands(commands)  # feedline convert, feedline inspect (feedline/store/_cli.py)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
