"""What elastic resume costs (issue 57): state size, time to take a state, combine, and the first batch after a resume.

Run: `python -m benchmarks.elastic_resume` (about 20 s on 2 cores; `--samples N`, default 1 000 000).

The pipeline: `from_arrays(arange(N)).shuffle(seed=0).shard(r, W).map(identity, backend="thread",
workers=2).batch(256)`. Rows:
1. `it.state()` of rank 1 of 4 mid-epoch: JSON bytes, and the median time of one call over 2 000.
2. `fl.combine_states` of the 4 ranks' states: JSON bytes, median time over 200 calls.
3. The first batch, from the call to its arrival, on a pipeline whose workers are already up (one
   untimed epoch first): `iter(pipe)` of a fresh epoch, `pipe.resume(state)` of the same rank
   (exact resume), `pipe.resume(state)` of another rank count (one rank's state, lock step), and
   `pipe.resume(combined)`; median of 5 each. A resume draws the epoch's order once, as a fresh
   epoch does (its checks hand the order on to the epoch); an elastic one adds the rest of it (a
   set difference) and its dealing. `benchmarks/resume_first_batch.py` pairs resumes with fresh
   epochs and counts the draws.

Last result: see the "Elastic resume" section of benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import feedline as fl


def build(n: int, rank: int, ranks: int):
    return fl.from_arrays(np.arange(n)).shuffle(seed=0).shard(rank, ranks).map(lambda x: x, backend="thread",
                                                                                workers=2).batch(256)


def median_seconds(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def first_batch(pipe, start) -> float:
    t0 = time.perf_counter()
    it = start()
    next(it)
    seconds = time.perf_counter() - t0
    it.close()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    args = parser.parse_args()
    n = args.samples
    states = []
    for r in range(4):
        with build(n, r, 4) as pipe:
            it = iter(pipe)
            for _ in range(10):
                next(it)
            states.append(it.state())
            if r == 1:
                state_s = median_seconds(it.state, 2000)
    combined = fl.combine_states(states)
    combine_s = median_seconds(lambda: fl.combine_states(states), 200)
    print(f"samples {n}, batch 256, 4 ranks, 10 batches in")
    print(f"it.state():        {len(json.dumps(states[1])):5d} bytes JSON, {state_s * 1e6:7.1f} us a call")
    print(f"combine_states(4): {len(json.dumps(combined)):5d} bytes JSON, {combine_s * 1e6:7.1f} us a call")
    with build(n, 1, 4) as same, build(n, 1, 3) as other:
        for pipe in (same, other):
            list(pipe)  # workers up, one epoch run
        rows = [
            ("fresh epoch, iter(pipe)       ", lambda: first_batch(same, lambda: same.epoch(0))),
            ("exact resume, same 4 ranks    ", lambda: first_batch(same, lambda: same.resume(states[1]))),
            ("elastic, one rank's state -> 3", lambda: first_batch(other, lambda: other.resume(states[1]))),
            ("elastic, combined -> 3        ", lambda: first_batch(other, lambda: other.resume(combined))),
        ]
        for name, run in rows:
            print(f"first batch, {name}: {statistics.median(run() for _ in range(5)) * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
