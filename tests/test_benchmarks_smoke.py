"""The benchmark suite still runs (a smoke test: it checks the table, never a speed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_quick_benchmark_runs_and_writes_a_table(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "results.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "run", "--workload", "tiny", "--loader", "feedline-auto",
         "--loader", "feedline-process", "--loader", "torch-fork", "--quick", "--output", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table = out.read_text()
    for loader in ("serial-loop", "feedline-auto", "feedline-process", "torch-fork"):
        assert f"| {loader} |" in table
    assert "exactly once" in table and "| yes |" in table
