"""Time to the first batch and to close, in a fresh interpreter each run (issue 14).

What a user's script sees: ``import feedline``, describe the pipeline, then
iterate (at once, or after some set-up of their own: building a model,
opening files), then close. Each run is a new Python process, so nothing
is warm that a first run of a script would not have (the fork server is
started when the map is described). The map is a cheap float conversion of
20 000 samples, batch 32, so start-up, not the work, decides the time.

Reported per setting (median and range over ``--reps`` runs): seconds from
the end of describing to the first batch, the whole epoch, and ``close``.

Run from the repository root:
    python -m benchmarks.first_batch [--reps 5] [--quick]

Last measured: benchmarks/history/2026-11-25-eighth-session-issues-14-15-18.md, "First batch and close".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .tables import markdown_table

# One run, in a fresh interpreter: prints a JSON line of timings.
_RUN = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import feedline as fl
backend, workers, setup = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

def work(x):
    return x.astype(np.float32) * 2

kwargs = {} if backend == "auto" else {"backend": backend, "workers": workers}
pipe = fl.from_arrays(np.arange(20000, dtype=np.float64).reshape(-1, 1)).map(work, **kwargs).batch(32)
described = time.perf_counter()
time.sleep(setup)  # the user's own set-up
start = time.perf_counter()
it = iter(pipe)
next(it)
first = time.perf_counter()
for _ in it:
    pass
end = time.perf_counter()
ran_as = f"{pipe.stats().backend} x{pipe.stats().workers}"
pipe.close()
closed = time.perf_counter()
print(json.dumps({"import": described - t0, "first": first - start, "epoch": end - start,
                  "close": closed - end, "ran_as": ran_as}))
"""

SETTINGS = [  # (label, backend, workers, seconds of the user's own set-up between describing and iterating)
    ("process x2, iterated at once", "process", 2, 0.0),
    ("process x2, 0.5 s of set-up first", "process", 2, 0.5),
    ("process x16, iterated at once", "process", 16, 0.0),
    ("process x16, 0.5 s of set-up first", "process", 16, 0.5),
    ("thread x2, iterated at once", "thread", 2, 0.0),
    ("automatic, iterated at once", "auto", 0, 0.0),
]


def run_once(backend: str, workers: int, setup: float) -> dict:
    out = subprocess.run([sys.executable, "-c", _RUN, backend, str(workers), str(setup)], capture_output=True,
                         text=True, timeout=300, env=os.environ)
    if out.returncode != 0:
        raise RuntimeError(f"a first-batch run ({backend} x{workers}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _spread(values) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.first_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="fresh-interpreter runs per setting (default 5)")
    parser.add_argument("--quick", action="store_true", help="one run of two settings: a smoke test")
    args = parser.parse_args(argv)
    settings = SETTINGS[:1] + SETTINGS[4:5] if args.quick else SETTINGS
    reps = 1 if args.quick else args.reps
    runs = {label: [] for label, *_ in settings}
    for _ in range(reps):  # alternating, so a burst of foreign load touches every setting alike
        for label, backend, workers, setup in settings:
            runs[label].append(run_once(backend, workers, setup))
    rows = []
    for label, *_ in settings:
        done = runs[label]
        rows.append([label, done[-1]["ran_as"], _spread([r["first"] for r in done]), _spread([r["epoch"] for r in done]),
                     _spread([r["close"] for r in done])])
    print(markdown_table(["setting", "ran as", "first batch s", "epoch s (20 000 samples)", "close s"], rows))


if __name__ == "__main__":
    main()
