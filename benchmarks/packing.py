"""Padding share and per-sample cost of pack() and batch_by_budget() against padded_batch (issue 60).

Run: `python -m benchmarks.packing` (about a minute on 2 quiet cores; `--quick` for a smoke run on
2 000 samples; `--reps N` timed epochs per row, default 3).

Lengths: a log-normal fitted by eye to LibriSpeech utterance lengths in 10 ms frames (median 12 s,
sigma 0.45, clipped to 0.5-35 s: LibriSpeech's segments are at most 35 s), drawn from a fixed seed.
Each sample is ``{"frames": int16[n], "targets": int16[n]}`` made in a per-sample `map`, in the
calling thread (`backend="serial"`), shuffled with `shuffle(seed=0)`. Rows of `pack` are 4 096
frames; `padded_batch` batches 16 samples (about the frames of 4.5 rows); `batch_by_budget` gets
16 x the mean length.

Columns: padding share (padding slots over all slots of the delivered batches: `stats().padding_share`
for pack and budget, counted from the lengths for padded_batch), best wall and CPU microseconds per
sample over `--reps` epochs after an untimed one.

A second table times the two halves of `pack` alone, on the same samples made in advance (CPU µs per
sample, best of `--reps`): the worker's collate (`feedline._packing.RaggedCollate`: checks and
concatenates a task of 64 samples) and the consumer's placing of items into rows and batching them
(`feedline.engine._packer.Packer`), for each fit and buffer.

Grain: where `grain` is importable (`pip install feedline[bench]`), its own `FirstFitPackIterDataset`
and `BestFitPackIterDataset` run on the same lengths with `num_packing_bins` = the same buffer. The row
"Grain first-fit rule" replays, on the lengths alone, the first-fit rule as Grain's source describes
it (a batch of `num_packing_bins` rows, each element into the first row it fits; an element that fits
no row sends the whole batch out and starts a new one), so the comparison stands without grain too.

Last result: benchmarks/history/2026-12-01-packing.md.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import feedline as fl
from feedline._packing import RaggedCollate
from feedline.engine._packer import Packer

ROW = 4096  # frames per packed row
BATCH = 16  # samples per padded batch
BUFFERS = (4, 16, 64)


def librispeech_lengths(n: int) -> np.ndarray:
    """``n`` utterance lengths in 10 ms frames: log-normal, median 12 s, clipped to 0.5-35 s."""
    rng = np.random.default_rng(0)
    return np.clip(np.round(rng.lognormal(np.log(1200), 0.45, n)), 50, 3500).astype(np.int64)


def source(lengths: np.ndarray) -> fl.Pipeline:
    def make(i):
        n = int(lengths[i])
        return {"frames": np.full(n, i % 30_000, np.int16), "targets": np.full(n, -(i % 30_000), np.int16)}

    return fl.from_sequence(list(range(len(lengths)))).shuffle(seed=0).map(make, backend="serial")


def measure(pipe: fl.Pipeline, reps: int, slots_of=None) -> tuple[float, float, float]:
    """(padding share, best wall µs/sample, best CPU µs/sample) of ``pipe`` over ``reps`` timed epochs."""
    wall, cpu, share = float("inf"), float("inf"), None
    with pipe:
        for epoch in range(reps + 1):
            w0, c0 = time.perf_counter(), time.process_time()
            items = slots = 0
            for batch in pipe.epoch(epoch):
                if slots_of is not None:
                    a, b = slots_of(batch)
                    items, slots = items + a, slots + b
            w, c = time.perf_counter() - w0, time.process_time() - c0
            stats = pipe.stats()
            share = stats.padding_share if slots_of is None else 1 - items / slots
            if epoch:
                wall, cpu = min(wall, w), min(cpu, c)
    n = len(pipe.source)
    return share, wall / n * 1e6, cpu / n * 1e6


def grain_first_fit_rule(lengths: np.ndarray, bins: int, row: int) -> float:
    """Padding share of Grain's first-fit rule replayed on ``lengths`` (see the module docstring)."""
    used_rows, items, free = 0, 0, []
    for n in lengths.tolist():
        for i, room in enumerate(free):
            if room >= n:
                free[i] -= n
                break
        else:
            if len(free) == bins:
                used_rows, free = used_rows + len(free), []
            free.append(row - n)
        items += n
    used_rows += len(free)
    return 1 - items / (used_rows * row)


