"""The automatic choice's checks on a big machine (16+ cores), in one command that fits one device call (issue 15).

A 2-core VM cannot show what the automatic choice does where sixteen
threads, a fork server's imports and four scouts share a machine, and a
session lent a 16-core host has ~15 minutes of it. This runs the checks
that host is for, the most needed first, each in its own subprocess with
what is left of ``--budget`` (a step that would start with under
``MIN_STEP`` seconds left is skipped and says so), and writes each step's
whole output to ``--out`` as it comes (a step cut by the budget keeps the
rounds it finished):

1. ``seg``: paired first runs, auto / threads and processes by hand
   (0.915 of threads by hand at 70623f4: the scouts were widened only after
   the fork server's imports);
2. story 2 (PNG and decoded), epochs x2: auto, threads, processes, with
   task spans (decoded: 0.45 of sixteen threads by hand at 70623f4);
3. story 1, epochs x4: auto and processes, with task spans (0.67-0.94);
4. ``gil`` and then ``jpeg`` and ``audio``: paired, auto and the best hand
   setting (0.98, 1.07, 1.03 at 70623f4: a regression check).

Thread-pool variables (``OMP_NUM_THREADS`` and the rest) are set to 1 for
every child, as the peer suite does; ``KERAS_BACKEND`` defaults to numpy.

Run (from the repository root, with NumPy, Pillow, OpenCV, SciPy and
feedline importable; keras, soundfile and simplejpeg too for every step):

    python -m benchmarks.big_machine --out /tmp/big --budget 480
    python -m benchmarks.big_machine --out /tmp/big --quick   # smoke test: tiny data, one round each

On the lent hosts (no internet, Python 3.12), bring the packages the image
lacks as wheels in an ignored folder of the checkout (``pip download
--no-deps --only-binary=:all: --python-version 3.12 --platform
manylinux2014_x86_64 -d .whl keras namex optree soundfile cffi pycparser
simplejpeg``: without ``--no-deps`` an older NumPy comes along and shadows
the host's), carry it, and start the command with ``pip install -q
--no-deps --no-index --target /tmp/site .whl/*.whl &&
PYTHONPATH=/tmp/site:$PWD/src:$PWD``. The first call there
(~500 s of commands) cost ~530 s of device time.

Last run: benchmarks/RESULTS.md ("16 cores") and the 16-core runs in benchmarks/history/.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_STEP = 45  # seconds: a step left less than this would not finish one round of its slowest setting
POOL_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def steps(workers: int, out: str, quick: bool) -> list[tuple[str, list[str]]]:
    """(name, argv after ``python -m``) for each check, the most needed first."""
    w = ["--workers", str(workers)]
    if quick:
        return [("seg", ["benchmarks.autotune", "--workload", "seg", "--quick", *w, "--settings", "auto,best"]),
                ("story2", ["benchmarks.stories", "--quick", "--only", "story2", "--settings", "auto,thread,process",
                            "--spans", os.path.join(out, "spans_story2.jsonl")])]
    return [
        ("seg", ["benchmarks.autotune", "--workload", "seg", "--samples", "1536", *w, "--rounds", "4"]),
        ("story2", ["benchmarks.stories", "--only", "story2", "--scale", "2", "--reps", "2",
                    "--settings", "auto,thread,process", "--spans", os.path.join(out, "spans_story2.jsonl")]),
        ("story1", ["benchmarks.stories", "--only", "story1", "--scale", "4", "--reps", "2",
                    "--settings", "auto,process", "--spans", os.path.join(out, "spans_story1.jsonl")]),
        ("gil", ["benchmarks.autotune", "--workload", "gil", "--samples", "8192", *w, "--settings", "auto,best",
                 "--rounds", "3"]),
        ("jpeg", ["benchmarks.autotune", "--workload", "jpeg", "--samples", "8192", *w, "--settings", "auto,best",
                  "--rounds", "2"]),
        ("audio", ["benchmarks.autotune", "--workload", "audio", "--samples", "65536", *w, "--settings", "auto,best",
                   "--rounds", "2"]),
    ]


def machine() -> str:
    import numpy

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{os.cpu_count()} CPUs ({usable} usable), {platform.platform()}, Python {platform.python_version()}, "
            f"NumPy {numpy.__version__}, load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def run_step(name: str, argv: list[str], env: dict, out: str, seconds: float) -> str:
    """Run one step, its output streamed to ``out/name.log``; its last table (or why it stopped)."""
    path = os.path.join(out, f"{name}.log")
    started = time.monotonic()
    with open(path, "w") as log:
        log.write(f"$ python -m {' '.join(argv)}\n")
        log.flush()
        child = subprocess.Popen([sys.executable, "-m", *argv], cwd=ROOT, env=env, stdout=log,
                                 stderr=subprocess.STDOUT, text=True)
        try:
            code = child.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = None
    with open(path) as log:
        text = log.read()
    table = [line for line in text.splitlines() if line.startswith("|")]
    rounds = [line for line in text.splitlines() if " round " in line or " rep " in line]
    took = time.monotonic() - started
    if code is None:
        return f"stopped by the budget after {took:.0f} s; rounds finished:\n" + "\n".join(rounds[-12:])
    if code != 0:
        return f"failed (exit {code}) after {took:.0f} s:\n" + "\n".join(text.splitlines()[-15:])
    return f"{took:.0f} s\n" + "\n".join(table)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.big_machine", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for each step's log, the stories' spans and summary.md")
    parser.add_argument("--budget", type=float, default=480.0, help="seconds for all the steps together (default 480)")
    parser.add_argument("--workers", type=int, default=None, help="the hand settings' workers (default: the CPUs)")
    parser.add_argument("--only", action="append", help="run only these steps (seg, story2, story1, gil, jpeg, audio)")
    parser.add_argument("--quick", action="store_true", help="tiny data, one round: a smoke test, not a measurement")
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    workers = args.workers or os.cpu_count() or 1
    env = {**os.environ, **{v: "1" for v in POOL_VARS}, "KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "numpy"),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    deadline = time.monotonic() + args.budget
    summary = [f"# benchmarks.big_machine, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "", machine(), ""]
    print(summary[2], flush=True)
    for name, step in steps(workers, args.out, args.quick):
        if args.only and name not in args.only:
            continue
        left = deadline - time.monotonic()
        if left < MIN_STEP and not args.quick:
            result = f"skipped: {left:.0f} s of the budget left"
        else:
            result = run_step(name, step, env, args.out, max(left, MIN_STEP))
        block = [f"## {name}: python -m {' '.join(step)}", "", result, ""]
        print("\n".join(block), flush=True)
        summary += block
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write("\n".join(summary) + "\n")


if __name__ == "__main__":
    main()
