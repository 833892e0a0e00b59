"""Time to the first batch and to close, in a fresh interpreter each run (issues 14 and 55).

Two tables.

``--suite`` (issue 55): the suite's workloads (``gil``, ``jpeg``, ``seg``,
``audio``, ``store``) and three whose dataset holds an array of ~300 MB in
memory (``memory``: the store's photos decoded into RAM, the store's
function; ``memory-gil``: 300 MB of float32 rows, the ``gil`` function on
each row's first 64 values; ``memory-cheap``: the same rows, a cheap
slice), each under the automatic choice (``from_arrays(data, index).map(fn)
.batch(B)``, nothing remembered) against torch's ``DataLoader(num_workers=2)``
with fork over the same function. The clock runs from describing the
pipeline (building the DataLoader) to the first batch, worker start
included; the libraries are imported before it, as a script's first lines
do (``import feedline``, ``from torch.utils.data import DataLoader``).
Settings alternate within each round, so a burst of foreign load touches
both alike; ``auto / torch`` is the median of the rounds' own ratios.

Without ``--suite`` (issue 14): a cheap float conversion of 20 000
samples, batch 32, per backend setting, iterated at once or after 0.5 s of
the user's own set-up; seconds from the end of describing to the first
batch, the whole epoch, and ``close``.

Run from the repository root:
    python -m benchmarks.first_batch --suite [--reps 5] [--workload gil,memory] [--base OTHER/src]
    python -m benchmarks.first_batch [--reps 5] [--quick]

``--base`` runs a second feedline (the ``src`` folder of another checkout,
say a worktree of main) in the same rounds, for a change's before and after;
both are compiled first (`benchmarks.feedline_sources`).

Last measured: benchmarks/RESULTS.md, "First batch against torch's fork DataLoader" (the suite);
benchmarks/history/2026-11-25-eighth-session-issues-14-15-18.md, "First batch and close" (the settings).
Earlier suite tables: benchmarks/history/2026-12-03-first-batch-as-pieces.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .feedline_sources import compile_sources, environment
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

# One first batch of a suite workload, in a fresh interpreter: prints a JSON line.
_SUITE_RUN = r"""
import dataclasses, json, os, sys, time
import numpy as np
loader, name = sys.argv[1], sys.argv[2]
from benchmarks.first_batch import suite_workload
w = suite_workload(name)
if loader == "torch-fork":
    from torch.utils.data import DataLoader
    from benchmarks.loaders import SampleDataset
else:
    import feedline as fl
    fl.from_arrays  # the description layer's import, as a script's first use of it
start = time.perf_counter()
if loader == "torch-fork":
    it = iter(DataLoader(SampleDataset(w), batch_size=w.batch_size, shuffle=False, num_workers=2))
else:
    pipe = fl.from_arrays(w.data, w.index).map(w.fn).batch(w.batch_size)
    it = iter(pipe)
batch = next(it)
first = time.perf_counter() - start
if list(np.asarray(batch[-1])) != list(range(w.batch_size)):
    raise SystemExit(f"{loader} on {name}: the first batch is not samples 0..{w.batch_size - 1}")
if loader == "torch-fork":
    ran_as = "fork x2"
    it._shutdown_workers()
else:
    ran_as = f"{pipe.stats().backend} x{pipe.stats().workers}"
    pipe.close()
print(json.dumps({"first": first, "ran_as": ran_as}))
"""

SUITE = ("gil", "jpeg", "seg", "audio", "store", "memory", "memory-gil", "memory-cheap")
SUITE_LOADERS = ("feedline-auto", "torch-fork")
MEMORY_ROWS = (75_000, 1_000)  # float32: 300 MB


def _cheap(sample):
    """A slice of the row, doubled: the work is nothing, start-up is everything."""
    row, index = sample
    return row[:16] * 2, index


def _gil_head(sample):
    """The ``gil`` workload's function on the row's first values."""
    from .workloads import GIL_VALUES, gil_augment

    row, index = sample
    return gil_augment((row[:GIL_VALUES], index))


def suite_workload(name: str):
    """The workload ``name`` of the ``--suite`` table (see the module docstring)."""
    import dataclasses

    import numpy as np

    from .workloads import build

    if name == "memory":
        w = build("store")
        return dataclasses.replace(w, data=np.array(w.data))  # read into memory: no memory map
    if name in ("memory-gil", "memory-cheap"):
        w = build("gil", quick=True)
        data = np.random.default_rng(0).random(MEMORY_ROWS, dtype=np.float32)
        return dataclasses.replace(w, data=data, fn=_gil_head if name == "memory-gil" else _cheap)
    return build(name)


def run_suite_once(loader: str, name: str, base: str | None = None) -> dict:
    """One fresh-interpreter run; ``loader`` "base" is the automatic choice of the feedline sources at ``base``."""
    env = environment(dict(os.environ, FEEDLINE_REMEMBER="0"), base if loader == "base" else None)
    if loader == "base":
        loader = "feedline-auto"
    out = subprocess.run([sys.executable, "-c", _SUITE_RUN, loader, name], capture_output=True, text=True,
                         timeout=300, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"a first-batch run ({loader} on {name}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _paired(runs: list, against: list) -> str:
    ratios = [a["first"] / t["first"] for a, t in zip(runs, against)]
    return f"{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"


def suite(names, reps: int, base: str | None = None) -> str:
    """The ``--suite`` table: per workload, each loader's first batch (median and range) and the paired ratios.

    With ``base`` (the ``src`` folder of another feedline checkout), its
    automatic choice runs in the same rounds too: before and after a change.
    """
    loaders = SUITE_LOADERS + (("base",) if base else ())
    compile_sources(base)
    runs = {(name, loader): [] for name in names for loader in loaders}
    for name in names:
        run_suite_once(SUITE_LOADERS[0], name)  # untimed: the workload's files are written and read once
    for r in range(reps):
        for name in names:
            for loader in loaders[r % len(loaders):] + loaders[:r % len(loaders)]:  # each loader first in turn
                runs[name, loader].append(run_suite_once(loader, name, base))
    rows = []
    for name in names:
        auto, torch = runs[name, "feedline-auto"], runs[name, "torch-fork"]
        row = [name, auto[-1]["ran_as"], _spread([a["first"] for a in auto]), _spread([t["first"] for t in torch]),
               _paired(auto, torch)]
        if base:
            before = runs[name, "base"]
            row[2:2] = [_spread([b["first"] for b in before])]
            row += [_paired(before, torch), _paired(auto, before)]
        rows.append(row)
    if base:
        return markdown_table(["workload", "auto ran as", "base first batch s", "auto first batch s",
                               "torch-fork first batch s", "auto / torch, paired", "base / torch, paired",
                               "auto / base, paired"], rows, "llrrrrrr")
    return markdown_table(["workload", "auto ran as", "auto first batch s", "torch-fork first batch s",
                           "auto / torch, paired"], rows, "llrrr")


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
    parser.add_argument("--suite", action="store_true", help="the suite's workloads, automatic choice against DataLoader")
    parser.add_argument("--workload", default=",".join(SUITE), help="with --suite: comma-separated workloads")
    parser.add_argument("--base", help="with --suite: the src folder of another feedline checkout (say, a worktree of "
                                       "main), run in the same rounds: before and after a change")
    args = parser.parse_args(argv)
    if args.suite:
        names = [n for n in args.workload.split(",") if n]
        unknown = [n for n in names if n not in SUITE]
        if unknown:
            parser.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(SUITE)}")
        print(suite(names, args.reps, args.base))
        return
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
