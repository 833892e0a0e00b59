"""The server check: the suite's ``gil`` and ``jpeg`` (and ``audio``) workloads at one worker per core, feedline against DataLoader.

Run (from the repository root, on the big machine; torch for the DataLoader rows)::

    python -m benchmarks.server_check --json /tmp/server_check.json     # ~2 minutes on 16 cores

The peer suite (`python -m benchmarks run`) is shaped for 2 cores: 2
workers, epochs of a few seconds. Here every loader gets ``--workers``
(default: the cores), and each workload is tiled to ``--samples`` rows so
that an epoch lasts seconds at that width, not milliseconds. Rows:

- ``feedline-auto``: ``map(fn)`` with no backend given (what users write), a
  first run: the trial measures, nothing remembered; ``map(fn, workers=W)``
  where ``--workers`` is not the machine's cores (e.g. 16 or 64 on 2 cores,
  how many-core behaviour shows on a small machine);
- ``feedline-remembered``: the same, started on the verdict that two earlier
  (untimed) runs' trials agreed on (`feedline.engine._remembered`), as a
  training script's later runs on the same machine do;
- ``feedline-process`` and, for ``jpeg``, ``feedline-thread``: ``map(fn,
  backend=..., workers=W)``;
- ``torch-fork``: ``DataLoader(num_workers=W)``, fork, the same function.

Each run is one epoch with start-up (pipeline or DataLoader built inside
the clock), checked to deliver every index exactly once. ``of ideal`` is
the rate over ``W`` times the per-sample function's rate in this process
(on a machine with hyper-threads ``W`` counts logical cores, so the ideal
is out of reach there); ``x torch`` compares with the DataLoader row of the
same run. The median of ``--reps`` runs is reported; loaders take turns.
The automatic rows also print what the trial measured and why it chose
(``why:`` lines on stderr).

Last measured: 2026-11-27 on an H200 host with 16 cores (benchmarks/RESULTS.md,
"16 cores: the suite's workloads"; benchmarks/history/2026-11-27-twenty-third-session-16-cores-again-the.md): automatic / processes by hand ``gil`` 1.01,
``jpeg`` 0.96, ``audio`` ~0.97 (every first run chose processes at once on
the four scouts' verdict); the automatic row 1.09-1.34x DataLoader.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time

import numpy as np

from . import loaders as loaders_mod
from . import workloads as workloads_mod
from .runner import cores


def tiled(w, samples: int):
    """``w`` with its rows repeated to ``samples`` rows (the index runs 0..samples-1)."""
    data = np.resize(w.data, (samples,) + w.data.shape[1:])
    return dataclasses.replace(w, data=data, description=f"{w.description} (tiled to {samples} rows)")


REMEMBERED = "remembered"  # the row's settings: the automatic choice, started on a remembered verdict


def rows_for(name: str, workers: int, pinned: bool = False) -> dict[str, dict | str | None]:
    """Loader row -> the feedline ``map`` settings (None: the row is the DataLoader; REMEMBERED: see above).

    ``pinned``: ``--workers`` differs from the cores, and the automatic row
    gets ``map(fn, workers=W)`` too (what a user who sets the count writes).
    """
    rows = {"feedline-auto": {"workers": workers} if pinned else {}, "feedline-remembered": REMEMBERED,
            "feedline-process": {"backend": "process", "workers": workers}}
    if name == "jpeg":  # audio's threads: ~1,150 samples/s on 16 cores, a minute an epoch; left out
        rows["feedline-thread"] = {"backend": "thread", "workers": workers}
    rows["torch-fork"] = None
    return rows


def one_epoch(w, settings: dict | str | None) -> dict:
    """One epoch with start-up: seconds, first-batch seconds, what ran; every index checked exactly once."""
    if settings is None:
        make = loaders_mod.LOADERS["torch-fork"]
    elif settings == REMEMBERED:  # its first use runs the trials that must agree, untimed below
        make = loaders_mod.LOADERS["feedline-remembered"]
    else:
        w = dataclasses.replace(w, hand=settings)
        make = loaders_mod.LOADERS["feedline-hand"]
    seen = []
    start = time.perf_counter()
    first = None
    with make(w) as run:
        for batch in run.batches:
            if first is None:
                first = time.perf_counter() - start
            seen.append(np.asarray(batch[-1]).reshape(-1))
        detail = run.detail
        # what the automatic choice measured and why it chose: the feedline rows only
        why = None if settings is None else {"decision": run.why, "trial": dict(run.batches.stats().trial)}
    seconds = time.perf_counter() - start
    got = np.sort(np.concatenate(seen))
    if not np.array_equal(got, np.arange(len(w))):
        raise AssertionError(f"{w.name}: {detail} did not deliver every index exactly once ({len(got)} of {len(w)})")
    return {"seconds": seconds, "first_batch": first, "detail": detail, "rate": len(w) / seconds, "why": why}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.server_check", description=__doc__.splitlines()[0])
    p.add_argument("--workload", action="append", choices=("gil", "jpeg", "audio"),
                   help="repeatable; default: gil and jpeg")
    p.add_argument("--workers", type=int, default=None, help="workers of every loader (default: the cores)")
    p.add_argument("--samples", type=int, default=None, help="rows per epoch (default: 1024 per worker)")
    p.add_argument("--reps", type=int, default=3, help="timed epochs per row; the median is reported")
    p.add_argument("--json", default=None, help="also write the results here")
    args = p.parse_args(argv)
    workers = args.workers or cores()
    samples = args.samples or 1024 * workers
    loaders_mod.WORKERS = workers  # the DataLoader rows read it when they build the loader
    loaders_mod.prepare(["torch-fork"])
    out = {"workers": workers, "samples": samples, "cores": cores(), "workloads": {}}
    lines = [f"{cores()} cores, {workers} workers, {samples} samples per epoch, median of {args.reps}; Python {sys.version.split()[0]}",
             "", "| workload | row | samples/s | of ideal | x torch | first batch s | ran as |", "|---|---|---:|---:|---:|---:|---|"]
    for name in args.workload or ["gil", "jpeg"]:
        w = tiled(workloads_mod.build(name), samples)
        per_sample = workloads_mod.per_sample_seconds(w, samples=40)
        ideal = workers / per_sample
        print(f"[{name}] per-sample function {per_sample * 1e3:.2f} ms; ideal {ideal:,.0f} samples/s", file=sys.stderr, flush=True)
        rows = rows_for(name, workers, pinned=workers != cores())
        runs = {row: [] for row in rows}
        one_epoch(w, rows["feedline-process"])  # warm: page cache, imports, the fork server's first start
        one_epoch(w, REMEMBERED)  # untimed: the agreeing trials the remembered row's runs start on
        for rep in range(args.reps):
            order = list(rows)[rep % len(rows):] + list(rows)[: rep % len(rows)]
            for row in order:
                runs[row].append(one_epoch(w, rows[row]))
                last = runs[row][-1]
                print(f"[{name}] {row}: {last['rate']:,.0f} samples/s, first batch {last['first_batch']:.3f} s ({last['detail']})",
                      file=sys.stderr, flush=True)
                if row in ("feedline-auto", "feedline-remembered"):
                    print(f"[{name}]   why: {last['why']}", file=sys.stderr, flush=True)
        medians = {row: sorted(r, key=lambda m: m["rate"])[len(r) // 2] for row, r in runs.items()}
        torch_rate = medians["torch-fork"]["rate"]
        for row, m in medians.items():
            lines.append(f"| {name} | {row} | {m['rate']:,.0f} | {m['rate'] / ideal:.2f} | {m['rate'] / torch_rate:.2f} "
                         f"| {m['first_batch']:.3f} | {m['detail']} |")
        out["workloads"][name] = {"per_sample_s": per_sample, "ideal": ideal, "runs": runs,
                                  "median_rate": {row: m["rate"] for row, m in medians.items()}}
        out["workloads"][name]["spread"] = {row: statistics.pstdev([m["rate"] for m in r]) for row, r in runs.items()}
    print("\n".join(lines))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
