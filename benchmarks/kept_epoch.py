"""Keeping a whole epoch on process workers (issue 59): memory against threads, and the cost of the normal loop.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.kept_epoch                      # ~1-2 minutes on a shared 2-core host
    python -m benchmarks.kept_epoch --quick              # smoke test, a few seconds
    python -m benchmarks.kept_epoch --base /other/src    # also the loop's cost with feedline from another checkout

Each measurement runs in a fresh interpreter:

- ``kept``: ``list(pipe)`` of ``--samples`` float32 samples through a
  Python map on 2 workers, ``batch(4)``, for ``thread`` and ``process``:
  the consumer's peak RSS (``ru_maxrss``) and the epoch's wall time. On
  processes every batch past ``FEEDLINE_MAPPED_BATCHES`` is a copy
  (`feedline.transport._slots.SlotViews`).
- ``loop``: the normal loop on processes (each batch dropped before the
  next), three epochs: the consumer process's CPU seconds per batch
  (``time.process_time``: the workers are other processes), for
  ``batch(4)`` of float32 (from the second epoch tasks hold many small
  batches) and ``batch(32)`` of 64x64x3 uint8 images. With ``--base``
  each round runs the other checkout's feedline right after this one
  (paired, alternating), and the table shows both medians.

Last result: benchmarks/history/2026-12-01-kept-epochs-on-process-workers.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

_KEPT = """
import json, resource, sys, time, numpy as np, feedline as fl

def plus_one(v):
    return v + 1

samples, backend = int(sys.argv[1]), sys.argv[2]
pipe = fl.from_arrays(np.arange(samples, dtype=np.float32)).map(plus_one, backend=backend, workers=2).batch(4)
with pipe:
    began = time.perf_counter()
    held = list(pipe)
    seconds = time.perf_counter() - began
    right = bool(np.array_equal(np.concatenate(held), np.arange(samples, dtype=np.float32) + 1))
print(json.dumps({"batches": len(held), "right": right, "seconds": seconds,
                  "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

_LOOP = """
import json, sys, time, numpy as np, feedline as fl

def plus_one(v):
    return v + 1

kind, samples = sys.argv[1], int(sys.argv[2])
if kind == "small":
    pipe = fl.from_arrays(np.arange(samples, dtype=np.float32)).map(plus_one, backend="process", workers=2).batch(4)
else:
    images = np.zeros((samples, 64, 64, 3), np.uint8)
    pipe = fl.from_arrays(images).map(plus_one, backend="process", workers=2).batch(32)
per_epoch = []
with pipe:
    for epoch in range(3):
        began, batches = time.process_time(), 0
        for batch in pipe:
            batches += 1
        per_epoch.append((time.process_time() - began) / batches * 1e6)
print(json.dumps({"us_per_batch": per_epoch}))
"""


def _run(code: str, args: list, src: str | None = None) -> dict:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src
    done = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one round")
    parser.add_argument("--samples", type=int, default=300_000, help="samples of the kept epoch")
    parser.add_argument("--rounds", type=int, default=3, help="fresh interpreters per measurement")
    parser.add_argument("--base", help="a src folder of another feedline checkout for the paired loop runs")
    args = parser.parse_args()
    samples, rounds = (20_000, 1) if args.quick else (args.samples, args.rounds)
    here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")

    print(f"kept epoch: {samples:,} samples, batch(4), 2 workers, median of {rounds}")
    for backend in ("thread", "process"):
        runs = [_run(_KEPT, [samples, backend], here) for _ in range(rounds)]
        if not all(r["right"] for r in runs):
            raise RuntimeError(f"{backend}: a kept batch has wrong values")
        print(f"  {backend:8s} {runs[0]['batches']:>7,} batches  peak RSS {statistics.median(r['peak_mib'] for r in runs):7.1f} MiB"
              f"  {statistics.median(r['seconds'] for r in runs):6.2f} s")

    loops = {"small": 40_000 if args.quick else 200_000, "images": 2_000 if args.quick else 16_000}
    print("normal loop on processes: consumer CPU us per batch, epochs 1/2/3, median of paired rounds")
    for kind, count in loops.items():
        sides = {"this": here} | ({"base": args.base} if args.base else {})
        results: dict = {side: [] for side in sides}
        for k in range(rounds):
            order = list(sides) if k % 2 == 0 else list(sides)[::-1]
            for side in order:
                results[side].append(_run(_LOOP, [kind, count], sides[side])["us_per_batch"])
        for side, runs in results.items():
            medians = [statistics.median(r[e] for r in runs) for e in range(3)]
            print(f"  {kind:7s} {side:5s} " + " / ".join(f"{m:6.1f}" for m in medians))


if __name__ == "__main__":
    main()
