"""RESULTS.md and results.png: the tables, the targets, the machine, the command, the chart.

`render` writes the suite's own sections; `merge` keeps every section of an
existing RESULTS.md that the new text does not write (the store and Ray
sections other scripts append, the decoder tables, hand-written readings),
so a run never deletes what it does not own.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import os
import platform
import subprocess
import sys

from . import ENV_VARS
from .loaders import NATIVE_NOTES, NOTES
from .runner import cores

__all__ = ["chart", "machine", "merge", "render", "targets"]

FEEDLINE_PREFIX = "feedline"
TIED = 0.95  # "tied first": within 5 % of the best peer
IDEAL = 0.90  # share of the cores x serial rate a CPU-bound workload should reach
MiB = 2**20


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
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=root, capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "this checkout (commit unknown)"
    if not head:
        return "this checkout (commit unknown)"
    return f"this checkout at commit {head}" + (", with uncommitted changes in src/ (other sessions at work)" if dirty else "")


def _version(module: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(module)
    except PackageNotFoundError:
        return "not installed"


def machine() -> dict:
    import numpy

    import feedline

    libs = ["torch", "tensorflow-cpu", "keras", "grain", "spdl", "jax", "pillow", "opencv-python-headless",
            "simplejpeg", "soundfile", "array_record", "psutil"]
    return {
        "cores": cores(),
        "cpu": _cpu_model(),
        "memory": f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "feedline": f"{feedline.__version__}, {_feedline_source(feedline.__file__)}",
        "peers and libraries": ", ".join(f"{lib} {_version(lib)}" for lib in libs),
        "default start method": multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_context().get_start_method(),
        "env": ", ".join(f"{v}={os.environ.get(v, '(unset)')}" for v in ENV_VARS),
        "GPU": "none (the GPU run of the device copy-ahead paths is still owed)",
    }


def _n(value, spec=",.0f") -> str:
    """A number for a table cell; '-' when it was not measured (NaN)."""
    return "-" if math.isnan(value) else format(value, spec)


def _ok(s) -> bool:
    return bool(s.runs) and s.exactly_once and not s.problems


def _is_feedline(name: str) -> bool:
    return name.startswith(FEEDLINE_PREFIX)


def _best(summaries, pick) -> tuple[str, object] | tuple[None, None]:
    rows = [(n, s) for n, s in summaries.items() if s.runs and pick(n)]
    return max(rows, key=lambda r: r[1].sps) if rows else (None, None)


def targets(results) -> list[tuple[str, str, bool | None]]:
    """(target, what was measured, met) for each target of issue 9, per workload."""
    out = []
    n_cores = cores()
    for wname, r in results.items():
        s, w = r["summaries"], r["workload"]
        serial = s.get("serial-loop")
        fname, f = _best(s, _is_feedline)
        pname, p = _best(s, lambda n: not _is_feedline(n) and n != "serial-loop")
        auto = s.get("feedline-auto")
        if f and p:
            ratio = f.sps / p.sps
            same_f = _best(s, lambda n: n in ("feedline-auto", "feedline-hand"))
            same_p = _best(s, lambda n, native=w.native: not _is_feedline(n) and n != "serial-loop" and n not in native)
            same = (f"; same code: {same_f[0]} {same_f[1].sps / same_p[1].sps:.2f}x {same_p[0]}"
                    if same_f[1] and same_p[1] else "")
            out.append((f"{wname}: feedline first or tied-first (>= {TIED:.0%} of the best peer)",
                        f"{fname} {f.sps:,.0f} vs {pname} {p.sps:,.0f} samples/s: {ratio:.2f}x{same}",
                        ratio >= TIED))
        if w.cpu_bound and f and serial and serial.runs:
            ideal = f.sps / (n_cores * serial.sps)
            extra = f"; feedline-auto {auto.sps / (n_cores * serial.sps):.2f}" if auto and auto.runs and fname != "feedline-auto" else ""
            out.append((f"{wname}: feedline >= {IDEAL:.0%} of the {n_cores}-core ideal ({n_cores} x serial loop)",
                        f"{fname} {ideal:.2f} of ideal (steady state {_n(f.steady / (n_cores * serial.steady), '.2f')}){extra}",
                        ideal >= IDEAL))
        peers_first = [(n, x) for n, x in s.items() if x.runs and not _is_feedline(n) and n != "serial-loop"]
        if f and peers_first:
            qn, q = min(peers_first, key=lambda r: r[1].first)
            fastest_f = min(((n, x) for n, x in s.items() if x.runs and _is_feedline(n)), key=lambda r: r[1].first)
            out.append((f"{wname}: time to first batch no worse than the best peer",
                        (f"{fname} {f.first:.3f} s (fastest feedline row: {fastest_f[0]} {fastest_f[1].first:.3f} s) "
                         f"vs {qn} {q.first:.3f} s"),
                        f.first <= max(q.first * 1.05, q.first + 0.01)))
        dl = [(n, s[n]) for n in ("torch-fork", "torch-spawn") if n in s and s[n].runs]
        if f and dl:
            dn, d = min(dl, key=lambda r: r[1].peak_pss)
            out.append((f"{wname}: peak memory of the process tree no higher than DataLoader's (PSS)",
                        (f"{fname} {f.peak_pss / MiB:,.0f} MiB PSS ({f.peak_rss / MiB:,.0f} RSS) vs {dn} "
                         f"{d.peak_pss / MiB:,.0f} MiB PSS ({d.peak_rss / MiB:,.0f} RSS)"),
                        f.peak_pss <= d.peak_pss * 1.02))
        for name, x in s.items():
            if (x.runs or x.error) and not _ok(x):
                out.append((f"{wname}: {name} delivers every sample exactly once, right output, clean close",
                            "; ".join(x.problems) or x.error, False))
    return out


def _table(r, n_cores: int) -> list[str]:
    s = r["summaries"]
    serial = s.get("serial-loop")
    base = serial.sps if serial and serial.runs else None
    base_steady = serial.steady if serial and serial.runs else None
    lines = [
        ("| loader | ran as | samples/s median (min-max) | x serial | of ideal | steady of ideal "
         "| first batch s median (min-max) | close s | peak PSS MiB (added) | peak RSS MiB | CPU | foreign load (max) "
         "| exactly once |"),
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for name, x in s.items():
        label = f"**{name}**" if _is_feedline(name) else name
        if not x.runs:
            lines.append(f"| {label} | | failed: {x.error} | | | | | | | | | | no |")
            continue
        lo, hi = x.sps_span
        flo, fhi = x.first_span
        ratio = _n(x.sps / base, ".2f") if base else ""
        ideal = _n(x.sps / (n_cores * base), ".2f") if base else ""
        steady_ideal = _n(x.steady / (n_cores * base_steady), ".2f") if base_steady else ""
        once = "yes" if _ok(x) else "**NO**"
        lines.append(
            f"| {label} | {x.detail} | {x.sps:,.0f} ({lo:,.0f}-{hi:,.0f}) | {ratio} | {ideal} | {steady_ideal} "
            f"| {x.first:.3f} ({flo:.3f}-{fhi:.3f}) | {x.close:.3f} | {_n(x.peak_pss / MiB)} ({_n(x.added_pss / MiB, '+,.0f')}) "
            f"| {_n(x.peak_rss / MiB)} | {x.cpu:.0%} | {x.foreign:.0%} ({x.foreign_max:.0%}) | {once} |"
        )
    return lines


def render(results, command: str, reps: int, quick: bool, seconds: float, info: dict, chart_name: str = "results.png") -> str:
    n_cores = info["cores"]
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    foreign = [m.foreign for r in results.values() for x in r["summaries"].values() for m in x.runs]
    load = (f"Other processes on the machine used a median {sorted(foreign)[len(foreign) // 2]:.0%} (max {max(foreign):.0%}) "
            "of the cores during the kept runs (`foreign load` column)." if foreign else "")
    out = [
        "# feedline benchmark results",
        "",
        f"Command (from the repository root): `{command}`",
        "",
        (f"Date: {date}. Mode: {'quick (smoke test; numbers are indicative only)' if quick else 'full'}; "
         + (f"{reps} timed repetitions per loader after one untimed, checked warm-up" if not quick else "one checked run per loader")
         + f"; loaders alternate (a seeded shuffled order each round). Total run time {seconds:.0f} s. {load}"),
        "",
        f"![samples/s of every loader, relative to the serial loop]({chart_name})",
        "",
        "## Machine",
        "",
    ]
    out += [f"- {k}: {v}" for k, v in info.items()]
    out += [
        "",
        "Fairness: the thread-pool variables above are set to 1 for the whole process tree before NumPy, torch or",
        "TensorFlow load, so every worker of every loader (fork or spawn) inherits them, which is what feedline's",
        "process workers do by default; OpenCV's pool is pinned to 1 thread by the workloads that use it. Every",
        "loader has 2 workers (2 cores), no shuffle, and runs the same per-sample function; native rows run the",
        "library's own ops or file format. Each run builds its loader inside the clock and closes it after.",
        "",
        "## How to read the tables",
        "",
        "- `samples/s`: samples of the epoch / seconds from building the loader to its last batch (start-up",
        "  included, as a user sees one epoch). Median over the repetitions, min-max in brackets.",
        f"- `x serial`: ratio to the serial loop; `of ideal`: samples/s / ({n_cores} x serial-loop samples/s), the",
        "  best a loader can do with the shared function on these cores. `steady of ideal`: the same over the",
        "  second half of the epoch's batches (start-up excluded).",
        "- `first batch`: seconds from building the loader to the first batch. `close`: seconds to release it.",
        "- `peak PSS`: the largest sum, over the process and all its descendants, of PSS (a page shared by N",
        "  processes counts 1/N in each, so the tree's sum counts it once; psutil, sampled every 0.5 s): fair to",
        "  fork, whose workers share the parent's pages, and to batches in shared memory. `added`: peak minus the",
        "  tree before the run (the parent holds TensorFlow, torch and Grain for every row). `peak RSS`: the same",
        "  sum of RSS, which counts a page shared by N processes N times.",
        "- `CPU`: CPU time of the process and its workers / (wall time x cores), over build + epoch + close.",
        "- `foreign load`: CPU used by processes outside the benchmark's tree during the run (from /proc/stat),",
        "  as a share of all cores. The runner waits for a quiet machine before each run and redoes a run during",
        "  which this exceeded 10 % (up to 2 times, keeping the cleanest).",
        "- `exactly once`: every run delivered each sample index exactly once (the index travels inside the",
        "  sample); the warm-up's rows equal the reference bit for bit (native rows: same shapes and dtypes);",
        "  no child process, /dev/shm entry or feedline thread was left after close.",
        "- feedline rows are in bold.",
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
        notes = []
        hand = r["summaries"].get("feedline-hand")
        if hand and hand.runs:
            settings = ", ".join(f"{k}={v!r}" for k, v in (w.hand or {}).items())
            notes.append(f"- feedline-hand: `map(fn, {settings})`: {w.hand_why}.")
        auto = r["summaries"].get("feedline-auto")
        if auto and auto.why:
            notes.append(f"- feedline-auto ran as {auto.detail}: \"{auto.why}\".")
        notes += [f"- {name}: {note}." for name, note in w.notes.items() if name in r["summaries"]]
        notes += [f"- {name}: not run: {why}." for name, why in r["skipped"].items()
                  if name in w.skipped or name in w.native or (name in NOTES and "unknown" not in why)]
        notes += [f"- {name}: **{p}**" for name, s in r["summaries"].items() for p in s.problems]
        out += notes + ([""] if notes else [])
    out += ["## Loaders", ""]
    out += [f"- `{name}`: {note}" for name, note in NOTES.items()]
    out += [f"- `{name}` (native, where a workload defines it): {note}" for name, note in NATIVE_NOTES.items()]
    out += ["", "## Targets (issue 9)", ""]
    if quick:
        out += ["Quick mode: small data and one run, so these verdicts mean nothing; run without --quick.", ""]
    out += ["| target | measured | met |", "|---|---|:---:|"]
    for target, measured, met in targets(results):
        out.append(f"| {target} | {measured} | {'yes' if met else '**NO**'} |")
    out.append("")
    return "\n".join(out)


def chart(results, path: str, quick: bool = False) -> None:
    """A bar chart: samples/s of every loader relative to the serial loop, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    names = [w for w, r in results.items() if any(s.runs for s in r["summaries"].values())]
    if not names:
        return
    cols = 2 if len(names) > 1 else 1
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(7.2 * cols, 0.34 * 14 * rows + 0.8), squeeze=False)
    n_cores = cores()
    for ax, wname in zip(axes.flat, names):
        r = results[wname]
        s = r["summaries"]
        serial = s.get("serial-loop")
        base = serial.sps if serial and serial.runs else 1.0
        loaders = [(n, x) for n, x in s.items() if x.runs]
        loaders.sort(key=lambda item: item[1].sps)
        ys = range(len(loaders))
        vals = [x.sps / base for _, x in loaders]
        lo = [x.sps_span[0] / base for _, x in loaders]
        hi = [x.sps_span[1] / base for _, x in loaders]
        colours = ["#1f77b4" if _is_feedline(n) else ("#444444" if n == "serial-loop" else "#bbbbbb") for n, _ in loaders]
        ax.barh(ys, vals, color=colours, xerr=[[v - a for v, a in zip(vals, lo)], [b - v for v, b in zip(vals, hi)]],
                error_kw={"elinewidth": 0.8, "capsize": 2})
        ax.set_yticks(list(ys), [n + ("" if _ok(x) else " (check failed)") for n, x in loaders], fontsize=8)
        ax.set_xscale("log")
        if r["workload"].cpu_bound:
            ax.axvline(n_cores, color="#2ca02c", linestyle="--", linewidth=1)
            ax.text(n_cores, -0.9, f" {n_cores}-core ideal", color="#2ca02c", fontsize=7, va="center")
        ax.axvline(1.0, color="#444444", linewidth=0.6)
        for y, (_, x), h in zip(ys, loaders, hi):
            ax.text(h * 1.06, y, f"{x.sps:,.0f}/s", va="center", fontsize=7)
        left, right = min(lo + [0.5]) / 1.5, max(hi + [n_cores]) * 3
        ax.set_xlim(left, right)
        ticks = [t for t in (0.003, 0.01, 0.03, 0.1, 0.3, 1, 2, 5, 10, 30, 100) if left <= t <= right]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}x"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(-1.4, len(loaders) - 0.5)
        ax.set_title(f"{wname}: samples/s (x serial loop, log scale; median, min-max)", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    title = "feedline (blue) and its peers, 2 workers each" + (" (quick: indicative only)" if quick else "")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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

    Other benchmark scripts (the store and Ray benchmarks, the decoder
    micro-benchmark) and hand-written readings add their own sections to
    RESULTS.md; a new run of the suite replaces only the sections it writes
    and keeps theirs, in their order, after its own.
    """
    mine = {heading for heading, _ in _sections(new)}
    kept = [body for heading, body in _sections(existing) if heading and heading not in mine]
    if not kept:
        return new
    return new.rstrip("\n") + "\n\n" + "".join(body.rstrip("\n") + "\n\n" for body in kept).rstrip("\n") + "\n"
