"""Thread workers beside NumPy's BLAS pool: one BLAS thread while they run (the default) against the pool left as it is.

Run (from the repository root)::

    python -m benchmarks.blas_threads            # ~1 minute on 2 cores
    python -m benchmarks.blas_threads --reps 5

The suite's ``audio`` workload (WAV decode, then a log-mel filter bank: one
small matrix product per sample) on ``backend="thread"`` with one worker
per core, and on ``backend="process"`` for reference. Every run is a fresh
interpreter with no BLAS thread variable set (what users have; the peer
suite sets them to 1, so its tables never show this), four epochs, the
first with start-up; the settings alternate. ``limited``: feedline's
default (`feedline._blas_limit`); ``pool as is``: ``FEEDLINE_BLAS_LIMIT=0``.

Last measured (2026-11-26, 2 cores, Python 3.11, ``--reps 4``): thread
workers 4,805 samples/s limited, 3,406 with the pool as is (0.71), process
workers 8,807 (benchmarks/RESULTS.md, "BLAS threads beside thread workers").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .tables import markdown_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {  # label -> (backend, extra environment)
    "thread, limited": ("thread", {}),
    "thread, pool as is": ("thread", {"FEEDLINE_BLAS_LIMIT": "0"}),
    "process": ("process", {}),
}
_RUN = (
    "import json, os, sys, time\n"
    "import numpy\n"  # first, as a training script does: its BLAS reads the environment as it loads
    "import feedline as fl\n"
    "from benchmarks import ENV_VARS, workloads\n"
    "for var in ENV_VARS:\n"
    "    os.environ.pop(var, None)  # the benchmarks package sets them to 1 for the peer suite: not here\n"
    "from threadpoolctl import threadpool_info\n"
    "def blas_threads():\n"
    "    return max([i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'] or [0])\n"
    "w = workloads.build('audio')\n"
    "seen = []\n"
    "def features(sample):\n"
    "    if not seen:\n"
    "        seen.append(blas_threads())\n"
    "    return w.fn(sample)\n"
    "pipe = fl.from_arrays(w.data, w.index).map(features, backend=sys.argv[1]).batch(w.batch_size)\n"
    "rates = []\n"
    "with pipe:\n"
    "    for _ in range(4):\n"
    "        start, rows = time.perf_counter(), 0\n"
    "        for batch in pipe:\n"
    "            rows += len(batch[-1])\n"
    "        rates.append(rows / (time.perf_counter() - start))\n"
    "print(json.dumps({'rates': rates, 'blas_threads': seen[0] if seen else None}))\n"
)


def one_run(backend: str, env: dict) -> dict:
    """Samples/s of four epochs in a fresh interpreter, no BLAS thread variable set; the BLAS threads a sample saw."""
    from feedline._blas_limit import USER_BLAS_VARS

    base = {k: v for k, v in os.environ.items() if k not in USER_BLAS_VARS and k != "FEEDLINE_BLAS_LIMIT"}
    base["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "src"), ROOT])
    done = subprocess.run([sys.executable, "-c", _RUN, backend], cwd=ROOT, env=base | env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.blas_threads: {backend} {env} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.blas_threads", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh interpreters per setting, alternating")
    args = parser.parse_args(argv)
    runs: dict[str, list[list[float]]] = {label: [] for label in SETTINGS}
    for rep in range(args.reps):
        for label, (backend, env) in SETTINGS.items():
            run = one_run(backend, env)
            rates = run["rates"]
            runs[label].append(rates)
            seen = run["blas_threads"]  # (None: the samples ran in worker processes, one BLAS thread each)
            print(f"  rep {rep} {label:20s} " + " ".join(f"{r:7.0f}" for r in rates)
                  + ("" if seen is None else f"   (BLAS threads in a sample: {seen})"), flush=True)
    rows = []
    limited = statistics.median(r for rates in runs["thread, limited"] for r in rates[1:])
    for label, reps in runs.items():
        first = statistics.median(rates[0] for rates in reps)
        later = statistics.median(r for rates in reps for r in rates[1:])
        rows.append([label, f"{first:,.0f}", f"{later:,.0f}", f"{later / limited:.2f}"])
    print(f"\n{os.cpu_count()} CPUs; audio workload, one worker per core; medians of {args.reps} interpreters\n")
    print(markdown_table(["setting", "epoch 1 samples/s", "epochs 2-4 samples/s", "vs limited"], rows, "lrrr"))


if __name__ == "__main__":
    main()
