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
def test_stories_benchmark_runs_every_example_with_every_hand_setting_and_another_checkouts_choice(tmp_path):
    """Every story example with auto, each hand setting and ``--base SRC`` (a copy of this checkout), one epoch each.

    ``--base SRC`` adds a "base" setting, the automatic choice of the feedline in SRC, run in the same rounds, with
    base / best and auto / base columns. The remembered setting is left out (``--settings``), "-" in its cells: in
    ``--quick`` its run is a first run with its own memory file, as its epochs are too short for a verdict to
    remember. Whether a remembered run starts on a verdict is checked by tests/test_remembered_choice.py and the
    remembered benchmark's smoke test, on epochs long enough to decide.
    """
    for module in ("keras", "tensorflow", "PIL"):
        pytest.importorskip(module)
    base = tmp_path / "base"
    shutil.copytree(pathlib.Path(ROOT) / "src" / "feedline", base / "feedline")
    spans = tmp_path / "spans.jsonl"
    settings = ("auto", "thread", "process", "serial", "base")
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick", "--settings", "auto,thread,process,serial",
                           "--base", str(base), "--spans", str(spans)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900, check=False)  # timeout: a hang guard only
    assert done.returncode == 0, f"benchmarks.stories failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    rows = {}
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| story") and "---" not in line:
            rows[cells[0]] = cells[1:]
    assert rows.pop("story")[6:] == ["auto / best", "remembered / best", "base / best", "auto / base (paired)",
                                     "auto / worst", "auto / serial"], done.stdout
    assert sorted(rows) == sorted(CASES), done.stdout
    for case, cells in rows.items():
        auto, remembered, thread, process, serial, best = cells[:6]
        rates = [float(v) for v in (auto, thread, process, serial)]  # each ran a whole epoch (checked inside)
        assert all(rate > 0 for rate in rates) and remembered == "-", (case, cells)
        assert best in ("thread", "process", "serial") and cells[7] == "-", (case, cells)
        assert float(cells[8]) > 0 and float(cells[9]) > 0, (case, cells)  # base / best, auto / base
        # (the cell has two decimals: 0.19 for 0.186 is within its rounding, not 2 % of it)
        assert float(cells[11]) == pytest.approx(rates[0] / rates[3], rel=0.02, abs=0.006), "auto / serial is the two rates' ratio"
    for case in CASES:  # the automatic choice explains itself for every story, the base's too
        line = next(line for line in done.stdout.splitlines() if line.strip().startswith(f"{case}: automatic choice, each round:"))
        assert sorted(d.split(",")[0] for d in line.split("each round: ", 1)[1].split(" | ")) == ["auto", "base"], line
    # `--spans`: one record per timed run, each run's tasks on the clock of its epoch, and the feedline it imported
    records = [json.loads(line) for line in spans.read_text().splitlines()]
    runs = sorted(f"{r['story']} {r['variant']} {r['setting']}" for r in records)
    assert runs == sorted(f"{case} {setting}" for case in CASES for setting in settings), runs
    mine, theirs = str(pathlib.Path(ROOT) / "src" / "feedline"), str(base / "feedline")
    for r in records:
        assert r["feedline"] == (theirs if r["setting"] == "base" else mine), (r["setting"], r["feedline"])
        if r["setting"] in ("thread", "process"):
            assert r["spans"] and r["ran_as"].startswith(r["setting"]), r
        for _worker, start, end, _task, _rows in r["spans"]:
            assert 0 <= start <= end <= r["seconds"] + 1.0, (r["story"], r["setting"], start, end)


def test_stories_benchmark_refuses_settings_without_auto_and_a_base_without_feedline(tmp_path):
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--settings", "thread,process"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "--settings takes auto and at least one of thread, process, serial" in done.stderr
    done = subprocess.run([sys.executable, "-m", "benchmarks.stories", "--quick", "--base", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode != 0 and "no feedline package there" in done.stderr


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
