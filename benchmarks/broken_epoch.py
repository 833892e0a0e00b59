"""The epoch after a broken-off one, against the epoch after a complete one (issue 58).

A validation pass with ``steps=``, a budgeted evaluation or a ``break``
leaves an epoch with tasks queued and running; the next epoch should start
on free workers. One pipeline per backend: GIL-bound work (a pure-Python
loop of ``--ms`` per sample), ``--samples`` samples, batch 16, 2 workers.
Each round runs, in an order that alternates between rounds, a complete
epoch followed by a timed one ("after complete") and an epoch broken off
after ``--taken`` batches followed by a timed one ("after broken"); the
timed epoch's samples/s and first batch are paired within the round.
Target: "after broken" at >= 0.97 of "after complete", first batch as fast.
Two columns are read from a log of every sample begun (index and time):
when the first sample of the timed epoch's first batch began, after
``iter()`` (what the next epoch waited for before its work began: after a
broken-off epoch, at most the sample a worker was on), and how many
samples of the broken-off epoch began after the break (a count, not a
time: it does not depend on the machine's load).

Run from the repository root:

    python -m benchmarks.broken_epoch                  # ~1 minute on 2 cores
    python -m benchmarks.broken_epoch --rounds 1       # smoke test

Last measured: benchmarks/RESULTS.md, "The training process left alone"; before:
benchmarks/history/2026-12-01-broken-off-epochs.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

import numpy as np

import feedline as fl
from feedline import testing

BATCH = 16


def python_work(x, ms: float, log: str | None = None):
    """Pure Python for about ``ms`` milliseconds (holds the GIL), then the sample; ``log``: a line for each sample begun."""
    begun = time.perf_counter()  # (one clock for every process on Linux and macOS)
    if log is not None:
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)  # one short write with O_APPEND: lines never interleave
        os.write(fd, f"{int(x)} {begun:.6f}\n".encode())
        os.close(fd)
    end = begun + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1
    return np.float32(x)


def timed_epoch(pipe, log: str) -> tuple[float, float, float]:
    """(samples/s, seconds to the first batch, seconds to the first sample of the first batch) of the next epoch."""
    before = os.path.getsize(log)  # (a stat: the workers' left samples get no time to end while the log is read)
    start = time.perf_counter()
    first, samples = None, 0
    for batch in pipe:
        if first is None:
            first = time.perf_counter() - start
        samples += len(batch)
    rate = samples / (time.perf_counter() - start)
    began = min(t for i, t in lines(log, before) if i < BATCH)  # (the epoch is not shuffled: its first batch is 0..15)
    return rate, first, began - start


def lines(log: str, offset: int = 0) -> list[tuple[int, float]]:
    """(index, when it began) of each sample begun since byte ``offset`` of the log."""
    with open(log, "rb") as f:
        f.seek(offset)
        return [(int(i), float(t)) for i, t in (line.split() for line in f.read().decode().splitlines())]


def broken_epoch(pipe, taken: int) -> None:
    for k, _ in enumerate(pipe, 1):
        if k == taken:
            break


def run(backend: str, args) -> dict:
    import functools
    import tempfile

    folder = tempfile.mkdtemp(prefix="broken_epoch_")
    log = os.path.join(folder, "begun.log")
    fn = functools.partial(python_work, ms=args.ms, log=log)
    pipe = fl.from_arrays(np.arange(args.samples)).map(fn, backend=backend, workers=2).batch(BATCH)
    out = {"complete": [], "broken": [], "left_over": []}
    with pipe:
        list(pipe)  # workers up and warm
        testing.wait_ready(pipe, 60)
        for r in range(args.rounds):
            for case in (("complete", "broken") if r % 2 == 0 else ("broken", "complete")):
                if case == "complete":
                    list(pipe)
                else:
                    broken_epoch(pipe, args.taken)
                    at_break = os.path.getsize(log)
                out[case].append(timed_epoch(pipe, log))
                if case == "broken":  # samples of the broken-off epoch begun after the break (the timed epoch's own left out)
                    out["left_over"].append(len(lines(log, at_break)) - args.samples)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--ms", type=float, default=4.0)
    parser.add_argument("--taken", type=int, default=3)
    parser.add_argument("--backends", default="process,thread")
    args = parser.parse_args()
    print("| backend | after complete (samples/s) | after broken (samples/s) | ratio, per round | first batch: complete / broken (s) "
          "| its first sample began: complete / broken (ms) | left epoch's samples begun after the break, per round |")
    print("|---|---|---|---|---|---|---|")
    for backend in args.backends.split(","):
        out = run(backend, args)
        ratios = [b[0] / c[0] for c, b in zip(out["complete"], out["broken"])]
        med = lambda rows, k: statistics.median(row[k] for row in rows)  # noqa: E731
        print(f"| {backend} | {med(out['complete'], 0):,.0f} | {med(out['broken'], 0):,.0f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{med(out['complete'], 1):.3f} / {med(out['broken'], 1):.3f} | "
              f"{med(out['complete'], 2) * 1e3:.1f} / {med(out['broken'], 2) * 1e3:.1f} | "
              f"{statistics.median(out['left_over']):.0f} ({min(out['left_over'])}-{max(out['left_over'])}) |", flush=True)


if __name__ == "__main__":
    main()
