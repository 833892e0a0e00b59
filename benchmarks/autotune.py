"""The automatic choice's first epoch against the best and the worst hand setting, paired, in fresh interpreters (issue 15).

What a user's first run sees: a new Python process describes
``from_arrays(data, index).map(fn).batch(B)`` and iterates one epoch; the
clock runs from describing the pipeline to the last batch (imports and the
workload's data are ready before it, as a training script's are). Settings:
``auto`` (``map(fn)``, nothing remembered: ``FEEDLINE_REMEMBER=0``), ``best``
(the peer suite's best hand setting of ``map()`` for the workload) and
``worst`` (the other backend, same worker count). Each round runs every
setting once in a seeded shuffled order; ``auto / best`` is the median of
the rounds' own ratios (with its interquartile range) against whichever
hand setting ran faster over the rounds, so drift of a noisy machine
between rounds cancels instead of landing on one row. On a big machine
``--workers`` (e.g. the cores; the suite's 2 by default) sets the hand
settings' width, ``--samples`` tiles the workload so that an epoch holds a
few tasks per worker, and ``--settings auto,best`` leaves out a hand
setting known to be slow there (sixteen threads on pure Python: a minute
an epoch). One untimed
epoch reads the workload's files first: the audio workload's first run
after its WAV files left the page cache ran at ~3,400 samples/s in every
setting, against ~7,000 warm, and landed on whichever setting ran first.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.autotune                       # jpeg, seg, gil, audio, store; 8 rounds (~6 min, 2 cores)
    python -m benchmarks.autotune --workload audio --rounds 16
    python -m benchmarks.autotune --quick               # smoke test: small data, one round
    python -m benchmarks.autotune --workload gil --samples 8192 --settings auto,best   # 16 cores
    python -m benchmarks.autotune --base ../older/src   # another checkout's automatic choice in the same rounds

Target (issue 15): ``auto / best`` >= 0.95 on every workload.
Last run: benchmarks/history/2026-11-29-thirty-eighth-session-where-the-automatic-choice.md (and benchmarks/RESULTS.md,
"Automatic choice, paired first runs").
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys

from .feedline_sources import compile_sources, environment
from .tables import markdown_table

WORKLOADS = ("jpeg", "seg", "gil", "audio", "store")
SETTINGS = ("auto", "best", "worst")

# One epoch in a fresh interpreter: prints one JSON line.
_RUN = r"""
import json, sys, time
from benchmarks.workloads import build
name, setting, quick, samples = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[5])
w = build(name, quick=quick)
if samples:
    from benchmarks.server_check import tiled
    w = tiled(w, samples)
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


def hand_settings(name: str, workers: int | None = None) -> dict[str, dict]:
    """``{"auto": {}, "best": ..., "worst": ...}`` for workload ``name`` (the worst: the other backend, as many workers).

    ``best`` is the peer suite's hand setting (shaped on 2 cores); with
    ``workers`` both hand settings get that many workers, and the automatic
    one too where it differs from the cores (as a user would set it).
    """
    from .runner import cores
    from .workloads import build

    best = build(name, quick=True).hand
    if not best or best.get("backend") not in ("thread", "process"):
        raise ValueError(f"workload {name!r} has no thread or process hand setting to compare with")
    if workers is not None:
        best = dict(best, workers=workers)
    worst = dict(best, backend="process" if best["backend"] == "thread" else "thread")
    auto = {"workers": workers} if workers is not None and workers != cores() else {}
    return {"auto": auto, "best": best, "worst": worst}


