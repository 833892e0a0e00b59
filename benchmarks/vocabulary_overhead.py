"""Per-sample cost of each pipeline step of issue 16 (take, skip, repeat, concatenate, mix,
generator batching, window shuffle, padded_batch, bucket_by_length).

Run: `python -m benchmarks.vocabulary_overhead` (about 30 s on 2 quiet cores; `--reps N` timed
epochs per row, default 10; `--quick` for a smoke run on 4 096 samples).

Everything runs in the calling thread (no `map`: the bulk gather; with a `map`: `backend="serial"`),
so a row's time is the step's own work, not transport between workers. Each row runs one untimed
epoch, then `--reps` timed ones; the table shows the lowest wall time and the lowest CPU time of the
process (`time.process_time`) per delivered sample, each taken over the epochs on its own.

Tables:
1. The tiny workload (`benchmarks/workloads.py`: 50 000 samples of 3x32x32 uint8 in memory, batch 256),
   `shuffle(seed=0)` first: plain `batch()`, then `take`, `skip`, `repeat(2)` of half the data,
   `fl.concatenate` and `fl.mix(stop="all")` of two halves; without a `map` and with an identity
   per-sample `map`. The same data through `fl.from_generator` in 8 shards (batches cut across shards),
   without and with `shuffle(seed=0, window=N)` (a generator always has a per-sample stage).
2. Variable-length samples: 20 000 int32 token arrays of 5 to 59 ids (`from_sequence`), identity
   `map`, batches of 64: `batch()` of fixed 32-id arrays for reference, `padded_batch` (plain, with
   `lengths` and `mask`), `bucket_by_length` with 3 and 8 buckets.

Last result: benchmarks/history/2026-11-23-pipeline-steps-per-sample-overhead.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

import feedline as fl

from .workloads import build

SHARDS = 8
WINDOWS = (1_000, 10_000)
TOKEN_SAMPLES, TOKEN_BATCH, FIXED_LENGTH = 20_000, 64, 32


def identity(sample):
    """The per-sample `map` of the comparison rows: no work, so only the per-sample path is timed."""
    return sample


def measure(pipe: fl.Pipeline, reps: int) -> tuple[float, float, int]:
    """(best wall µs/sample, best CPU µs/sample, samples per epoch) over ``reps`` timed epochs of ``pipe``."""
    wall, cpu, samples = float("inf"), float("inf"), 0
    with pipe:
        for epoch in range(reps + 1):
            w0, c0 = time.perf_counter(), time.process_time()
            samples = sum(len(_rows(b)) for b in pipe.epoch(epoch))
            w, c = time.perf_counter() - w0, time.process_time() - c0
            if epoch:  # epoch 0 warms caches and builds the machinery
                wall, cpu = min(wall, w), min(cpu, c)
    return wall / samples * 1e6, cpu / samples * 1e6, samples


def _rows(batch):
    """The batch's first array (its row count is the batch size)."""
    while isinstance(batch, (tuple, list)):
        batch = batch[0]
    if isinstance(batch, dict):
        return _rows(next(iter(batch.values())))
    return batch


