"""The automatic choice's first epoch against the best and the worst hand setting, paired, in fresh interpreters (issue 15).

What a user's first run sees: a new Python process describes
``from_arrays(data, index).map(fn).batch(B)`` and iterates one epoch; the
clock runs from describing the pipeline to the last batch (imports and the
workload's data are ready before it, as a training script's are). Settings:
``auto`` (``map(fn)``, nothing remembered: ``FEEDLINE_REMEMBER=0``), ``best``
(the peer suite's best hand setting of ``map()`` for the workload) and
``worst`` (the other backend, same worker count). Each round runs every
setting once in a seeded shuffled order; ``auto / best`` is the median of
the rounds' own ratios (with its interquartile range), so drift of a noisy
machine between rounds cancels instead of landing on one row. One untimed
epoch reads the workload's files first: the audio workload's first run
after its WAV files left the page cache ran at ~3,400 samples/s in every
setting, against ~7,000 warm, and landed on whichever setting ran first.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.autotune                       # jpeg, seg, gil, audio, store; 8 rounds (~6 min, 2 cores)
    python -m benchmarks.autotune --workload audio --rounds 16
    python -m benchmarks.autotune --quick               # smoke test: small data, one round

Target (issue 15): ``auto / best`` >= 0.95 on every workload.
Last run: benchmarks/RESULTS.md, "Automatic choice, paired first runs".
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

WORKLOADS = ("jpeg", "seg", "gil", "audio", "store")
SETTINGS = ("auto", "best", "worst")

# One epoch in a fresh interpreter: prints one JSON line.
_RUN = r"""
import json, sys, time
from benchmarks.workloads import build
name, setting, quick = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
w = build(name, quick=quick)
import feedline as fl
settings = json.loads(sys.argv[4])
start = time.perf_counter()
pipe = fl.from_arrays(w.data, w.index).map(w.fn, **settings).batch(w.batch_size)
with pipe:
    it = iter(pipe)
    rows = sum(len(b[-1]) for b in it)
    seconds = time.perf_counter() - start
    stats = it.stats()
print(json.dumps({"rows": rows, "expected": len(w.data), "rate": rows / seconds, "backend": stats.backend,
                  "decision": stats.decision}))
"""


def hand_settings(name: str) -> dict[str, dict]:
    """``{"auto": {}, "best": ..., "worst": ...}`` for workload ``name`` (the worst: the other backend, as many workers)."""
    from .workloads import build

    best = build(name, quick=True).hand
    if not best or best.get("backend") not in ("thread", "process"):
        raise ValueError(f"workload {name!r} has no thread or process hand setting to compare with")
    worst = dict(best, backend="process" if best["backend"] == "thread" else "thread")
    return {"auto": {}, "best": best, "worst": worst}


def one_epoch(name: str, setting: str, settings: dict, quick: bool) -> dict:
    """Run one epoch of ``name`` with ``settings`` in a fresh interpreter; its JSON record."""
    env = dict(os.environ, FEEDLINE_REMEMBER="0")
    done = subprocess.run([sys.executable, "-c", _RUN, name, setting, "1" if quick else "0", json.dumps(settings)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} / {setting} failed:\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    if record["rows"] != record["expected"]:
        raise RuntimeError(f"{name} / {setting} delivered {record['rows']} rows of {record['expected']}")
    return record


def quartiles(values: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of ``values`` (both the value itself for one)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def measure(name: str, rounds: int, quick: bool, log=print) -> dict:
    """Rates per setting, the rounds' auto/best and auto/worst ratios, and how often auto ran as each backend."""
    settings = hand_settings(name)
    one_epoch(name, "best", settings["best"], quick)  # untimed: the workload's files read once, as later runs find them
    rates = {s: [] for s in SETTINGS}
    to_best, to_worst, ran_as = [], [], {}
    for r in range(rounds):
        order = list(SETTINGS)
        random.Random(r).shuffle(order)
        got = {s: one_epoch(name, s, settings[s], quick) for s in order}
        for s in SETTINGS:
            rates[s].append(got[s]["rate"])
        to_best.append(got["auto"]["rate"] / got["best"]["rate"])
        to_worst.append(got["auto"]["rate"] / got["worst"]["rate"])
        ran_as[got["auto"]["backend"]] = ran_as.get(got["auto"]["backend"], 0) + 1
        log(f"[{name}] round {r + 1}/{rounds}: " + ", ".join(f"{s} {got[s]['rate']:,.0f}" for s in SETTINGS)
            + f" samples/s; auto ran as {got['auto']['backend']}")
    return {"settings": settings, "rates": rates, "to_best": to_best, "to_worst": to_worst, "ran_as": ran_as}


def table(results: dict) -> str:
    rows = []
    for name, r in results.items():
        low, high = quartiles(r["to_best"])
        best = r["settings"]["best"]
        rows.append([name, f"{best['backend']} x{best.get('workers', '?')}",
                     *(f"{statistics.median(r['rates'][s]):,.0f}" for s in SETTINGS),
                     f"{statistics.median(r['to_best']):.3f} ({low:.3f}-{high:.3f})",
                     f"{statistics.median(r['to_worst']):.2f}",
                     ", ".join(f"{backend} {n}" for backend, n in sorted(r["ran_as"].items()))])
    return markdown_table(["workload", "best hand", "auto samples/s", "best", "worst", "auto / best (quartiles)",
                           "auto / worst", "auto ran as"], rows, "llrrrrrl")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autotune", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="repeatable; default: all")
    parser.add_argument("--rounds", type=int, default=8, help="rounds (each setting once per round, shuffled order)")
    parser.add_argument("--quick", action="store_true", help="small data, one round: a smoke test, not a measurement")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    results = {name: measure(name, rounds, args.quick) for name in args.workload or WORKLOADS}
    print()
    print(table(results))


if __name__ == "__main__":
    main()
