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


# ---------------------------------------------------------------- the benchmark scripts, at tiny sizes
def _run_script(module: str, *args: str) -> str:
    """Run ``python -m benchmarks.<module> args`` from the repository root; its stdout (it must exit 0)."""
    done = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ), check=False)  # timeout: a hang guard only
    assert done.returncode == 0, f"benchmarks.{module} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _table_rows(text: str) -> dict[str, list[str]]:
    """The body rows of the markdown tables in ``text``, by their first cell (headers and rules left out)."""
    lines = text.splitlines()
    rows = {}
    for i, line in enumerate(lines):
        is_header = i + 1 < len(lines) and lines[i + 1].startswith("|---")
        if line.startswith("| ") and not is_header:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_markdown_table_lays_out_rows_and_names_a_row_that_does_not_fit():
    from benchmarks.tables import markdown_table

    text = markdown_table(["loader", "ran as", "samples/s"], [["a", "thread x2", "1,200"], ["b", "fork x2", 7]], "llr")
    assert text.splitlines()[:2] == ["| loader | ran as | samples/s |", "|---|---|---:|"]
    assert _table_rows(text) == {"a": ["thread x2", "1,200"], "b": ["fork x2", "7"]}
    with pytest.raises(ValueError, match=r"row \['c'\] has 1 cells, the header 3"):
        markdown_table(["loader", "ran as", "samples/s"], [["c"]])
    with pytest.raises(ValueError, match="align='lx'"):
        markdown_table(["loader", "ran as"], [], "lx")


def test_io_workers_benchmark_prints_a_row_per_loader():
    pytest.importorskip("torch")
    rows = _table_rows(_run_script("io_workers", "--samples", "32", "--latency", "0.005", "--reps", "1"))
    assert set(rows) == {"feedline-auto", "feedline-remembered", "feedline x2", "torch x2", "torch x16"}
    assert rows["feedline x2"][0].endswith("x2") and rows["torch x16"][0] == "fork x16", rows
    assert rows["feedline x2"][2] == "1.00x", "the reference row is 1.00x itself"


def test_first_batch_benchmark_times_each_setting_in_a_fresh_interpreter():
    rows = _table_rows(_run_script("first_batch", "--quick"))
    assert set(rows) == {"process x2, iterated at once", "thread x2, iterated at once"}
    assert rows["process x2, iterated at once"][0] == "process x2" and rows["thread x2, iterated at once"][0] == "thread x2"
    assert all(float(cells[1].split()[0]) > 0 for cells in rows.values()), rows


def test_busy_threads_benchmark_times_each_loader_with_and_without_threads_holding_the_gil():
    out = _run_script("busy_threads", "--quick")  # the script itself fails a run that does not deliver every sample
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in out.splitlines()
            if line.startswith("| ") and not line.startswith("| loader")]
    assert sorted((r[0], r[1]) for r in rows) == [("feedline process x2", "0"), ("feedline process x2", "2"),
                                                   ("torch DataLoader fork x2", "0"), ("torch DataLoader fork x2", "2")], out
    for r in rows:
        first, epoch = float(r[2].split()[0]), float(r[3].split()[0])
        assert 0 < first <= epoch, r


def test_small_tasks_benchmark_times_heavy_unbatched_samples_against_a_plain_loop():
    rows = _table_rows(_run_script("small_tasks", "--quick"))
    assert {"plain loop", "process x2", "automatic"} <= set(rows), rows
    assert rows["plain loop"][2] == "1.00x" and rows["process x2"][0] == "process x2", rows
    assert float(rows["process x2"][1]) > 0, rows


def test_vocabulary_overhead_benchmark_counts_the_samples_of_each_step():
    rows = _table_rows(_run_script("vocabulary_overhead", "--quick", "--reps", "1"))
    samples = {name: cells[-1] for name, cells in rows.items() if len(cells) == 5}
    assert samples["plain `shuffle().batch()`"] == "4096"
    assert samples["`take(4015)`"] == "4015" and samples["`skip(81)`"] == "4015"
    assert samples["generator + `shuffle(window=1000)`"] == "4096"
    assert {"`padded_batch`", "`bucket_by_length`, 3 buckets", "`bucket_by_length`, 8 buckets"} <= set(rows)