def grain_packing(lengths: np.ndarray, bins: int, row: int, fit: str = "first") -> float | None:
    """Padding share of Grain's own First/BestFitPackIterDataset, or None where grain is not installed."""
    try:
        import grain  # optional: the peer is measured only where it is installed
    except ImportError:
        return None
    data = [{"frames": np.zeros(int(n), np.int16)} for n in lengths]
    ds = grain.MapDataset.source(data).to_iter_dataset()
    packer = grain.experimental.FirstFitPackIterDataset if fit == "first" else grain.experimental.BestFitPackIterDataset
    ds = packer(ds, length_struct={"frames": row}, num_packing_bins=bins, shuffle_bins=False)
    slots = used = 0
    for element in ds:
        ids = np.asarray(element["frames_segment_ids"])
        slots, used = slots + ids.size, used + int((ids > 0).sum())
    return 1 - used / slots


def halves(lengths: np.ndarray, reps: int) -> None:
    """The worker's collate and the consumer's packer, each timed alone (CPU µs per sample)."""
    samples = [{"frames": np.full(int(n), 1, np.int16), "targets": np.full(int(n), 2, np.int16)} for n in lengths]
    collate, best = RaggedCollate(ROW, False), float("inf")
    for _ in range(reps):
        c0 = time.process_time()
        pieces = [collate(samples[i : i + 64]) for i in range(0, len(samples), 64)]
        best = min(best, time.process_time() - c0)
    print(f"\n{'half of pack()':<44} {'cpu us/s':>9}")
    print(f"{'worker collate (64 samples a task)':<44} {best / len(samples) * 1e6:9.2f}")
    for buffer in BUFFERS:
        for fit in ("first", "best"):
            best = float("inf")
            for _ in range(reps):
                packer, c0 = Packer(ROW, fit, buffer, 0, 4, False), time.process_time()
                for number, piece in enumerate(pieces):
                    packer.add(piece, len(piece["lengths"]), number, len(piece["lengths"]))
                    packer.cut(False)
                packer.cut(True)
                best = min(best, time.process_time() - c0)
            print(f"{f'consumer packer, fit={fit!r}, buffer={buffer}':<44} {best / len(samples) * 1e6:9.2f}", flush=True)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 000 samples, one timed epoch")
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    n = 2_000 if args.quick else 20_000
    reps = 1 if args.quick else args.reps
    lengths = librispeech_lengths(n)
    shuffled = lengths[fl.from_sequence(list(range(n))).shuffle(seed=0).plan.epoch_indices(0)]
    print(f"# {n} samples, lengths {int(lengths.min())}-{int(lengths.max())} frames (median {int(np.median(lengths))}, "
          f"mean {lengths.mean():.0f}); rows of {ROW}; {platform.node()}, {platform.python_version()}")
    print(f"{'pipeline':<44} {'padding':>8} {'wall us/s':>10} {'cpu us/s':>9}")

    def row(name, share, wall=None, cpu=None):
        cells = f"{'-':>10} {'-':>9}" if wall is None else f"{wall:10.2f} {cpu:9.2f}"
        print(f"{name:<44} {share:8.1%} {cells}", flush=True)

    def padded_slots(batch):
        return int(batch["frames_lengths"].sum()), batch["frames"].size

    row(f"padded_batch({BATCH})", *measure(source(lengths).padded_batch(BATCH, lengths=True), reps, padded_slots))
    budget = BATCH * int(lengths.mean())
    row(f"batch_by_budget({budget})", *measure(source(lengths).batch_by_budget(budget), reps))
    for buffer in BUFFERS:
        for fit in ("first", "best"):
            row(f"pack({ROW}, fit={fit!r}, buffer={buffer}).batch(4)",
                *measure(source(lengths).pack(ROW, fit=fit, buffer=buffer).batch(4), reps))
        row(f"Grain first-fit rule, {buffer} bins (replayed)", grain_first_fit_rule(shuffled, buffer, ROW))
        for fit in ("first", "best"):
            real = grain_packing(shuffled, buffer, ROW, fit)
            if real is not None:
                row(f"grain {fit.title()}FitPackIterDataset, {buffer} bins", real)
    if grain_packing(shuffled[:1], 1, ROW) is None:
        print("# grain is not installed here: its own packing did not run")
    halves(shuffled, max(reps, 1))


if __name__ == "__main__":
    main()
