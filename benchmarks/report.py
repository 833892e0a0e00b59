"""RESULTS.md: the tables, the targets, the machine and the command."""

from __future__ import annotations

import datetime
import multiprocessing
import os
import platform
import subprocess
import sys

from .loaders import NOTES
from .runner import cores

__all__ = ["ENV_VARS", "machine", "merge", "render", "targets"]

# Thread-pool sizes fixed for the whole process tree before NumPy or torch
# load (see __main__): one BLAS/OpenMP thread per process, so neither torch
# in the parent nor any worker oversubscribes the 2 cores. DataLoader
# workers set torch's own thread count to 1 themselves; feedline's process
# workers default these variables to 1 as well.
ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _feedline_source(feedline_file: str) -> str:
    """Which feedline code ran: this checkout's commit (and whether src/ differed), or another path."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    package = os.path.dirname(os.path.abspath(feedline_file))
    if not package.startswith(os.path.join(root, "src") + os.sep):
        return f"imported from {package} (not this checkout's src/)"
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "this checkout (commit unknown)"
    if not head:
        return "this checkout (commit unknown)"
    return f"this checkout at commit {head}" + (", with uncommitted changes in src/" if dirty else "")


def machine() -> dict:
    import numpy
    import torch

    import feedline

    return {
        "cores": cores(),
        "cpu": _cpu_model(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "torch": torch.__version__,
        "torch threads": torch.get_num_threads(),
        "feedline": f"{feedline.__version__}, {_feedline_source(feedline.__file__)}",
        "default start method": multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method(),
        "env": ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in ENV_VARS),
    }


def _ratio(a, b):
    return a / b if b else float("nan")


def _n(value, spec=",.0f") -> str:
    """A number for a table cell; '-' when it was not measured (NaN)."""
    return "-" if value != value else format(value, spec)


def targets(results) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met) for each target of issue 2."""
    out = []
    n = cores()
    gil = results.get("gil")
    if gil:
        s = gil["summaries"]
        serial, proc = s.get("serial-loop"), s.get("feedline-process")
        if serial and proc and serial.runs and proc.runs:
            r, r_steady = _ratio(proc.sps, serial.sps), _ratio(proc.steady, serial.steady)
            out.append((
                f"gil: feedline process (2 workers) >= 1.8x serial loop (0.90 of the {n}-core ideal)",
                f"{r:.2f}x ({r / n:.2f} of ideal) start-up included; {_n(r_steady, '.2f')}x ({_n(r_steady / n, '.2f')}) steady state",
                r >= 1.8,
            ))
            for dl in ("torch-fork", "torch-spawn"):
                t = s.get(dl)
                if t and t.runs:
                    rr = _ratio(proc.sps, t.sps)
                    out.append((
                        f"gil: feedline process not slower than DataLoader ({dl.split('-')[1]})",
                        f"{proc.sps:.0f} vs {t.sps:.0f} samples/s ({rr:.2f}x); steady {_n(_ratio(proc.steady, t.steady), '.2f')}x",
                        rr >= 1.0,
                    ))
    tiny = results.get("tiny")
    if tiny:
        s = tiny["summaries"]
        auto = s.get("feedline-auto")
        for dl in ("torch-fork", "torch-spawn"):
            t = s.get(dl)
            if auto and t and auto.runs and t.runs:
                rr = _ratio(auto.sps, t.sps)
                out.append((
                    f"tiny: feedline >= 3x DataLoader ({dl.split('-')[1]}) samples/s",
                    f"feedline auto {auto.sps:,.0f} vs {t.sps:,.0f} samples/s ({rr:.1f}x)",
                    rr >= 3.0,
                ))
    for wname, r in results.items():
        s = r["summaries"]
        proc, spawn = s.get("feedline-process"), s.get("torch-spawn")
        if proc and proc.runs:
            beside = f"; DataLoader spawn {spawn.first:.2f} s" if spawn and spawn.runs else ""
            out.append((
                f"{wname}: first batch with the process backend < 1.5 s",
                f"{proc.first:.2f} s (max {proc.first_span[1]:.2f}){beside}",
                proc.first_span[1] < 1.5,
            ))
    for wname, r in results.items():
        for name, s in r["summaries"].items():
            if s.runs or s.error:
                ok = s.exactly_once and not s.problems
                if not ok:
                    out.append((f"{wname}: {name} delivers every sample exactly once, clean close", "; ".join(s.problems) or s.error, False))
    return out