def test_store_verify_benchmark_prints_each_read_with_and_without_verify():
    pytest.importorskip("pyarrow")
    pytest.importorskip("xxhash")
    text = _run_script("store_verify", "--samples", "300", "--reps", "1")
    rows = _table_rows(text)
    assert set(rows) == {"in order", "shuffled", "per sample"}
    assert all(cells[2].endswith("% more time") for cells in rows.values()), rows
    assert "verify_store (feedline inspect --verify):" in text


def test_stream_shuffle_benchmark_times_the_window_only_when_there_is_one():
    rows = _table_rows(_run_script("stream_shuffle", "--quick"))
    assert set(rows) == {"window=None", "window=1000", "window=10000"}
    assert rows["window=None"][1] == "0.00", "no window, no time in it"
    assert float(rows["window=1000"][1]) > 0, "the window's time is profiled"


def test_shard_formats_benchmark_reads_every_format(capsys):
    for module in ("tensorflow", "google_crc32c", "array_record"):
        pytest.importorskip(module)
    from benchmarks import shard_formats

    shard_formats.main(["--scale", "0.01", "--reps", "1"])  # in this process: TensorFlow is imported once for the suite
    text = capsys.readouterr().out
    starts = ("index from_webdataset:", "tar headers, one thread:", "index from_tfrecord:", "serial reads, shuffled:",
              "tf.train.Example decode, CPU per record:", "tf.data.TFRecordDataset, in order, eager:")
    lines = text.splitlines()
    for start in starts:
        assert any(line.startswith(start) for line in lines), f"no line {start!r} in:\n{text}"


def test_ray_overhead_benchmark_prints_each_work_and_call_kind():
    pytest.importorskip("ray")
    rows = _table_rows(_run_script("ray_overhead", "--quick"))
    assert {"tiny", "5 ms/sample", "512x512x3 fill"} <= set(rows), rows
    assert rows["tiny"][0] == "32" and rows["512x512x3 fill"][0] == "64"
    assert {"actor holding the pipeline (used)", "stateless task, pipeline as argument"} <= set(rows)


def test_remote_store_benchmark_checks_remote_batches_and_prints_each_variant():
    for module in ("moto", "s3fs", "pyarrow"):
        pytest.importorskip(module)
    # 1024 samples: 4 files and a manifest, so the seeded faults (the 4th GET at 30 %) do hit
    text = _run_script("remote_store", "--samples", "1024", "--reps", "1", "--max-wait", "0", "--fail-rate", "0.3")
    assert "checked: remote batches are bit-identical to the local store's" in text
    rows = _table_rows(text)
    assert {"local", "S3 warm", "S3 cold", "S3 cold, no read-ahead", "HTTP cold", "HTTP cold, 30% failing"} <= set(rows), rows
    injected, retries, gave_up = (int(v) for v in rows["HTTP cold, 30% failing"][-1].split(" / "))
    assert injected > 0 and retries >= injected and gave_up == 0, rows["HTTP cold, 30% failing"]  # every sample came anyway
    assert rows["local"][1] == "1.00", "the reference row is 1.00 itself"


def test_remembered_benchmark_compares_first_runs_and_remembered_runs_with_the_hand_setting():
    out = _run_script("remembered", "--rounds", "3", "--workload", "gil")  # full data: a quick epoch is too short to decide
    rows = _table_rows(out)
    assert set(rows) == {"gil"}
    hand, auto, remembered = (float(v.replace(",", "")) for v in rows["gil"][:3])
    assert min(hand, auto, remembered) > 0
    assert float(rows["gil"][4]) == pytest.approx(remembered / hand, abs=0.01)
    assert "at once, remembered: this pipeline's trial" in out, out  # the remembered row started on its agreeing trials


