"""The ``feedline`` command line.

``feedline demo`` is the main job on an embedded default: it makes a small
image dataset, runs the same augmentation pipeline as a plain loop and
with feedline, and prints the speed-up and the epoch's stage profile (the
workload lives in `feedline._demo`).
``feedline bench TARGET`` profiles a pipeline of yours. ``feedline convert
SRC DST`` and ``feedline inspect STORE`` are defined in `feedline.store._cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from ._progress import Progress

__all__ = ["main"]


def demo(args) -> int:
    from ._demo import run

    return run(samples=args.samples, size=args.size, batch=args.batch, workers=args.workers, data=args.data)


def _load_target(target: str):
    """``module:attr`` or ``path/to/file.py:attr`` -> a pipeline (or a function returning one)."""
    import importlib
    import importlib.util

    if ":" not in target:
        raise SystemExit(f"feedline bench: TARGET must look like module:attr or path/to/file.py:attr, got {target!r}")
    where, attr = target.rsplit(":", 1)
    if where.endswith(".py") or os.path.sep in where:
        if not os.path.isfile(where):
            raise SystemExit(f"feedline bench: no file {where!r}")
        spec = importlib.util.spec_from_file_location("feedline_bench_target", where)
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:  # as `python -m` does: modules of the current directory import
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise SystemExit(f"feedline bench: cannot import {where!r}: {e}") from e
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise SystemExit(f"feedline bench: {where!r} has no attribute {attr!r}") from None
    import feedline as fl

    if not isinstance(obj, fl.Pipeline) and callable(obj):
        obj = obj()
    if not isinstance(obj, fl.Pipeline):
        raise SystemExit(f"feedline bench: {target} is a {type(obj).__name__}, not a feedline pipeline (or a function returning one)")
    return obj


def bench(args) -> int:
    import json

    pipe = _load_target(args.target)
    try:
        total = len(pipe)
    except TypeError:
        total = None
    if args.batches is not None:
        total = min(total, args.batches) if total else args.batches
    print(pipe)
    with pipe:
        stats = None
        done = 0
        deadline = time.perf_counter() + args.seconds if args.seconds else None
        progress = Progress(total, "feedline bench")
        try:
            while True:
                it = iter(pipe)
                for _ in it:
                    done += 1
                    progress.update(done, it.stats().samples)
                    if (total is not None and done >= total) or (deadline and time.perf_counter() > deadline):
                        break
                else:
                    if deadline and time.perf_counter() < deadline:
                        continue  # a short epoch: run another until the time is up
                stats = it.stats()
                break
        finally:
            progress.close()
    if args.trace:
        stats.save_trace(args.trace)
    if args.plot:
        stats.save_plot(args.plot)
    if args.json:
        print(json.dumps(stats.as_dict(), default=str, indent=2))
    else:
        print(stats)
        if args.trace:
            print(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="feedline", description="Keep accelerators fed: a parallel, deterministic input pipeline.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("demo", help="run an augmentation pipeline the naive way and the feedline way, and compare")
    run.add_argument("--samples", type=int, default=600, help="number of images (default 600)")
    run.add_argument("--size", type=int, default=64, help="image side in pixels (default 64)")
    run.add_argument("--batch", type=int, default=32, help="batch size (default 32)")
    run.add_argument("--workers", type=int, default=None, help="worker count (default: one per core)")
    run.add_argument("--data", default=None, help="folder for the generated images (default: a temp folder)")
    run.set_defaults(handler=demo)
    run = commands.add_parser(
        "bench",
        help="time a pipeline of yours and report where the time goes",
        description="Runs a pipeline (module:attr or path/to/file.py:attr: a pipeline, or a function with no "
        "arguments returning one) and prints throughput, the stage profile, the verdict and advice.",
    )
    run.add_argument("target", help="module:attr or path/to/file.py:attr")
    run.add_argument("--batches", type=int, default=None, help="stop after this many batches (default: one epoch)")
    run.add_argument("--seconds", type=float, default=None, help="stop after this many seconds (epochs repeat)")
    run.add_argument("--trace", default=None, help="write a Chrome trace-event JSON file (Perfetto, chrome://tracing)")
    run.add_argument("--plot", default=None, help="write a PNG of throughput and stall over time (needs matplotlib)")
    run.add_argument("--json", action="store_true", help="print the report as JSON")
    run.set_defaults(handler=bench)
    from .store._cli import add_commands as add_store_commands

    add_store_commands(commands)  # feedline convert, feedline inspect (feedline/store/_cli.py)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's convention (128 + SIGINT), not a traceback
        print(f"feedline {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