def one_epoch(name: str, setting: str, settings: dict, quick: bool, samples: int = 0, base: str | None = None) -> dict:
    """Run one epoch of ``name`` (tiled to ``samples`` rows if given) with ``settings`` in a fresh interpreter.

    ``setting`` "base": the automatic choice of the feedline at ``base`` (`benchmarks.feedline_sources`).
    """
    env = environment(dict(os.environ, FEEDLINE_REMEMBER="0"), base if setting == "base" else None)
    argv = [sys.executable, "-c", _RUN, name, setting, "1" if quick else "0", json.dumps(settings), str(samples)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{name} / {setting} failed:\n{done.stderr[-3000:]}")
    record = json.loads(done.stdout.strip().splitlines()[-1])
    if record["rows"] != record["expected"]:
        raise RuntimeError(f"{name} / {setting} delivered {record['rows']} rows of {record['expected']}")
    return record


def _label(setting: str, settings: dict) -> str:
    """``auto``, or the hand setting as it runs (``thread x16``): which of best and worst is faster is known at the end."""
    return setting if setting in ("auto", "base") else f"{settings['backend']} x{settings.get('workers', '?')}"


def quartiles(values: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of ``values`` (both the value itself for one)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def measure(name: str, rounds: int, quick: bool, workers: int | None = None, samples: int = 0,
            run: tuple[str, ...] = SETTINGS, log=print, base: str | None = None) -> dict:
    """Rates per setting, the rounds' auto/best and auto/worst ratios, and how often auto ran as each backend.

    ``run`` names the settings to run (``auto`` and at least one hand
    setting). After the rounds, the hand setting with the higher median is
    ``best`` and the other ``worst`` (so a machine where the suite's
    2-core choice is not the faster one compares against the faster).
    """
    settings = hand_settings(name, workers)
    if base:
        run, settings["base"] = (*run, "base"), settings["auto"]
    hands = [s for s in run if s not in ("auto", "base")]
    if "auto" not in run or not hands:
        raise ValueError(f"--settings needs auto and best or worst, got {','.join(run)}")
    one_epoch(name, hands[0], settings[hands[0]], quick, samples)  # untimed: the workload's files read once
    rates = {s: [] for s in run}
    ran_as = {}
    for r in range(rounds):
        order = list(run)
        random.Random(r).shuffle(order)
        got = {s: one_epoch(name, s, settings[s], quick, samples, base) for s in order}
        for s in run:
            rates[s].append(got[s]["rate"])
        ran_as[got["auto"]["backend"]] = ran_as.get(got["auto"]["backend"], 0) + 1
        log(f"[{name}] round {r + 1}/{rounds}: " + ", ".join(f"{_label(s, settings[s])} {got[s]['rate']:,.0f}" for s in run)
            + f" samples/s; auto ran as {got['auto']['backend']}: {got['auto']['decision']}", flush=True)
    faster = sorted(hands, key=lambda s: statistics.median(rates[s]), reverse=True)
    best, worst = faster[0], faster[-1] if len(faster) > 1 else None
    to_best = [a / b for a, b in zip(rates["auto"], rates[best])]
    to_worst = [a / b for a, b in zip(rates["auto"], rates[worst])] if worst else []
    to_base = [a / b for a, b in zip(rates["auto"], rates["base"])] if base else []
    base_to_best = [a / b for a, b in zip(rates["base"], rates[best])] if base else []
    return {"settings": settings, "rates": rates, "best": best, "worst": worst, "to_best": to_best,
            "to_worst": to_worst, "ran_as": ran_as, "to_base": to_base, "base_to_best": base_to_best}


def _median_and_quartiles(ratios: list[float]) -> str:
    low, high = quartiles(ratios)
    return f"{statistics.median(ratios):.3f} ({low:.3f}-{high:.3f})"


def table(results: dict) -> str:
    rows = []
    with_base = any(r["to_base"] for r in results.values())
    for name, r in results.items():
        low, high = quartiles(r["to_best"])
        best = r["settings"][r["best"]]
        median = {s: f"{statistics.median(v):,.0f}" for s, v in r["rates"].items()}
        rows.append([name, f"{best['backend']} x{best.get('workers', '?')}",
                     median["auto"], median[r["best"]], median[r["worst"]] if r["worst"] else "-",
                     f"{statistics.median(r['to_best']):.3f} ({low:.3f}-{high:.3f})",
                     f"{statistics.median(r['to_worst']):.2f}" if r["to_worst"] else "-",
                     ", ".join(f"{backend} {n}" for backend, n in sorted(r["ran_as"].items()))])
        if with_base:
            rows[-1][6:6] = [_median_and_quartiles(r["base_to_best"]), _median_and_quartiles(r["to_base"])]
    head = ["workload", "best hand", "auto samples/s", "best", "worst", "auto / best (quartiles)"]
    head += ["base / best (quartiles)", "auto / base (quartiles)"] if with_base else []
    return markdown_table(head + ["auto / worst", "auto ran as"], rows, "llrrrr" + "rr" * with_base + "rl")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.autotune", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=WORKLOADS, help="repeatable; default: all")
    parser.add_argument("--rounds", type=int, default=8, help="rounds (each setting once per round, shuffled order)")
    parser.add_argument("--quick", action="store_true", help="small data, one round: a smoke test, not a measurement")
    parser.add_argument("--workers", type=int, help="the hand settings' workers (default: the suite's, 2)")
    parser.add_argument("--samples", type=int, default=0, help="tile each workload to this many rows")
    parser.add_argument("--settings", default=",".join(SETTINGS),
                        help="which of auto,best,worst to run (auto and one hand setting at least)")
    parser.add_argument("--base", metavar="SRC", help="the src folder of another feedline checkout: its automatic "
                        "choice runs in the same rounds too (before and after a change)")
    args = parser.parse_args(argv)
    rounds = 1 if args.quick else args.rounds
    run = tuple(s for s in SETTINGS if s in args.settings.split(","))
    compile_sources(args.base)
    results = {name: measure(name, rounds, args.quick, args.workers, args.samples, run, base=args.base)
               for name in args.workload or WORKLOADS}
    print()
    print(table(results))


if __name__ == "__main__":
    main()
