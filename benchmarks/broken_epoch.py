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

Run from the repository root:

    python -m benchmarks.broken_epoch                  # ~1 minute on 2 cores
    python -m benchmarks.broken_epoch --rounds 1       # smoke test

Last measured: benchmarks/history/2026-12-01-broken-off-epochs.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import feedline as fl
from feedline import testing


def python_work(x, ms: float):
    """Pure Python for about ``ms`` milliseconds (holds the GIL), then the sample."""
    end = time.perf_counter() + ms / 1000
    n = 0
    while time.perf_counter() < end:
        n += 1
    return np.float32(x)


def timed_epoch(pipe) -> tuple[float, float]:
    """(samples/s, seconds to the first batch) of the next epoch."""
    start = time.perf_counter()
    first, samples = None, 0
    for batch in pipe:
        if first is None:
            first = time.perf_counter() - start
        samples += len(batch)
    return samples / (time.perf_counter() - start), first


def broken_epoch(pipe, taken: int) -> None:
    for k, _ in enumerate(pipe, 1):
        if k == taken:
            break


def run(backend: str, args) -> dict:
    import functools

    fn = functools.partial(python_work, ms=args.ms)
    pipe = fl.from_arrays(np.arange(args.samples)).map(fn, backend=backend, workers=2).batch(16)
    out = {"complete": [], "broken": []}
    with pipe:
        list(pipe)  # workers up and warm
        testing.wait_ready(pipe, 60)
        for r in range(args.rounds):
            for case in (("complete", "broken") if r % 2 == 0 else ("broken", "complete")):
                if case == "complete":
                    list(pipe)
                else:
                    broken_epoch(pipe, args.taken)
                out[case].append(timed_epoch(pipe))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--samples", type=int, default=240)
    parser.add_argument("--ms", type=float, default=4.0)
    parser.add_argument("--taken", type=int, default=3)
    parser.add_argument("--backends", default="process,thread")
    args = parser.parse_args()
    print("| backend | after complete (samples/s) | after broken (samples/s) | ratio, per round | first batch: complete / broken (s) |")
    print("|---|---|---|---|---|")
    for backend in args.backends.split(","):
        out = run(backend, args)
        ratios = [b[0] / c[0] for c, b in zip(out["complete"], out["broken"])]
        med = lambda rows, k: statistics.median(row[k] for row in rows)  # noqa: E731
        print(f"| {backend} | {med(out['complete'], 0):,.0f} | {med(out['broken'], 0):,.0f} | "
              f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) | "
              f"{med(out['complete'], 1):.3f} / {med(out['broken'], 1):.3f} |", flush=True)


if __name__ == "__main__":
    main()
