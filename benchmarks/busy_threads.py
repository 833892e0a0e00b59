"""Process workers started beside Python threads that hold the GIL: feedline and DataLoader, side by side (issue 15).

A training process often runs Python threads of its own while a loader
starts: a second pipeline on threads, a metrics or logging thread, the
automatic choice's own threads on GIL-bound work. Every blocking call the
consumer makes while its workers start (spawning, the hand-shake, reading
their first messages) gives the GIL up, and getting it back waits up to the
switch interval (5 ms by default) for the thread that holds it. feedline
leaves the interval the user's; with ``FEEDLINE_TUNE_PROCESS=1`` it holds
it at 0.5 ms while it sets up, while process workers start and while the
consumer waits for their batches (`feedline._switch_interval`), and gives
the user's back in between. The numbers below were taken when that was the
default.

Each run is a fresh interpreter: NumPy, feedline and torch imported, then
``--threads`` threads spinning in Python are started, then the clock runs
from building the loader to its first batch and to the end of one epoch of
``--samples`` tiny samples (a doubling, batch 16: start-up and per-batch
hand-offs decide the time, not the work). Settings alternate, ``--reps``
rounds; medians and ranges.

Run from the repository root (the peers need ``pip install torch``):

    python -m benchmarks.busy_threads               # ~3 minutes on 2 cores
    python -m benchmarks.busy_threads --quick       # smoke test: one round, two loaders

Last measured: benchmarks/history/2026-11-28-thirty-first-session-the-suite-at-2a22738.md (``--samples 4096``)
and benchmarks/history/2026-11-28-thirtieth-session-process-workers-started-beside-python.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .tables import markdown_table

LOADERS = ("feedline process x2", "feedline process x2, fresh interpreters", "torch DataLoader fork x2",
           "torch DataLoader spawn x2", "feedline process x2, FEEDLINE_TUNE_PROCESS=1")


def double(x):
    """The per-sample work: trivial, so the loaders' start-up and hand-offs are what is timed."""
    return x * 2


# One run, in a fresh interpreter: prints a JSON line of timings.
_RUN = r"""
import json, sys, threading, time
import numpy as np
import torch
import feedline as fl
from benchmarks.busy_threads import double
loader, threads, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
data = np.arange(samples, dtype=np.float32).reshape(-1, 1)
stop = threading.Event()

def spin():
    while not stop.is_set():
        sum(range(1000))

spinners = [threading.Thread(target=spin, daemon=True) for _ in range(threads)]
for t in spinners:
    t.start()
time.sleep(0.05)
start = time.perf_counter()
if loader.startswith("feedline"):
    pipe = fl.from_arrays(data).map(double, backend="process", workers=2).batch(16)
    it = iter(pipe)
else:
    context = "spawn" if "spawn" in loader else None
    pipe = torch.utils.data.DataLoader(data, batch_size=16, num_workers=2, multiprocessing_context=context)
    it = iter(pipe)
first_batch = next(it)
first = time.perf_counter() - start
rows = len(first_batch) + sum(len(b) for b in it)
epoch = time.perf_counter() - start
if loader.startswith("feedline"):
    pipe.close()
else:
    del it
closed = time.perf_counter() - start - epoch
stop.set()
for t in spinners:
    t.join()
print(json.dumps({"first": first, "epoch": epoch, "close": closed, "rows": rows}))
"""


def run_once(loader: str, threads: int, samples: int) -> dict:
    env = dict(os.environ, FEEDLINE_REMEMBER="0")
    if "fresh interpreters" in loader:
        env["FEEDLINE_FORKSERVER"] = "0"
    env.pop("FEEDLINE_TUNE_PROCESS", None)
    if "FEEDLINE_TUNE_PROCESS=1" in loader:
        env["FEEDLINE_TUNE_PROCESS"] = "1"
    done = subprocess.run([sys.executable, "-c", _RUN, loader, str(threads), str(samples)], capture_output=True,
                          text=True, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{loader} with {threads} busy threads failed:\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    if record["rows"] != samples:
        raise RuntimeError(f"{loader} delivered {record['rows']} rows of {samples}")
    return record


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.busy_threads", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="rounds (each loader once per round, alternating)")
    parser.add_argument("--threads", type=int, action="append", help="busy threads in the consumer; repeatable "
                        "(default: 0 and 2)")
    parser.add_argument("--samples", type=int, default=512, help="samples per epoch (default 512: 32 batches)")
    parser.add_argument("--quick", action="store_true", help="one round of two loaders: a smoke test")
    args = parser.parse_args(argv)
    loaders = LOADERS[:1] + LOADERS[2:3] if args.quick else LOADERS
    counts = args.threads or [0, 2]
    reps = 1 if args.quick else args.reps
    runs = {(loader, n): [] for n in counts for loader in loaders}
    for _ in range(reps):
        for key in runs:
            runs[key].append(run_once(key[0], key[1], args.samples))
    rows = [[loader, str(n), _spread([r["first"] for r in done]), _spread([r["epoch"] for r in done]),
             _spread([r["close"] for r in done])] for (loader, n), done in runs.items()]
    print(markdown_table(["loader", "busy threads", "first batch s", f"epoch s ({args.samples} samples)", "close s"], rows,
                         "llrrr"))


if __name__ == "__main__":
    main()
