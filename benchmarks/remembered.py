"""The automatic choice's first run against runs that start on a remembered verdict, and the hand setting (issue 15).

Run (from the repository root, in the project's virtualenv with the peers' packages):

    python -m benchmarks.remembered                    # jpeg, audio, gil, seg; 8 rounds (~3 minutes on 2 cores)
    python -m benchmarks.remembered --workload audio --rounds 12
    python -m benchmarks.remembered --quick            # smoke test

One interpreter, the fork server started first (as in a training script
that built its model after describing the pipeline, or after any earlier
process pipeline), then per round one epoch with start-up of each setting
in a seeded shuffled order: ``hand`` (the suite's best hand setting of ``map()``),
``auto`` (``map(fn)``, nothing remembered: every run a first run) and
``remembered`` (``map(fn)`` with a file of verdicts of its own: the first
`feedline.engine.choice.DEFAULT_POLICY.remember.agree` rounds are its agreeing trials and are
left out of its median). In one process the rows share one memory state,
which the peer suite's rows do not (there the JPEG rows split into runs that
faulted in fresh memory and runs that did not, 0.8k against 1.05k samples/s).

Last run (2026-11-27 10:30 UTC, 2-core VM, 8 rounds, commit 8af61da), samples/s medians:

    workload   hand    auto   remembered   auto/hand   remembered/hand
    jpeg      1,028   1,023      1,033        1.00           1.00
    audio     7,655   7,134      7,631        0.93           1.00
    gil         541     524        534        0.97           0.99
    seg          89      89         89        1.00           1.00

(Audio's first run loses its 7 % to the process workers' start beside threads that keep 1.5-1.7 of 2
cores busy: benchmarks/history/2026-11-27-twenty-second-session-imports-in-the-first.md.)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time

from .loaders import remembering_in
from .tables import markdown_table
from .workloads import build

SETTINGS = ("hand", "auto", "remembered")


def epoch(w, settings: dict, memory: str) -> tuple[float, str]:
    """Samples/s of one epoch with start-up, and the decision, with ``FEEDLINE_REMEMBER=memory``."""
    import feedline as fl

    with remembering_in(memory):
        start = time.perf_counter()
        pipe = fl.from_arrays(w.data, w.index).map(w.fn, **settings).batch(w.batch_size)
        with pipe:
            rows = sum(len(b[0]) for b in pipe)
            decision = pipe.stats().decision
        return rows / (time.perf_counter() - start), decision


def main(argv=None) -> None:
    from feedline.backends import warm_up
    from feedline.engine.choice import DEFAULT_POLICY

    agree = DEFAULT_POLICY.remember.agree  # the agreeing trials' rounds

    parser = argparse.ArgumentParser(prog="python -m benchmarks.remembered", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=("jpeg", "audio", "gil", "seg"))
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="small data, agree + 1 rounds: a smoke test (epochs this short "
                        "may end before a trial decides, so the remembered row may start on nothing)")
    args = parser.parse_args(argv)
    rounds = agree + 1 if args.quick else max(args.rounds, agree + 1)
    warm_up("process")
    time.sleep(1.0)
    rows = []
    for name in args.workload or ["jpeg", "audio", "gil", "seg"]:
        w = build(name, quick=args.quick)
        folder = tempfile.mkdtemp(prefix="feedline-remembered-")
        memory = os.path.join(folder, "choices.json")
        rates = {s: [] for s in SETTINGS}
        decision = ""
        try:
            for r in range(rounds):
                for setting in random.Random(r).sample(SETTINGS, len(SETTINGS)):
                    rate, why = epoch(w, dict(w.hand or {}) if setting == "hand" else {},
                                      memory if setting == "remembered" else "0")
                    if setting != "remembered" or r >= agree:
                        rates[setting].append(rate)
                    if setting == "remembered" and r == rounds - 1:
                        decision = why
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        medians = {s: statistics.median(v) for s, v in rates.items()}
        rows.append([name, *(f"{medians[s]:,.0f}" for s in SETTINGS), f"{medians['auto'] / medians['hand']:.2f}",
                     f"{medians['remembered'] / medians['hand']:.2f}"])
        print(f"  {name}: remembered row's last decision: {decision}", flush=True)
    print(f"\nsamples/s, one epoch with start-up, medians of {rounds} rounds ({rounds - agree} for remembered); "
          f"{os.cpu_count()} CPUs\n")
    print(markdown_table(["workload", *SETTINGS, "auto / hand", "remembered / hand"], rows, "lrrrrr"))


if __name__ == "__main__":
    main()
