"""The benchmark suite still runs (a smoke test: it checks the table, never a speed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quick_benchmark_runs_and_writes_a_table_with_exactly_once(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("psutil")
    pytest.importorskip("matplotlib")
    out = tmp_path / "RESULTS.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "--workload", "gil", "--loader", "feedline-auto",
         "--loader", "torch-fork", "--quick", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, env=dict(os.environ), check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    table = out.read_text()
    assert "## gil" in table
    header = next(line for line in table.splitlines() if line.startswith("| loader |"))
    assert "exactly once" in header and "peak PSS" in header
    rows = {line.split("|")[1].strip().strip("*"): line for line in table.splitlines() if line.startswith("| ")}
    for loader in ("serial-loop", "feedline-auto", "torch-fork"):
        assert loader in rows, f"no row for {loader}"
        assert rows[loader].rstrip().endswith("| yes |"), rows[loader]
    assert (tmp_path / "results.png").stat().st_size > 0


def test_report_keeps_sections_it_does_not_write():
    from benchmarks.report import merge

    existing = "# old\n\n## gil\n\nold gil table\n\n## Store\n\nthe store section\n\n## Ray\n\nthe ray section\n"
    new = "# new\n\n## gil\n\nnew gil table\n"
    merged = merge(existing, new)
    assert "new gil table" in merged and "old gil table" not in merged
    assert merged.index("## Store") < merged.index("## Ray")
    assert "the store section" in merged and "the ray section" in merged