# ------------------------------------------------------------------ table 1
def tiny_rows(quick: bool) -> tuple[list[tuple[str, Callable]], list[tuple[str, Callable]], str]:
    """The indexed rows (each a function of ``with_map``) and the generator rows of table 1."""
    w = build("tiny", quick)
    data, size = w.data, w.batch_size
    n = len(data)
    half_a, half_b = data[: n // 2], data[n // 2 :]

    def source(x, with_map):
        pipe = fl.from_arrays(x).shuffle(seed=0)
        return pipe.map(identity, backend="serial") if with_map else pipe

    def combined(combine, with_map):
        pipe = combine([fl.from_arrays(half_a).shuffle(seed=0), fl.from_arrays(half_b)])
        return (pipe.map(identity, backend="serial") if with_map else pipe).batch(size)

    def mixed(pipes):
        return fl.mix(pipes, seed=0, stop="all")

    cut = max(1, n // 50)
    indexed = [
        ("plain `shuffle().batch()`", lambda m: source(data, m).batch(size)),
        (f"`take({n - cut})`", lambda m: source(data, m).take(n - cut).batch(size)),
        (f"`skip({cut})`", lambda m: source(data, m).skip(cut).batch(size)),
        ("`repeat(2)` of half", lambda m: source(half_a, m).repeat(2).batch(size)),
        ("`fl.concatenate` of two halves", lambda m: combined(fl.concatenate, m)),
        ('`fl.mix(stop="all")` of two halves', lambda m: combined(mixed, m)),
    ]

    def factory(shard, num_shards):
        for i in range(shard, n, num_shards):
            yield data[i]

    def stream(window):
        pipe = fl.from_generator(factory, SHARDS)
        if window is not None:
            pipe = pipe.shuffle(seed=0, window=window)
        return pipe.map(identity, backend="serial").batch(size)

    generated = [(f"generator, {SHARDS} shards, batches across shards", lambda: stream(None))]
    generated += [(f"generator + `shuffle(window={k})`", lambda k=k: stream(k)) for k in WINDOWS]
    return indexed, generated, w.description


def table_tiny(quick: bool, reps: int) -> list[str]:
    indexed, generated, description = tiny_rows(quick)
    lines = [
        f"Tiny workload: {description}.",
        "",
        "| step | no map: wall µs/sample | no map: CPU µs/sample | identity map: wall µs/sample "
        "| identity map: CPU µs/sample | samples/epoch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, make in indexed:
        bulk_wall, bulk_cpu, samples = measure(make(False), reps)
        map_wall, map_cpu, _ = measure(make(True), reps)
        lines.append(f"| {name} | {bulk_wall:.2f} | {bulk_cpu:.2f} | {map_wall:.2f} | {map_cpu:.2f} | {samples} |")
        print(lines[-1], file=sys.stderr, flush=True)
    for name, make in generated:
        wall, cpu, samples = measure(make(), reps)
        lines.append(f"| {name} | - | - | {wall:.2f} | {cpu:.2f} | {samples} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


# ------------------------------------------------------------------ table 2
def token_rows(quick: bool) -> list[tuple[str, Callable]]:
    """The rows of table 2: variable-length int32 token arrays, identity map, batches of 64."""
    count = 2_000 if quick else TOKEN_SAMPLES
    lengths = np.random.default_rng(0).integers(5, 60, count)
    tokens = [np.arange(k, dtype=np.int32) for k in lengths]
    fixed = [np.arange(FIXED_LENGTH, dtype=np.int32) for _ in range(count)]

    def base(samples):
        return fl.from_sequence(samples).map(identity, backend="serial")

    eight = [8, 15, 22, 29, 36, 43, 50]
    return [
        (f"`batch()` of fixed {FIXED_LENGTH}-id arrays (reference)", lambda: base(fixed).batch(TOKEN_BATCH)),
        ("`padded_batch`", lambda: base(tokens).padded_batch(TOKEN_BATCH)),
        ("`padded_batch(lengths=True, mask=True)`", lambda: base(tokens).padded_batch(TOKEN_BATCH, lengths=True, mask=True)),
        ("`bucket_by_length`, 3 buckets", lambda: base(tokens).bucket_by_length(len, [20, 40], [TOKEN_BATCH] * 3)),
        ("`bucket_by_length`, 8 buckets", lambda: base(tokens).bucket_by_length(len, eight, [TOKEN_BATCH] * 8)),
    ]


def table_tokens(quick: bool, reps: int) -> list[str]:
    count = 2_000 if quick else TOKEN_SAMPLES
    lines = [
        f"Variable length: {count} int32 token arrays of 5-59 ids (`from_sequence`), identity `map` "
        f"(serial), batch {TOKEN_BATCH}.",
        "",
        "| step | wall µs/sample | CPU µs/sample |",
        "|---|---:|---:|",
    ]
    for name, make in token_rows(quick):
        wall, cpu, _ = measure(make(), reps)
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10, help="timed epochs per row (the best is shown); default 10")
    parser.add_argument("--quick", action="store_true", help="a smoke run on small data")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    lines = table_tiny(args.quick, args.reps) + [""] + table_tokens(args.quick, args.reps)
    print(f"# load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    main()