def _table(r, n_cores: int) -> list[str]:
    s = r["summaries"]
    serial = s.get("serial-loop")
    base = serial.sps if serial and serial.runs else None
    base_steady = serial.steady if serial and serial.runs else None
    lines = [
        "| loader | ran as | samples/s median (min-max) | x serial | of ideal | steady samples/s | steady of ideal | first batch s median (min-max) | close s | CPU | foreign load (max) | I/O stall s (max) | exactly once |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name, x in s.items():
        if not x.runs:
            lines.append(f"| {name} | | failed: {x.error} | | | | | | | | | | no |")
            continue
        lo, hi = x.sps_span
        flo, fhi = x.first_span
        ratio = _n(x.sps / base, ".2f") if base else ""
        ideal = _n(x.sps / (n_cores * base), ".2f") if base else ""
        steady_ideal = _n(x.steady / (n_cores * base_steady), ".2f") if base_steady else ""
        once = "yes" if x.exactly_once and not x.problems else "NO"
        lines.append(
            f"| {name} | {x.detail} | {x.sps:,.0f} ({lo:,.0f}-{hi:,.0f}) | {ratio} | {ideal} | {_n(x.steady)} | {steady_ideal} "
            f"| {x.first:.3f} ({flo:.3f}-{fhi:.3f}) | {x.close:.3f} | {x.cpu:.0%} | {x.foreign:.0%} ({x.foreign_max:.0%}) | {x.io_wait_max:.2f} | {once} |"
        )
    return lines


def render(results, command: str, reps: int, quick: bool, seconds: float, info: dict) -> str:
    n_cores = info["cores"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        "# feedline benchmark results",
        "",
        f"Command (from the repository root): `{command}`",
        "",
        f"Date: {date}. Mode: {'quick (smoke test; numbers are indicative only)' if quick else 'full'}; "
        f"{reps} timed repetitions per loader after one untimed, checked warm-up; loaders alternate "
        f"(order rotated each round). Total run time {seconds:.0f} s.",
        "",
        "## Machine",
        "",
    ]
    out += [f"- {k}: {v}" for k, v in info.items()]
    out += [
        "",
        "Thread-pool variables are set to 1 for the whole process tree before NumPy or torch load, so",
        "no process oversubscribes the cores (DataLoader workers also set torch's threads to 1 themselves,",
        "and feedline's process workers default the same variables to 1).",
        "",
        "## How to read the tables",
        "",
        "- Each run builds the loader, iterates one epoch, and closes it; the clock starts before the loader",
        "  is built, so start-up (worker processes, imports, shipping the data) is inside `samples/s` and",
        "  `first batch`.",
        "- `samples/s`: samples of the epoch / seconds from the start to the last batch. Median over the",
        "  repetitions, min-max in brackets.",
        f"- `x serial`: ratio to the serial loop; `of ideal`: samples/s / ({n_cores} x serial-loop samples/s).",
        "- `steady`: samples/s over the second half of the epoch's batches (start-up excluded); `steady of ideal`",
        "  uses the serial loop's steady rate.",
        "- `close`: seconds to release the loader after the last batch (not in samples/s).",
        "- `CPU`: CPU time of the process and its workers / (wall time x cores), over build + epoch + close.",
        "- `foreign load`: CPU used by processes outside the benchmark's tree during the run (from /proc/stat),",
        "  as a share of all cores; median and max over the kept runs. Before each run the runner waits for the",
        "  machine to be quiet, and redoes a run during which this exceeded 10 % (up to 3 times, keeping the cleanest).",
        "- `I/O stall`: the largest, over the kept runs, of the seconds during which some task on the machine waited",
        "  for the disk (Linux PSI, /proc/pressure/io); a slow start with low CPU and a large I/O stall was waiting",
        "  for the disk (e.g. reading modules evicted from the page cache), not for the loader.",
        "- `exactly once`: every run delivered each sample index exactly once (the index travels inside the",
        "  sample), the warm-up's batches equal the reference output, and no shared-memory segment or child",
        "  process was left after close.",
        "",
    ]
    for wname, r in results.items():
        w = r["workload"]
        out += [f"## {wname}", "", w.description + "."]
        if r["per_sample"] is not None:
            serial = r["summaries"].get("serial-loop")
            loop = f"; the serial loop's median rate is {1e3 / serial.sps:.2f} ms a sample, stacking included" if serial and serial.runs else ""
            out.append(f"Per-sample function alone: {r['per_sample'] * 1e3:.2f} ms (lowest of 3 medians of 20 calls, in the parent){loop}.")
        out.append("")
        out += _table(r, n_cores)
        out.append("")
        auto = r["summaries"].get("feedline-auto")
        if auto and auto.why:
            out += [f"feedline-auto ran as {auto.detail}: \"{auto.why}\".", ""]
        problems = [f"- {name}: {p}" for name, s in r["summaries"].items() for p in s.problems]
        if problems:
            out += ["Problems found by the checks:", ""] + problems + [""]
    out += ["## Loaders", ""]
    out += [f"- `{name}`: {note}" for name, note in NOTES.items()]
    out += [
        "",
        "For `tiny`, the backend-specific feedline rows add `map(identity, backend=...)`, because a `map` step is",
        "the only place to choose a backend; they measure feedline's per-sample path. `feedline-auto` is the",
        "idiomatic `fl.from_arrays(x, idx).batch(256)` with no map: bulk gather, in the calling thread.",
        "",
        "## Targets (issue 2)",
        "",
    ]
    if quick:
        out += ["Quick mode: small data and one repetition, so these verdicts mean nothing; run without --quick.", ""]
    out += [
        "| target | measured | met |",
        "|---|---|:---:|",
    ]
    for target, measured, met in targets(results):
        out.append(f"| {target} | {measured} | {'yes' if met else 'NO'} |")
    out.append("")
    return "\n".join(out)


def _sections(text: str) -> list[tuple[str, str]]:
    """``(heading, text)`` for each ``## `` section; the part before the first has heading ''."""
    parts, heading, lines = [], "", []
    for line in text.splitlines(keepends=True):
        if line.startswith("## "):
            parts.append((heading, "".join(lines)))
            heading, lines = line[3:].strip(), []
        lines.append(line)
    parts.append((heading, "".join(lines)))
    return parts


def merge(existing: str, new: str) -> str:
    """``new`` plus the sections of ``existing`` that ``new`` does not have.

    Other benchmark scripts (``python -m benchmarks.audio --append``, ...)
    append their own sections to RESULTS.md; a new run of the suite replaces
    only the sections it writes and keeps theirs, in their order.
    """
    mine = {heading for heading, _ in _sections(new)}
    kept = [body for heading, body in _sections(existing) if heading and heading not in mine]
    if not kept:
        return new
    return new.rstrip("\n") + "\n\n" + "".join(body.rstrip("\n") + "\n\n" for body in kept).rstrip("\n") + "\n"
