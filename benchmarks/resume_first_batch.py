"""Resume vs a fresh epoch (issue 57): the first batch after ``pipe.resume(state)`` and after ``pipe.epoch(k)``.

Run: `python -m benchmarks.resume_first_batch` (about 15 s on 2 cores; `--samples N`, default 1 000 000;
`--pairs P`, default 7).

The pipeline: `from_arrays(arange(N)).shuffle(seed=0).shard(1, 4).map(identity, backend="thread",
workers=2).batch(256)`, workers up (one untimed epoch first). Each pair times, on the same pipeline and in
alternating order, the first batch of a fresh epoch (`pipe.epoch(1)`) and of `pipe.resume(state)` of a
state taken 10 batches into epoch 1, from the call to the batch's arrival; then the same for a resume on
3 ranks from that one rank's state (lock step) and from `fl.combine_states` of the 4 ranks' states.
Pairs, because on a shared machine the load changes between rounds; the medians of the pairs' times and
of their differences are printed. It also prints the permutation draws each start makes
(`feedline.testing.order_draws()`), a count that does not depend on the load.

Last result (2026-12-02 06:33 UTC, the 2-core VM under other sessions' load, load average 8-10, so
the times are noisy; 7 pairs a row, three rounds, before = bb90552 with the draw counter added):

| start | draws before -> after | resume - fresh, median of pairs, before | after |
|---|---|---|---|
| exact resume, same 4 ranks | 2 -> 1 | +31, +17, +25 ms | +6, +2, +17 ms |
| 4 -> 3 ranks from one rank's state | 3 -> 1 | +122, +50, +98 ms | +11, +7, +10 ms |
| 4 -> 3 ranks from a combined state | 2 -> 1 | +55, +30, +51 ms | +17, +9, +15 ms |

A fresh epoch took 18-65 ms to its first batch in these rounds. What an elastic resume still adds
is its own work on the order (the set difference of the positions delivered, dealing the rest, one
gather of the indices), a few ms here.
"""

from __future__ import annotations

import argparse
import statistics
import time

import feedline as fl
from feedline import testing

from .elastic_resume import build


def state_after(pipe, batches: int) -> dict:
    """The state of ``pipe`` (closed after) ``batches`` batches into epoch 1."""
    with pipe:
        it = pipe.epoch(1)
        for _ in range(batches):
            next(it)
        return it.state()


def first_batch(start) -> tuple[float, int]:
    """Seconds from ``start()`` to its first batch, and the permutations drawn meanwhile."""
    draws = testing.order_draws()
    t0 = time.perf_counter()
    it = start()
    next(it)
    seconds = time.perf_counter() - t0
    it.close()
    return seconds, testing.order_draws() - draws


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=7)
    args = parser.parse_args()
    n = args.samples
    states = [state_after(build(n, r, 4), 10) for r in range(4)]
    combined = fl.combine_states(states)
    print(f"samples {n}, batch 256, shuffle + shard(1, 4), 10 batches into epoch 1, {args.pairs} pairs")
    with build(n, 1, 4) as same, build(n, 1, 3) as other:
        for pipe in (same, other):
            list(pipe)  # workers up, one epoch run
        cases = [
            ("exact resume, same 4 ranks    ", same, lambda: same.resume(states[1])),
            ("elastic, one rank's state -> 3", other, lambda: other.resume(states[1])),
            ("elastic, combined -> 3        ", other, lambda: other.resume(combined)),
        ]
        for name, pipe, resume in cases:
            fresh_s, resume_s, draws = [], [], set()
            for k in range(args.pairs):
                runs = [("fresh", lambda pipe=pipe: pipe.epoch(1)), ("resume", resume)]
                for label, start in runs if k % 2 == 0 else runs[::-1]:
                    seconds, drawn = first_batch(start)
                    (fresh_s if label == "fresh" else resume_s).append(seconds)
                    draws.add((label, drawn))
            diff = statistics.median(r - f for r, f in zip(resume_s, fresh_s))
            print(f"{name}: fresh {statistics.median(fresh_s) * 1e3:6.1f} ms, resume "
                  f"{statistics.median(resume_s) * 1e3:6.1f} ms, resume - fresh {diff * 1e3:+6.1f} ms (medians); "
                  f"draws {dict(sorted(draws))}")


if __name__ == "__main__":
    main()
