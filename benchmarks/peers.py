"""The automatic choice against every peer loader, paired by round (issue 15: "the automatic row is ahead of every peer row").

The suite (``python -m benchmarks run``) reports medians of three runs per
loader; on a shared 2-core VM one disturbed run moves a median by 20-40 %
(jpeg's automatic row read 313-650 samples/s in one suite run), so a
verdict between two rows with close medians is noise. Here the same
loaders run in the same process the same way (`runner.run_suite`: loaders
built inside the clock, imports ahead of it, an untimed checked warm-up,
a quiet machine awaited and a disturbed run redone), but many rounds of
only the rows in question, each round in a seeded shuffled order, and the
verdict is the median of each round's own ratio ``feedline-auto / peer``:
drift between rounds lands on both sides of a ratio instead of one row.

Reported per workload and peer: the median ratio with its interquartile
range, and in how many rounds the automatic row ran faster. The default
peers are the generic ones (every loader runs the workload's one
per-sample function: the same code, only the machinery differs), with the
hand setting of ``map()`` beside them for scale.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.peers                              # jpeg, seg, gil, audio, store; 8 rounds (~15 min, 2 cores)
    python -m benchmarks.peers --workload jpeg --rounds 12 --peer tf-data --peer torch-fork
    python -m benchmarks.peers --quick                      # smoke test: small data, 2 rounds

Target (issue 15): every ratio's median > 1.
Last run: benchmarks/history/2026-11-29-thirty-sixth-session-the-automatic-row-against.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

from . import runner
from .autotune import quartiles
from .tables import markdown_table

WORKLOADS = ("jpeg", "seg", "gil", "audio", "store")
AUTO = "feedline-auto"
# The generic peers: the workload's one function in another loader's machinery. Spawn workers and Grain's
# mp_prefetch (2-3 s of start-up for a ~1 s epoch) are left out by default: every suite run puts them far behind.
PEERS = ("feedline-hand", "torch-fork", "keras-thread", "keras-process", "tf-data", "spdl-thread", "spdl-process")


def paired_ratios(auto_rates: list[float], peer_rates: list[float]) -> list[float]:
    """Each round's ``auto / peer``, round by round: a loader that fails is not run again, so its rates are a prefix of
    the rounds and only the rounds both ran are paired."""
    return [a / p for a, p in zip(auto_rates, peer_rates, strict=False) if p > 0]


def verdicts(results: dict, peers: tuple[str, ...]) -> list[dict]:
    """One row per workload and peer: the median paired ratio, its quartiles, the rounds won and the medians."""
    rows = []
    for wname, r in results.items():
        s = r["summaries"]
        auto = s.get(AUTO)
        if auto is None or not auto.runs:
            continue
        auto_rates = [m.samples_per_s for m in auto.runs]
        for name in peers:
            peer = s.get(name)
            if peer is None or not peer.runs:
                continue
            ratios = paired_ratios(auto_rates, [m.samples_per_s for m in peer.runs])
            lo, hi = quartiles(ratios)
            rows.append({"workload": wname, "peer": name, "ratio": statistics.median(ratios), "q1": lo, "q3": hi,
                         "won": sum(x > 1 for x in ratios), "rounds": len(ratios),
                         "auto": statistics.median(auto_rates),
                         "peer_rate": statistics.median(m.samples_per_s for m in peer.runs),
                         "ran_as": auto.detail})
    return rows


def table(rows: list[dict]) -> str:
    """The verdicts as a Markdown table."""
    header = ["workload", "peer", "auto / peer (median of rounds)", "quartiles", "auto faster in",
              "auto samples/s", "peer samples/s", "auto ran as"]
    body = [[r["workload"], r["peer"], f"{r['ratio']:.3f}", f"{r['q1']:.2f}-{r['q3']:.2f}",
             f"{r['won']}/{r['rounds']}", f"{r['auto']:,.0f}", f"{r['peer_rate']:,.0f}", r["ran_as"]] for r in rows]
    return markdown_table(header, body)


def main(argv=None) -> int:
    from .loaders import LOADERS

    p = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__.splitlines()[0])
    p.add_argument("--workload", action="append", choices=WORKLOADS, help="repeatable; default: all five")
    p.add_argument("--peer", action="append", choices=[n for n in LOADERS if n not in (AUTO, "serial-loop")],
                   help=f"repeatable; default: {', '.join(PEERS)}")
    p.add_argument("--rounds", type=int, default=None, help="timed rounds (default 8; quick: 2)")
    p.add_argument("--quick", action="store_true", help="small data, 2 rounds, no waiting: a smoke test")
    p.add_argument("--max-wait", type=float, default=None,
                   help="seconds to wait for a quiet machine before each run (default 10; quick: 0)")
    args = p.parse_args(argv)
    peers = tuple(args.peer or PEERS)
    rounds = args.rounds if args.rounds is not None else (2 if args.quick else 8)
    if rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 10.0)
    start = time.perf_counter()
    results = runner.run_suite(list(args.workload or WORKLOADS), [AUTO, *peers], quick=args.quick, reps=rounds,
                               warmup=True, max_wait=max_wait, retries=0 if args.quick else 1)
    rows = verdicts(results, peers)
    print()
    print(f"Command: python -m benchmarks.peers {' '.join(argv) if argv else ''}".rstrip())
    print(f"{rounds} rounds per workload, {time.perf_counter() - start:.0f} s in all")
    print()
    print(table(rows))
    behind = [f"{r['workload']}/{r['peer']} {r['ratio']:.2f}" for r in rows
              if r["ratio"] <= 1 and r["peer"] != "feedline-hand"]
    print()
    print("automatic row ahead of every peer:", "yes" if not behind else "no: " + ", ".join(behind))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
