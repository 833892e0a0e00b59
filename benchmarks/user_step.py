"""The user's own training step in the training process while a pipeline runs beside it: threads, processes, none.

Run (from the repository root)::

    python -m benchmarks.user_step                       # ~3 minutes on 2 cores
    python -m benchmarks.user_step --reps 5 --base ../other-checkout/src

Each run is a fresh interpreter with no thread-count variable set (what
users have), torch imported first. Its main loop takes a batch from the
pipeline (untimed), then times the user's step: a 1000x1000 float32 torch
matmul, and a small CNN's training step (two convolutions, SGD) on a
32x3x64x64 batch. The pipeline maps `benchmarks.blas_threads.torch_augment`
(torch ops per sample), four samples a step, one worker per core, on
``backend="thread"`` or ``"process"``; ``none`` is the step alone. The
first steps (worker start-up) are left out. ``--base SRC``: also runs on
threads with feedline imported from SRC (another version). Rounds are
paired: every setting once per round, in a shuffled order
(`runner.round_order`); the table holds medians over the rounds of each
run's median step, and the torch intra-op count the main thread read.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .blas_threads import FEEDLINE_SRC, ROOT
from .runner import round_order
from .tables import markdown_table

_RUN = r'''
import json, os, statistics, sys, time
import numpy as np, torch
import torch.nn.functional as F
import feedline as fl
from benchmarks import ENV_VARS
from benchmarks.blas_threads import torch_augment
for var in ENV_VARS:
    os.environ.pop(var, None)  # the benchmarks package sets them to 1 for the peer suite: not here
backend, steps, skip = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                            torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(32, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y, a = torch.randn(32, 3, 64, 64), torch.randint(0, 10, (32,)), torch.randn(1000, 1000)
def conv_step():
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
batches = None
if backend != "none":
    pipe = fl.from_arrays(np.arange(4 * (steps + 8))).map(torch_augment, backend=backend, workers=os.cpu_count())
    batches = iter(pipe.batch(4))
matmul, conv, threads = [], [], set()
for n in range(steps):
    if batches is not None:
        next(batches)
    start = time.perf_counter()
    a @ a
    middle = time.perf_counter()
    conv_step()
    end = time.perf_counter()
    if n >= skip:
        matmul.append(middle - start); conv.append(end - middle); threads.add(torch.get_num_threads())
if batches is not None:
    pipe.close()
print(json.dumps({"matmul": statistics.median(matmul), "conv": statistics.median(conv), "threads": sorted(threads)}))
'''


def one_run(setting: str, src: str, steps: int, skip: int) -> dict:
    """Median step times of one fresh interpreter: ``setting`` is ``none``, ``thread`` or ``process``."""
    from feedline._blas_limit import USER_BLAS_VARS

    env = {k: v for k, v in os.environ.items() if k not in USER_BLAS_VARS and not k.startswith("FEEDLINE_")}
    env["PYTHONPATH"] = os.pathsep.join([src, ROOT])
    done = subprocess.run([sys.executable, "-c", _RUN, setting, str(steps), str(skip)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.user_step: {setting} ({src}) failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.user_step", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="paired rounds (a fresh interpreter per setting)")
    parser.add_argument("--steps", type=int, default=60, help="steps per run")
    parser.add_argument("--skip", type=int, default=10, help="first steps left out (worker start-up)")
    parser.add_argument("--base", help="another feedline's src folder: its thread workers beside the step too")
    args = parser.parse_args(argv)
    settings = {"none": ("none", FEEDLINE_SRC), "thread": ("thread", FEEDLINE_SRC),
                "process": ("process", FEEDLINE_SRC)}
    if args.base:
        settings["thread, base"] = ("thread", args.base)
    runs: dict[str, list[dict]] = {label: [] for label in settings}
    for rep in range(args.reps):
        for label in round_order(list(settings), rep):
            run = one_run(*settings[label], args.steps, args.skip)
            runs[label].append(run)
            print(f"  round {rep} {label:14s} matmul {run['matmul'] * 1e3:6.1f} ms  conv step {run['conv'] * 1e3:6.1f} ms"
                  f"  torch threads {run['threads']}", flush=True)
    process = {k: statistics.median(r[k] for r in runs["process"]) for k in ("matmul", "conv")}
    rows = []
    for label, reps in runs.items():
        matmul, conv = (statistics.median(r[k] for r in reps) for k in ("matmul", "conv"))
        threads = sorted({t for r in reps for t in r["threads"]})
        rows.append([label, f"{matmul * 1e3:.1f}", f"{matmul / process['matmul']:.2f}", f"{conv * 1e3:.1f}",
                     f"{conv / process['conv']:.2f}", ",".join(map(str, threads))])
    print(f"\n{os.cpu_count()} CPUs; medians of {args.reps} paired rounds, {args.steps - args.skip} steps each\n")
    print(markdown_table(["beside", "matmul ms", "vs process", "conv step ms", "vs process", "torch threads"], rows,
                         "lrrrrr"))


if __name__ == "__main__":
    main()
