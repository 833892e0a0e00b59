"""Process workers whose map uses torch: the library imported once by a zygote, or by every worker.

Run (from the repository root, in the project's virtualenv with ``.[test]``):

    python -m benchmarks.preload                  # workers 2, 8, 16; 3 rounds; ~3 minutes on 2 cores
    python -m benchmarks.preload --workers 16 --rounds 5
    python -m benchmarks.preload --setup 3        # 3 s between describing and iterating (a model built), untimed
    python -m benchmarks.preload --setup 3 --settings zygote,automatic   # and the automatic choice (no backend=)

Each run is a fresh interpreter with torch, NumPy and feedline imported
before the clock: ``map(fn, backend="process", workers=W)`` over 2,048 small
images (a torch resize and normalisation per sample), one epoch. Settings:
``zygote`` (the default: the fork server's zygote imports torch once and
forks the workers, `feedline.backends.process._preload`), ``each worker``
(``FEEDLINE_PRELOAD=0``: every worker imports torch while unpickling the
pipeline, as before), and torch's own ``DataLoader`` (fork context, the
same function, ``batch_size=32``: its workers are forks of this process,
torch already in them); with ``--settings``, also ``automatic`` (``map(fn,
workers=W)`` with no backend: threads first, process workers from the
zygote if the trial finds the GIL holds them back), ``threads`` and ``serial``
(``backend="thread"`` / ``"serial"``: is the automatic choice ever slower
than the best of them, or than the plain loop?). Reported: seconds to the first batch, samples/s of
the epoch (start-up included; with ``--setup S``, the clock starts after S
seconds of sleep between describing the loader and iterating it, during
which a zygote started at the description imports), and the private memory of the workers (the
sum of their PSS, read from ``/proc/PID/smaps_rollup`` mid-epoch: pages a
zygote or the parent shares with them count once across all, and the
zygote itself, a helper like the fork server, is not counted).

Last run: benchmarks/history/, the thirty-fifth session (--settings zygote,automatic,threads,serial),
the thirty-third (--setup 3) and the thirty-second (files 2026-11-28-thirty-*-session-*.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys

from .tables import markdown_table

SETTINGS = ("zygote", "each worker", "torch DataLoader")
ALL_SETTINGS = (*SETTINGS, "automatic", "threads", "serial")

RUN = r'''
import json, os, sys, time
import numpy as np
import torch
import feedline as fl

workers, setting, n, setup = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])


def augment(i):
    rng = np.random.default_rng(i)
    x = torch.from_numpy(rng.integers(0, 255, (3, 64, 64), dtype=np.uint8)).float()
    x = torch.nn.functional.interpolate(x[None], size=(48, 48), mode="bilinear", align_corners=False)[0]
    return ((x - x.mean()) / (x.std() + 1e-6)).numpy()


def tree_pss(pids):
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except OSError:
            pass
    return total / 1024


def descendants():
    children, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = [int(k) for k in f.read().split()]
        except OSError:
            kids = []
        children += kids
        todo += kids
    return children


start = time.perf_counter()
first = None
if setting == "torch DataLoader":
    import torch.utils.data as tud

    class Rows(tud.Dataset):
        def __len__(self):
            return n

        def __getitem__(self, i):
            return augment(i)

    loader = tud.DataLoader(Rows(), batch_size=32, num_workers=workers, multiprocessing_context="fork")
else:
    backend = {"automatic": None, "threads": "thread", "serial": "serial"}.get(setting, "process")
    pipe = fl.from_sequence(range(n)).map(augment, backend=backend, workers=workers).batch(32)
if setup:  # the user builds a model between describing the loader and iterating it: the clock starts after
    time.sleep(setup)
    start = time.perf_counter()
batches = iter(loader if setting == "torch DataLoader" else pipe)
from feedline import testing

rows, pss = 0, None
for k, batch in enumerate(batches):
    if first is None:
        first = time.perf_counter() - start
    if k == n // 64 or pss is None and k == 0 and n < 64:  # mid-epoch, every worker up (a DataLoader's leave at the end of the epoch)
        helpers = set(testing.helper_pids())
        pss = tree_pss([pid for pid in descendants() if pid not in helpers])
    rows += len(batch)
seconds = time.perf_counter() - start
if setting == "torch DataLoader":
    del batches
stats = None if setting == "torch DataLoader" else pipe.stats()
ran = "" if stats is None else f"{stats.backend} x{stats.workers}"
decision = "" if stats is None else stats.decision
if setting != "torch DataLoader":
    pipe.close()
print(json.dumps({"rows": rows, "first": first, "rate": rows / seconds, "pss": pss, "ran": ran, "decision": decision}))
'''


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.preload", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, action="append", help="worker counts (default 2, 8, 16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=2048, help="samples in the epoch (default 2048)")
    parser.add_argument("--setup", type=float, default=0.0,
                        help="seconds between describing the loader and iterating it (a model being built), not timed")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help=f"which of {','.join(ALL_SETTINGS)} to run (default: {','.join(SETTINGS)})")
    args = parser.parse_args(argv)
    settings = tuple(s for s in ALL_SETTINGS if s in args.settings.split(","))
    if not settings or set(args.settings.split(",")) - set(ALL_SETTINGS):
        parser.error(f"--settings takes some of {','.join(ALL_SETTINGS)}; got {args.settings}")
    counts = args.workers or [2, 8, 16]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.join(root, "src"), os.environ.get("PYTHONPATH", "")]),
           "FEEDLINE_REMEMBER": "0", "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    rows = []
    for workers in counts:
        runs = {s: [] for s in settings}
        for r in range(args.rounds):
            for setting in random.Random(r).sample(settings, len(settings)):
                run_env = dict(env, FEEDLINE_PRELOAD="0" if setting == "each worker" else "1")
                done = subprocess.run([sys.executable, "-c", RUN, str(workers), setting, str(args.samples), str(args.setup)], env=run_env, cwd=root,
                                      capture_output=True, text=True, timeout=600)
                if done.returncode != 0:
                    raise SystemExit(f"benchmarks.preload: {setting} x{workers} failed:\n{done.stderr[-3000:]}")
                m = json.loads(done.stdout.strip().splitlines()[-1])
                if m["rows"] != args.samples:
                    raise SystemExit(f"benchmarks.preload: {setting} x{workers} delivered {m['rows']} rows, not {args.samples}")
                runs[setting].append(m)
                print(f"  x{workers} {setting:16s} round {r}: first batch {m['first']:.2f} s, {m['rate']:.0f} samples/s, "
                      f"workers' PSS {m['pss']:.0f} MiB{' (' + m['ran'] + ')' if setting == 'automatic' else ''}", flush=True)
        for setting in settings:
            med = {k: statistics.median(m[k] for m in runs[setting]) for k in ("first", "rate", "pss")}
            rows.append([f"x{workers}", setting, f"{med['first']:.2f}", f"{med['rate']:.0f}", f"{med['pss']:.0f}"])
    print("\nmedians over the rounds:\n")
    print(markdown_table(["workers", "setting", "first batch s", "samples/s", "workers' PSS MiB"], rows, "llrrr"))


if __name__ == "__main__":
    main()
