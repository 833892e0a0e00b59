"""benchmarks/stories.py runs every story example's pipeline with every setting and checks each epoch is whole."""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = ["story1 Sequence", "story2 PNG", "story2 decoded", "story3 files", "story4 WAV"]


@pytest.mark.timeout(900)  # 25 fresh interpreters, each importing Keras: 120-180 s on a 2-core VM (the default 120 s cut it)
def test_stories_benchmark_runs_every_example_with_every_setting(tmp_path):
    for module in ("keras", "tensorflow", "PIL"):
        pytest.importorskip(module)
    spans = tmp_path / "spans.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick", "--spans", str(spans)], cwd=ROOT, capture_output=True,
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
        # (the cell has two decimals: 0.19 for 0.186 is within its rounding, not 2 % of it)
        assert float(cells[9]) == pytest.approx(rates[0] / rates[4], rel=0.02, abs=0.006), "auto / serial is the two rates' ratio"
    lines = []
    for case in CASES:  # the automatic choice explains itself for every story
        lines += [line for line in done.stdout.splitlines() if line.strip().startswith(f"{case}: automatic choice, each round:")]
        assert "| remembered, " in lines[-1], lines[-1]
    # `--spans`: one record per timed run (not the untimed ones), each run's tasks on the clock of its epoch
    records = [json.loads(line) for line in spans.read_text().splitlines()]
    runs = sorted(f"{r['story']} {r['variant']} {r['setting']}" for r in records)
    assert runs == sorted(f"{case} {setting}" for case in CASES
                          for setting in ("auto", "remembered", "thread", "process", "serial")), runs
    for r in records:
        if r["setting"] in ("thread", "process"):
            assert r["spans"] and r["ran_as"].startswith(r["setting"]), r
        for _worker, start, end, _task, _rows in r["spans"]:
            assert 0 <= start <= end <= r["seconds"] + 1.0, (r["story"], r["setting"], start, end)
    # Quick epochs are short, too short for a trial's verdict to remember, so `--quick` runs no untimed automatic
    # runs first and the remembered run is a first run with its own memory file: whether a remembered run starts on
    # a verdict is checked by tests/test_remembered_choice.py and the remembered benchmark's smoke test, on epochs
    # long enough to decide.


def test_stories_benchmark_scales_each_epoch_and_leaves_out_a_missing_import(tmp_path):
    """``--scale K``: K times the rows of each example's epoch (16-core runs); an import the machine lacks is left out."""
    for module in ("keras", "PIL"):
        pytest.importorskip(module)
    fake = tmp_path / "tensorflow.py"  # a machine without TensorFlow (the GPU hosts): story 4's example imports it
    fake.write_text("raise ModuleNotFoundError(\"No module named 'tensorflow'\", name='tensorflow')\n")
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from benchmarks import stories\n"
            "print(*[getattr(stories.definitions(s, size), stories.SCALED[s]) for s in ('story1', 'story4') "
            "for size in ('x1', 'x3')])\n")
    env = {**os.environ, "KERAS_BACKEND": "numpy"}
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    batches, batches3, count, count3 = (int(v) for v in done.stdout.split())
    assert (batches3, count3) == (3 * batches, 3 * count)
    assert "story4_audio_overlap.py: line" in done.stderr and "left out" in done.stderr, done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--scale", "0"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode != 0 and "--scale must be a whole number of 1 or more, not 0" in done.stderr


def test_stories_benchmark_runs_only_the_settings_asked_for_and_another_checkouts_choice_beside_them(tmp_path):
    """``--settings``: a big machine leaves out the serial loop and the remembered runs (minutes there); "-" in their cells.

    ``--base SRC``: a "base" setting, the automatic choice of the feedline in SRC (here a copy of this one), run in
    the same rounds, with base / best and auto / base columns.
    """
    pytest.importorskip("PIL")
    base = tmp_path / "base"
    shutil.copytree(pathlib.Path(ROOT) / "src" / "feedline", base / "feedline")
    spans = tmp_path / "spans.jsonl"
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick", "--only", "story2", "--settings",
                           "auto,thread", "--base", str(base), "--spans", str(spans)], cwd=ROOT, capture_output=True,
                          text=True, timeout=600, check=False)  # timeout: a hang guard only
    assert done.returncode == 0, f"benchmarks.stories failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| story") and "---" not in line:
            rows[cells[0]] = cells[1:]
    assert rows.pop("story")[7:11] == ["remembered / best", "base / best", "auto / base (paired)", "auto / worst"], rows
    assert sorted(rows) == ["story2 PNG", "story2 decoded"], done.stdout
    for case, cells in rows.items():
        auto, remembered, thread, process, serial, best = cells[:6]
        assert float(auto) > 0 and float(thread) > 0 and (remembered, process, serial) == ("-", "-", "-"), (case, cells)
        assert best == "thread" and cells[7] == "-" and cells[11] == "-", (case, cells)  # nothing remembered, no serial loop
        assert float(cells[8]) > 0 and float(cells[9]) > 0, (case, cells)
    imported = [((m := json.loads(line))["setting"], m["feedline"]) for line in spans.read_text().splitlines()]
    assert sorted(s for s, _ in imported) == ["auto", "auto", "base", "base", "thread", "thread"], imported
    mine, theirs = str(pathlib.Path(ROOT) / "src" / "feedline"), str(base / "feedline")
    assert all(path == (theirs if setting == "base" else mine) for setting, path in imported), imported
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--settings", "thread,process"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "--settings takes auto and at least one of thread, process, serial" in done.stderr
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick", "--base", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "no feedline package there" in done.stderr
