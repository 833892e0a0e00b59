"""Command line: ``python -m benchmarks run [--workload W] [--loader L] [--quick]``.

See the package docstring (``benchmarks/__init__.py``) for what it measures
and the last results.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

# Before NumPy or torch load (they are imported inside main()): one BLAS/OpenMP
# thread per process, for the whole process tree (see report.ENV_VARS).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

HERE = os.path.dirname(os.path.abspath(__file__))


def _parser() -> argparse.ArgumentParser:
    from .loaders import LOADERS
    from .workloads import WORKLOADS

    p = argparse.ArgumentParser(prog="python -m benchmarks", description="feedline benchmarks")
    sub = p.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run workloads through loaders and write RESULTS.md")
    run.add_argument("--workload", action="append", choices=list(WORKLOADS), help="repeatable; default: all")
    run.add_argument("--loader", action="append", choices=list(LOADERS),
                     help="repeatable; default: all (serial-loop, the reference, is always added)")
    run.add_argument("--quick", action="store_true",
                     help="small data, 1 repetition: a smoke test (under a minute), not a measurement")
    run.add_argument("--reps", type=int, default=None, help="timed repetitions per loader (default 5; quick: 1)")
    run.add_argument("--output", default=None,
                     help="where to write the Markdown report (default: benchmarks/RESULTS.md for a full run "
                          "of every workload and loader, a temporary file otherwise)")
    run.add_argument("--max-wait", type=float, default=None,
                     help="seconds to wait for other processes to leave the machine quiet before each run "
                          "(default 120; quick: 0, no waiting)")
    run.add_argument("--json", default=None, help="also write the raw numbers as JSON here")
    sub.add_parser("list", help="list workloads and loaders")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    from . import report, runner
    from .loaders import LOADERS, NOTES
    from .workloads import WORKLOADS

    if args.command == "list":
        print("workloads:", ", ".join(WORKLOADS))
        for name in LOADERS:
            print(f"  {name:17s} {NOTES.get(name, '')}")
        return 0

    workloads = args.workload or list(WORKLOADS)
    loaders = args.loader or list(LOADERS)
    if "serial-loop" not in loaders:
        loaders = ["serial-loop"] + loaders
    reps = args.reps if args.reps is not None else (1 if args.quick else 5)
    if reps < 1:
        raise SystemExit("--reps must be >= 1")
    complete = set(workloads) == set(WORKLOADS) and set(loaders) == set(LOADERS)
    output = args.output
    if output is None:
        if complete and not args.quick and args.reps is None:
            output = os.path.join(HERE, "RESULTS.md")
        else:
            output = os.path.join(tempfile.gettempdir(), "feedline-bench-RESULTS.md")
    command = "python -m benchmarks " + shlex.join(argv if argv is not None else sys.argv[1:])
    if os.environ.get("PYTHONPATH"):  # e.g. a pinned snapshot of feedline: part of the exact command
        command = f"PYTHONPATH={shlex.quote(os.environ['PYTHONPATH'])} {command}"

    start = time.perf_counter()
    max_wait = args.max_wait if args.max_wait is not None else (0.0 if args.quick else 120.0)
    results = runner.run_suite(workloads, loaders, quick=args.quick, reps=reps, warmup=True,
                               max_wait=max_wait, retries=0 if args.quick else runner.RETRIES)
    seconds = time.perf_counter() - start
    text = report.render(results, command, reps, args.quick, seconds, report.machine())
    merged = text
    if os.path.exists(output):
        with open(output) as f:
            merged = report.merge(f.read(), text)  # keep sections other scripts appended
    with open(output, "w") as f:
        f.write(merged)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runner.as_json(results), f, indent=1, default=str)
    print()
    print(text)
    print(f"written to {output}")
    failed = [t for t, _, met in report.targets(results) if "exactly once" in t and not met]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
