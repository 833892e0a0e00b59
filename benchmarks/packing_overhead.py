"""Per-sample cost of `pack()` and `batch_by_budget()` against plain `batch()` and `padded_batch` (issue 60).

Run: `python -m benchmarks.packing_overhead` (about a minute on 2 quiet cores; `--reps N` timed
epochs per row, default 5; `--quick` for a smoke run on 2 000 samples; `--profile ROW` prints a
cProfile of one row's epochs, ROW a substring of its name).

The samples of `benchmarks/vocabulary_overhead.py`'s table 2: 20 000 int32 token arrays of 5 to 59
ids (`from_sequence`), an identity `map` on `backend="serial"`, so a row's time is the step's own
work in the calling thread, not transport between workers; dict rows carry `tokens` and `targets`.
Each row runs one untimed epoch, then `--reps` timed ones; the table shows the lowest wall and the
lowest process CPU time per sample delivered. Budget and packing sizes hold 64 samples of the mean
length (32 ids) a batch, as `batch(64)` does. The `sizes=` rows plan the batches from the table of
lengths before the map (the same batches). A second table counts the map calls each of W ranks
makes in one epoch of `shard(r, W, even="drop")` before `pack()` and `batch_by_budget()`, with and
without `sizes=` (counts, so the load does not matter).

Last result: benchmarks/history/2026-12-01-packing.md, section "Per-sample cost" (2026-12-02). The
`sizes=` rows and the map-call table (2026-12-02, 2 cores under load 6-30, so times are not
evidence): docs/variable_length.md, "Data parallelism". Map calls per rank with `sizes=`, of 20 000:
W=2 9 930-10 003, W=4 4 933-5 070, W=8 2 368-2 492 for `pack(512).batch(8)`; 9 994-10 006,
4 989-5 005, 2 490-2 508 for `batch_by_budget(2048)`; 20 000 on every rank without `sizes=`.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import pstats
import sys
from collections.abc import Callable

import numpy as np

import feedline as fl

from .vocabulary_overhead import FIXED_LENGTH, TOKEN_BATCH, TOKEN_SAMPLES, identity, measure

ROW = 512  # ids a packed row: 8 rows of it hold about 64 samples of the mean length, like batch(64)


def rows(quick: bool) -> tuple[list[tuple[str, Callable]], int]:
    count = 2_000 if quick else TOKEN_SAMPLES
    lengths = np.random.default_rng(0).integers(5, 60, count)
    tokens = [np.arange(k, dtype=np.int32) for k in lengths]
    pairs = [{"tokens": t, "targets": t + 1} for t in tokens]
    fixed = [np.arange(FIXED_LENGTH, dtype=np.int32) for _ in range(count)]
    budget = TOKEN_BATCH * FIXED_LENGTH

    def base(samples):
        return fl.from_sequence(samples).map(identity, backend="serial")

    table = [
        (f"`batch({TOKEN_BATCH})` of fixed {FIXED_LENGTH}-id arrays (reference)", lambda: base(fixed).batch(TOKEN_BATCH)),
        (f"`padded_batch({TOKEN_BATCH})`", lambda: base(tokens).padded_batch(TOKEN_BATCH)),
        (f"`batch_by_budget({budget})`", lambda: base(tokens).batch_by_budget(budget)),
        (f"`batch_by_budget({budget})`, dict of 2 fields", lambda: base(pairs).batch_by_budget(budget)),
        (f'`pack({ROW}, fit="first").batch(8)`', lambda: base(tokens).pack(ROW, fit="first").batch(8)),
        (f'`pack({ROW}, fit="best").batch(8)`', lambda: base(tokens).pack(ROW).batch(8)),
        (f'`pack({ROW}, fit="best", buffer=4).batch(8)`', lambda: base(tokens).pack(ROW, buffer=4).batch(8)),
        (f'`pack({ROW}).batch(8)`, dict of 2 fields', lambda: base(pairs).pack(ROW).batch(8)),
        (f"`batch_by_budget({budget}, sizes=...)`", lambda: base(tokens).batch_by_budget(budget, sizes=lengths)),
        (f'`pack({ROW}, sizes=...).batch(8)`', lambda: base(tokens).pack(ROW, sizes=lengths).batch(8)),
    ]
    return table, count


def map_work(quick: bool) -> list[str]:
    """Map calls per rank for one epoch of W ranks, with and without ``sizes=`` (counts)."""
    count = 2_000 if quick else TOKEN_SAMPLES
    lengths = np.random.default_rng(0).integers(5, 60, count)
    tokens = [np.arange(k, dtype=np.int32) for k in lengths]
    budget = TOKEN_BATCH * FIXED_LENGTH
    lines = [f"Map calls per rank, one epoch of {count} samples, `shuffle(seed=0).shard(r, W, even=\"drop\")`:", "",
             "| step | W | without `sizes=`: most / fewest per rank | with `sizes=`: most / fewest per rank | batches per rank |",
             "|---|---:|---:|---:|---:|"]
    steps = [(f"`pack({ROW}).batch(8)`", lambda p, sizes: p.pack(ROW, sizes=sizes).batch(8)),
             (f"`batch_by_budget({budget})`", lambda p, sizes: p.batch_by_budget(budget, sizes=sizes))]
    for name, step in steps:
        for ranks in (1, 2, 4, 8):
            calls = {True: [], False: []}
            batches = set()
            for planned in (False, True):
                for rank in range(ranks):
                    seen = [0]

                    def counted(sample, seen=seen):
                        seen[0] += 1
                        return sample

                    pipe = fl.from_sequence(tokens).shuffle(seed=0).shard(rank, ranks, even="drop").map(
                        counted, backend="serial")
                    with step(pipe, lengths if planned else None) as pipe:
                        batches.add(sum(1 for _ in pipe))
                    calls[planned].append(seen[0])
            lines.append(f"| {name} | {ranks} | {max(calls[False]):,} / {min(calls[False]):,} | "
                         f"{max(calls[True]):,} / {min(calls[True]):,} | {'/'.join(map(str, sorted(batches)))} |")
            print(lines[-1], file=sys.stderr, flush=True)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed epochs per row (the best is shown); default 5")
    parser.add_argument("--quick", action="store_true", help="a smoke run on small data")
    parser.add_argument("--profile", metavar="ROW", help="print a cProfile of the row whose name contains ROW")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error(f"--reps must be at least 1, got {args.reps}")
    table, count = rows(args.quick)
    if args.profile:
        chosen = [(name, make) for name, make in table if args.profile in name]
        if not chosen:
            parser.error(f"--profile {args.profile!r} names no row; rows: {', '.join(name for name, _ in table)}")
        profile = cProfile.Profile()
        profile.runcall(measure, chosen[0][1](), args.reps)
        pstats.Stats(profile).sort_stats("cumulative").print_stats(30)
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load average before: {', '.join(f'{v:.2f}' for v in os.getloadavg())}", flush=True)
    lines = [f"{count} int32 token arrays of 5-59 ids (`from_sequence`), identity `map` (serial).", "",
             "| step | wall µs/sample | CPU µs/sample | over the reference, CPU µs/sample |", "|---|---:|---:|---:|"]
    reference = None
    for name, make in table:
        wall, cpu, samples = measure(make(), args.reps)
        wall, cpu = wall * samples / count, cpu * samples / count  # per sample put in, not per row or batch out
        reference = cpu if reference is None else reference
        lines.append(f"| {name} | {wall:.2f} | {cpu:.2f} | {cpu - reference:+.2f} |")
        print(lines[-1], file=sys.stderr, flush=True)
    print(f"# load average after: {', '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print("\n".join(lines))
    print()
    print("\n".join(map_work(args.quick)))


if __name__ == "__main__":
    main()
