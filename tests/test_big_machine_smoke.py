"""benchmarks/big_machine.py: the 16-core checks in one command, within a budget, each step's output kept."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*args, timeout=600):
    return subprocess.run([sys.executable, "-m", "benchmarks.big_machine", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, check=False)  # timeout: a hang guard only


def test_big_machine_skips_the_steps_its_budget_cannot_fit_and_says_so(tmp_path):
    done = run("--out", str(tmp_path), "--budget", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text()
    for step in ("seg", "story2", "story1", "gil", "jpeg", "audio"):
        assert f"## {step}: python -m benchmarks." in summary
    assert summary.count("skipped: ") == 6, summary
    assert not list(tmp_path.glob("*.log")), "a skipped step starts nothing"


def test_big_machine_runs_a_step_and_keeps_its_table_and_log(tmp_path):
    pytest.importorskip("cv2")
    done = run("--out", str(tmp_path), "--quick", "--only", "seg", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = (tmp_path / "summary.md").read_text()
    # autotune's table, paired against the suite's hand setting only (with both hand settings, which is faster in a
    # quick epoch on a loaded machine is not known in advance)
    assert "| seg | thread x2 |" in summary, summary
    assert "story2" not in summary  # --only
    log = (tmp_path / "seg.log").read_text()
    assert log.startswith("$ python -m benchmarks.autotune --workload seg") and "round 1/1" in log, log[-2000:]
