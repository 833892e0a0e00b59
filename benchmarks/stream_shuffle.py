"""Per-sample cost of ``shuffle(seed, window=N)`` on a generator of tiny samples (issue 16).

Run: `python -m benchmarks.stream_shuffle` (`--quick`: a smoke run on 4 000 samples, one epoch).
A generator of 50 000 samples of 3x32x32 uint8 in 8 shards, batch 256, serial backend (so the
consumer's window is timed, not process transport); best of 5 epochs per setting; the window's
own time is `it.stats()` under "shuffle window".
Last result: benchmarks/history/2026-11-23-stream-shuffle-shuffle-on-a-generator.md.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import feedline as fl

from .tables import markdown_table

SAMPLES, SHARDS, BATCH, EPOCHS = 50_000, 8, 256, 5
WINDOWS = (None, 1_000, 10_000)


def samples(count: int):
    """The generator factory: shard ``s`` of ``n`` yields rows s, s + n, ... of ``count`` random 3x32x32 images."""
    data = np.random.default_rng(0).integers(0, 255, (count, 3, 32, 32), dtype=np.uint8)

    def factory(shard, num_shards):
        for i in range(shard, count, num_shards):
            yield data[i]

    return factory


def run(window, count: int = SAMPLES, epochs: int = EPOCHS) -> tuple[float, float]:
    """Best µs per sample over ``epochs``: in all, and in the window alone."""
    pipe = fl.from_generator(samples(count), SHARDS).shuffle(seed=0, window=window).map(lambda s: s, backend="serial").batch(BATCH)
    best, window_best = float("inf"), float("inf")
    with pipe:
        for epoch in range(epochs):
            t0 = time.perf_counter()
            it = pipe.epoch(epoch)
            n = sum(len(b) for b in it)
            best = min(best, (time.perf_counter() - t0) / n)
            window_best = min(window_best, it.stats().consumer_seconds.get("shuffle window", 0.0) / n)
    return best * 1e6, window_best * 1e6


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 4 000 samples, one epoch")
    args = parser.parse_args(argv)
    count, epochs = (4_000, 1) if args.quick else (SAMPLES, EPOCHS)
    rows = []
    for window in WINDOWS:
        total, own = run(window, count, epochs)
        rows.append([f"window={window}", f"{total:.2f}", f"{own:.2f}"])
    print(f"{count} samples of 3x32x32 uint8, {SHARDS} shards, batch {BATCH}, serial; best of {epochs} epochs")
    print(markdown_table(["shuffle", "µs/sample in all", "µs/sample in the window"], rows, "lrr"))


if __name__ == "__main__":
    main()
