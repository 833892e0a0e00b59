"""What ``verify=True`` costs when reading a store, and what ``feedline inspect --verify`` costs.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.store_verify                # ~1 minute on a shared 2-core host
    python -m benchmarks.store_verify --samples 2000 # smoke test, a few seconds

A ``raw`` store of ``--samples`` rows of ``{"image": 3x64x64 uint8, "label":
int64}`` (12 kB per row; 20k rows are 246 MB in one part file of 15 record
batches), in the page cache (just written). Each round opens the store
afresh, so every record batch is checked once more with ``verify=True``
(the first epoch of a process: the most verify can cost; later epochs in
the same process check nothing). Three reads, each with and without
verify, alternating, ``--reps`` rounds after one warm-up round, medians:

- ``in order``: ``from_store(p).batch(256)``, serial: bulk gathers.
- ``shuffled``: ``from_store(p).shuffle(seed).batch(256)``, serial.
- ``per sample``: ``store[i]`` for every ``i`` in a random order (one thread).

And ``verify_store`` (``feedline inspect --verify``) over the whole store.

Last run (2026-11-23, ``--reps 7``, 2-core AMD EPYC shared with other jobs,
load average 2.3-3.8; also in docs/store.md, "Checksums"):

    | read | samples/s | with verify=True | cost |
    |---|---:|---:|---:|
    | in order | 245,311 | 173,346 | 42 % more time |
    | shuffled | 116,726 | 91,542 | 28 % more time |
    | per sample | 125,452 | 104,146 | 20 % more time |
    verify_store (feedline inspect --verify): 0.034 s, 7.3 GB/s
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import numpy as np

import feedline as fl
from feedline.store import StoreWriter, open_store, verify_store

from .tables import markdown_table


def write(path: str, samples: int) -> None:
    rng = np.random.default_rng(0)
    with StoreWriter(path) as w:
        for start in range(0, samples, 1000):
            n = min(1000, samples - start)
            w.write({"image": rng.integers(0, 256, (n, 3, 64, 64), dtype=np.uint8), "label": np.arange(start, start + n)})


def epoch(path: str, verify: bool, shuffle: bool) -> float:
    pipe = fl.from_store(path, verify=verify)
    if shuffle:
        pipe = pipe.shuffle(seed=1)
    pipe = pipe.batch(256)
    with pipe:
        started = time.perf_counter()
        rows = sum(len(b["label"]) for b in pipe)
        return rows / (time.perf_counter() - started)


def per_sample(path: str, verify: bool, order: np.ndarray) -> float:
    store = open_store(path, verify=verify)
    started = time.perf_counter()
    for i in order.tolist():
        store[i]
    return len(order) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="feedline-verify-bench-")
    try:
        path = os.path.join(folder, "bench.store")
        write(path, args.samples)
        size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs)
        batches = sum(len(p["batches"]) for p in open_store(path).manifest["files"])
        order = np.random.default_rng(2).permutation(args.samples)
        runs: dict = {}
        for verify in (False, True):  # warm-up round, not counted: imports, first mappings
            epoch(path, verify, shuffle=False)
            per_sample(path, verify, order[:1000])
        for _ in range(args.reps):
            for verify in (False, True):
                runs.setdefault(("in order", verify), []).append(epoch(path, verify, shuffle=False))
                runs.setdefault(("shuffled", verify), []).append(epoch(path, verify, shuffle=True))
                runs.setdefault(("per sample", verify), []).append(per_sample(path, verify, order))
        seconds = []
        for _ in range(args.reps):
            started = time.perf_counter()
            assert verify_store(path).ok
            seconds.append(time.perf_counter() - started)
        print(f"store: {args.samples} rows of 3x64x64 uint8 + int64 label, {size / 1e6:.0f} MB, {batches} record batches; "
              f"medians of {args.reps} rounds (first epoch after opening)")
        rows = []
        for name in ("in order", "shuffled", "per sample"):
            plain, checked = statistics.median(runs[(name, False)]), statistics.median(runs[(name, True)])
            rows.append([name, f"{plain:,.0f}", f"{checked:,.0f}", f"{100 * (plain / checked - 1):.0f} % more time"])
        print(markdown_table(["read", "samples/s", "with verify=True", "cost"], rows, "lrrr"))
        best = statistics.median(seconds)
        print(f"verify_store (feedline inspect --verify): {best:.3f} s, {size / best / 1e9:.1f} GB/s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
