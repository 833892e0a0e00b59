"""benchmarks/stories.py runs every story example's pipeline with every setting and checks each epoch is whole."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["story1 Sequence", "story2 PNG", "story2 decoded", "story3 files", "story4 WAV"]


def test_stories_benchmark_runs_every_example_with_every_setting():
    for module in ("keras", "tensorflow", "PIL"):
        pytest.importorskip(module)
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900, check=False)  # timeout: a hang guard only
    assert done.returncode == 0, f"benchmarks.stories failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| story") and cells[0] != "story":  # a story row, not the header
            rows[cells[0]] = cells[1:]
    assert sorted(rows) == sorted(CASES), done.stdout
    for case, cells in rows.items():
        rates = [float(v) for v in cells[:5]]  # auto, remembered, thread, process, serial: each ran a whole epoch (checked inside)
        assert all(rate > 0 for rate in rates), (case, cells)
        assert cells[5] in ("thread", "process", "serial"), (case, cells)
        assert float(cells[9]) == pytest.approx(rates[0] / rates[4], rel=0.02), "auto / serial is the two rates' ratio"
    lines = []
    for case in CASES:  # the automatic choice explains itself for every story
        lines += [line for line in done.stdout.splitlines() if line.strip().startswith(f"{case}: automatic choice, each round:")]
        assert "| remembered, " in lines[-1], lines[-1]
    # Quick epochs are short: a trial that has not decided by the end, or two that disagree, leave nothing to start
    # on, so whether a remembered run started on a verdict is not asserted here (tests/test_remembered_choice.py and
    # the remembered benchmark's smoke test check that on epochs long enough to decide).
