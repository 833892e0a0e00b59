"""The user's own training step in the training process while a pipeline runs beside it: threads, processes, none.

Run (from the repository root)::

    python -m benchmarks.user_step                       # ~3 minutes on 2 cores
    python -m benchmarks.user_step --rounds 12 --base ../other-checkout/src

One fresh interpreter with no thread-count variable set (what users have),
torch imported first, holds both pipelines: each maps
`benchmarks.blas_threads.torch_augment` (torch ops per sample), four samples
a step, one worker per core, one on ``backend="thread"`` and one on
``"process"``. Its main loop takes a batch from the pipeline of the current
setting (untimed), then times the user's step: a 1000x1000 float32 torch
matmul, and a small CNN's training step (two convolutions, SGD) on a
32x3x64x64 batch; ``none`` is the step alone. The settings take turns in
blocks of ``--block`` steps, in a shuffled order each round
(`runner.round_order`), the first ``--skip`` steps of each block left out
(the other pipeline's read-ahead finishing, worker start-up): under a
load that changes from second to second, each round's blocks ran seconds
apart. The table holds, per setting, the median over rounds of each
block's median step, and the per-round ratio to the block beside
processes (median, and the range over rounds). The whole step (matmul then
CNN step) is the measure; its two parts are shown too, but the workers'
share of the cores moves between them: thread workers need the GIL between
their ops, which the CNN step's Python holds, so beside threads they do
less during the CNN step and more during the matmul. ``--base SRC``: threads with
feedline imported from SRC (another version), in its own interpreter, its
ratio to that interpreter's own processes block. Last measured:
benchmarks/RESULTS.md, "The training process left alone".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .blas_threads import FEEDLINE_SRC, ROOT
from .tables import markdown_table

_RUN = r'''
import json, os, random, statistics, sys, time
import numpy as np, torch
import torch.nn.functional as F
import feedline as fl
from benchmarks import ENV_VARS
from benchmarks.blas_threads import torch_augment
from benchmarks.runner import round_order
for var in ENV_VARS:
    os.environ.pop(var, None)  # the benchmarks package sets them to 1 for the peer suite: not here
rounds, block, skip = (int(v) for v in sys.argv[1:4])
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
samples = 4 * (rounds * block + 8)
pipes = {b: fl.from_arrays(np.arange(samples)).map(torch_augment, backend=b, workers=os.cpu_count()).batch(4)
         for b in ("thread", "process")}
batches = {b: iter(p) for b, p in pipes.items()}
for it in batches.values():
    next(it)  # workers started before the first round
out = {s: {"step": [], "matmul": [], "conv": []} for s in ("none", "thread", "process")}
threads = set()
for r in range(rounds):
    for setting in round_order(list(out), r):
        whole, matmul, conv = [], [], []
        for n in range(block):
            if setting != "none":
                next(batches[setting])
            start = time.perf_counter()
            a @ a
            middle = time.perf_counter()
            conv_step()
            end = time.perf_counter()
            if n >= skip:
                whole.append(end - start); matmul.append(middle - start); conv.append(end - middle)
                threads.add(torch.get_num_threads())
        out[setting]["step"].append(statistics.median(whole))
        out[setting]["matmul"].append(statistics.median(matmul))
        out[setting]["conv"].append(statistics.median(conv))
for p in pipes.values():
    p.close()
print(json.dumps({"blocks": out, "threads": sorted(threads)}))
'''


def one_run(src: str, rounds: int, block: int, skip: int) -> dict:
    """Per-round block medians of one fresh interpreter with feedline from ``src``: {setting: {step: [s]}}."""
    from feedline._blas_limit import USER_BLAS_VARS

    env = {k: v for k, v in os.environ.items() if k not in USER_BLAS_VARS and not k.startswith("FEEDLINE_")}
    env["PYTHONPATH"] = os.pathsep.join([src, ROOT])
    done = subprocess.run([sys.executable, "-c", _RUN, str(rounds), str(block), str(skip)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.user_step: the run with {src} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _row(label: str, blocks: dict, beside_processes: dict) -> list[str]:
    cells = [label]
    for step in ("step", "matmul", "conv"):
        times, paired = blocks[step], beside_processes[step]
        ratios = [t / p for t, p in zip(times, paired)]
        cells += [f"{statistics.median(times) * 1e3:.1f}",
                  f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"]
    return cells


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.user_step", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8, help="rounds: each setting one block per round")
    parser.add_argument("--block", type=int, default=12, help="steps per block")
    parser.add_argument("--skip", type=int, default=4, help="first steps of each block left out")
    parser.add_argument("--base", help="another feedline's src folder: its thread workers beside the step too")
    args = parser.parse_args(argv)
    if args.skip >= args.block:
        raise SystemExit(f"benchmarks.user_step: --skip {args.skip} leaves no step of a --block {args.block}")
    run = one_run(FEEDLINE_SRC, args.rounds, args.block, args.skip)
    blocks = run["blocks"]
    rows = [_row(label, blocks[label], blocks["process"]) for label in ("thread", "process", "none")]
    if args.base:
        base = one_run(args.base, args.rounds, args.block, args.skip)["blocks"]
        rows.append(_row("thread, base", base["thread"], base["process"]))
    print(f"\n{os.cpu_count()} CPUs; {args.rounds} rounds of {args.block}-step blocks ({args.skip} left out); "
          f"torch threads in the main thread: {run['threads']}\n")
    print(markdown_table(["beside", "whole step ms", "vs process, per round", "matmul ms", "vs process",
                          "conv step ms", "vs process"], rows, "lrrrrrr"))


if __name__ == "__main__":
    main()
