"""Per-sample cost of ``shuffle(seed, window=N)`` on a generator of tiny samples (issue 16).

Run: `python benchmarks/stream_shuffle.py`. A generator of 50 000 samples of 3x32x32 uint8 in
8 shards, batch 256, serial backend (so the consumer's window is timed, not process transport);
best of 5 epochs per setting; the window's own time is `it.stats()` under "shuffle window".
Last result: see the "Stream shuffle" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import time

import numpy as np

import feedline as fl

SAMPLES, SHARDS, BATCH, EPOCHS = 50_000, 8, 256, 5
DATA = np.random.default_rng(0).integers(0, 255, (SAMPLES, 3, 32, 32), dtype=np.uint8)


def factory(shard, num_shards):
    for i in range(shard, SAMPLES, num_shards):
        yield DATA[i]


def run(window):
    pipe = fl.from_generator(factory, SHARDS).shuffle(seed=0, window=window).map(lambda s: s, backend="serial").batch(BATCH)
    best, window_best = float("inf"), float("inf")
    with pipe:
        for epoch in range(EPOCHS):
            t0 = time.perf_counter()
            it = pipe.epoch(epoch)
            n = sum(len(b) for b in it)
            best = min(best, (time.perf_counter() - t0) / n)
            window_best = min(window_best, it.stats().consumer_seconds.get("shuffle window", 0.0) / n)
    return best * 1e6, window_best * 1e6


def main():
    for window in (None, 1_000, 10_000):
        total, own = run(window)
        print(f"window={window!s:>6}: {total:6.2f} us/sample in all, {own:5.2f} us/sample in the window")


if __name__ == "__main__":
    main()
