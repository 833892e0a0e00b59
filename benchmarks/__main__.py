"""Command line: ``python -m benchmarks run [--workload W] [--loader L] [--quick]``.

See the package docstring (``benchmarks/__init__.py``) for what it measures
and where the last results are.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def _parser() -> argparse.ArgumentParser:
    from .loaders import LOADERS, NATIVE_NOTES
    from .workloads import WORKLOADS

    p = argparse.ArgumentParser(prog="python -m benchmarks", description="feedline benchmarks")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run workloads through loaders and write RESULTS.md and results.png")
    run.add_argument("--workload", action="append", choices=list(WORKLOADS), help="repeatable; default: all")
    run.add_argument("--loader", action="append", choices=list(LOADERS) + list(NATIVE_NOTES),
                     help="repeatable; default: all (serial-loop, the reference, is always added)")
    run.add_argument("--quick", action="store_true",
                     help="small data, 1 checked repetition, no waiting: a smoke test, not a measurement")
    run.add_argument("--reps", type=int, default=None, help="timed repetitions per loader (default 3; quick: 1)")
    run.add_argument("--output", default=None,
                     help="where to write the Markdown report (default: benchmarks/RESULTS.md for a full run "
                          "of every workload and loader, a temporary file otherwise); the chart goes beside it")
    run.add_argument("--max-wait", type=float, default=None,
                     help="seconds to wait for other processes to leave the machine quiet before each run "
                          "(default 60; quick: 0, no waiting)")
    run.add_argument("--retries", type=int, default=None,
                     help="redo a run during which other processes used over 10 %% of the cores up to this many "
                          "times, keeping the cleanest (default 2; quick: 0)")
    run.add_argument("--json", default=None, help="also write the raw numbers as JSON here")
    sub.add_parser("list", help="list workloads and loaders")
    return p


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    from . import report, runner
    from .loaders import LOADERS, NATIVE_NOTES, NOTES
    from .workloads import WORKLOADS

    if args.command == "list":
        print("workloads:", ", ".join(WORKLOADS))
        for name, note in {**NOTES, **NATIVE_NOTES}.items():
            print(f"  {name:17s} {note}")
        return 0

    workloads = args.workload or list(WORKLOADS)
    loaders = args.loader or list(LOADERS) + list(NATIVE_NOTES)
    if "serial-loop" not in loaders:
        loaders = ["serial-loop"] + loaders
    reps = args.reps if args.reps is not None else (1 if args.quick else 3)
    if reps < 1:
        raise SystemExit("--reps must be >= 1")
    complete = set(workloads) == set(WORKLOADS) and set(loaders) == set(LOADERS) | set(NATIVE_NOTES)
    output = args.output
    if output is None:
        if complete and not args.quick:
            output = os.path.join(HERE, "RESULTS.md")
        else:
            output = os.path.join(tempfile.gettempdir(), "feedline-bench-RESULTS.md")
    stem = os.path.splitext(os.path.basename(output))[0].replace("RESULTS", "results")
    chart = os.path.join(os.path.dirname(os.path.abspath(output)), stem + ".png")  # RESULTS.md -> results.png
    command = "python -m benchmarks " + shlex.join(argv)
    if os.environ.get("PYTHONPATH"):  # e.g. a pinned snapshot of feedline: part of the exact command
        command = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} {command}"

    start = time.perf_counter()
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 60.0)
    results = runner.run_suite(workloads, loaders, quick=args.quick, reps=reps, warmup=not args.quick,
                               max_wait=max_wait,
                               retries=args.retries if args.retries is not None else (0 if args.quick else runner.RETRIES))
    seconds = time.perf_counter() - start
    text = report.render(results, command, reps, args.quick, seconds, report.machine(), os.path.basename(chart))
    merged = text
    if os.path.exists(output):
        with open(output) as f:
            merged = report.merge(f.read(), text)  # keep the sections other scripts wrote
    with open(output, "w") as f:
        f.write(merged)
    report.chart(results, chart, quick=args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runner.as_json(results), f, indent=1, default=str)
    print()
    print(text)
    print(f"written to {output} and {chart}")
    # feedline failing a check fails the command; a peer failing one is reported in the table
    failed = [t for t, _, met in report.targets(results) if "exactly once" in t and ": feedline" in t and met is False]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