def test_autotune_benchmark_pairs_the_automatic_choice_with_the_best_and_worst_hand_setting_each_round():
    out = _run_script("autotune", "--quick", "--workload", "gil")
    rows = _table_rows(out)
    assert set(rows) == {"gil"}
    cells = rows["gil"]
    # which hand setting is faster is measured, not assumed: a quick epoch on a loaded machine may favour either
    assert cells[0] in ("process x2", "thread x2"), cells
    auto, best, worst = (float(v.replace(",", "")) for v in cells[1:4])
    assert min(auto, best, worst) > 0
    assert best >= worst, "the best column is the faster hand setting of the round"
    # one round: its ratio is the median's, from rates the table rounds to whole samples/s (~170 on a slow machine)
    rounding = (0.5 + 0.5 * auto / best) / best + 0.0005
    assert float(cells[4].split()[0]) == pytest.approx(auto / best, abs=rounding)
    assert float(cells[5]) == pytest.approx(auto / worst, abs=(0.5 + 0.5 * auto / worst) / worst + 0.005)  # 2 decimals
    assert cells[6].split()[0] in ("process", "thread"), cells  # which backend the automatic run ended on


def test_autotune_with_base_runs_another_checkouts_automatic_choice_in_the_same_rounds():
    out = _run_script("autotune", "--quick", "--workload", "gil", "--base", str(ROOT / "src"))  # this one, as the base
    cells = _table_rows(out)["gil"]
    assert "base / best (quartiles)" in out and "auto / base (quartiles)" in out
    auto, best = (float(v.replace(",", "")) for v in cells[1:3])
    to_best, base_to_best, to_base = (float(c.split()[0]) for c in cells[4:7])
    # one round: auto / base is auto / best over base / best, up to the table's rounding
    assert to_base == pytest.approx(to_best / base_to_best, rel=0.01) and auto > 0 and best > 0


def test_shm_spill_benchmark_runs_feedline_through_memory_files_and_the_spill_folder_and_reports_what_failed():
    pytest.importorskip("torch")
    import shutil

    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("needs `unshare -m` (root on Linux) to give runs a small /dev/shm")
    text = _run_script("shm_spill", "--reps", "1", "--samples", "48", "--epochs", "2")
    rows = _table_rows(text)
    small = ("feedline process, small /dev/shm", "feedline process, small /dev/shm, spill folder")
    assert set(rows) == {"feedline process, room", *small, "feedline process, small /dev/shm, nowhere",
                         "feedline thread", "torch fork, room", "torch fork, small /dev/shm"}, rows
    for name in small:
        assert rows[name][2] == "0 of 1" and float(rows[name][1].replace(",", "")) > 0, rows
    assert rows["feedline process, small /dev/shm, nowhere"][2].startswith("1 of 1: SharedMemoryFull"), rows
    assert "files left in the spill folder: 0" in text


def test_preload_benchmark_times_the_zygote_each_worker_and_torchs_dataloader():
    pytest.importorskip("torch")
    out = _run_script("preload", "--workers", "2", "--rounds", "1", "--samples", "128", "--setup", "0.2")
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| x2 |")]
    assert [cells[1].strip() for cells in rows] == ["zygote", "each worker", "torch DataLoader"], out
    assert all(float(cells[2]) > 0 and float(cells[3]) > 0 for cells in rows), out


def test_packing_benchmark_prints_the_padding_of_each_way_to_batch():
    text = _run_script("packing", "--quick")
    shares = {line[:44].strip(): float(line[44:53].strip().rstrip("%")) for line in text.splitlines()
              if line[:1] not in ("#", " ", "") and line[44:53].strip().endswith("%")}
    assert {"padded_batch(16)", "pack(4096, fit='best', buffer=16).batch(4)", "Grain first-fit rule, 16 bins (replayed)"} <= set(shares)
    assert shares["pack(4096, fit='best', buffer=16).batch(4)"] < shares["Grain first-fit rule, 16 bins (replayed)"]
    assert shares["pack(4096, fit='best', buffer=16).batch(4)"] < shares["padded_batch(16)"] / 4
    assert "consumer packer, fit='best', buffer=64" in text
