"""The command line speaks command line: flags not Python arguments, one prefix, one line on Ctrl-C.

Each case runs the real command: ``main([...])`` in this process where
that is enough, ``python -m feedline.cli`` in a subprocess for exit codes
and Ctrl-C.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pyarrow")
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("cv2")
simplejpeg = pytest.importorskip("simplejpeg")
from conftest import damage_after_sos  # noqa: E402

from feedline.cli import main
from feedline.store import open_store
from feedline.testing import explain_demo

PYTHON_SPEAK = ("overwrite=True", "on_error", "map(", "strict=False", "rows_per_file", "workers=")


def jpeg_bytes(seed: int, h: int = 48, w: int = 64) -> bytes:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.clip(np.stack([x * 3, y * 4, x + y], -1) + rng.normal(0, 8, (h, w, 3)), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=90)
    return buf.getvalue()


@pytest.fixture
def photos(tmp_path):
    root = tmp_path / "photos"
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for i in range(4):
            (root / name / f"{i}.jpg").write_bytes(jpeg_bytes(10 * c + i))
    (root / "dog" / "9_damaged.jpg").write_bytes(damage_after_sos(jpeg_bytes(99)))
    whole = jpeg_bytes(98)
    (root / "dog" / "9_truncated.jpg").write_bytes(whole[: len(whole) * 3 // 4])
    return root


def cli(*argv) -> tuple[int, str, str]:
    run = subprocess.run([sys.executable, "-m", "feedline.cli", *map(str, argv)], capture_output=True, text=True,
                         check=False, timeout=300)
    return run.returncode, run.stdout, run.stderr


def test_an_existing_dst_names_the_flag_not_the_python_argument(photos, tmp_path, no_leaks):
    dst = tmp_path / "s"
    assert main(["convert", str(photos), str(dst), "--backend", "serial", "--no-progress"]) == 0
    with pytest.raises(SystemExit) as info:
        main(["convert", str(photos), str(dst), "--backend", "serial", "--no-progress"])
    message = str(info.value.code)
    assert message.startswith("feedline convert: DST ") and "--overwrite" in message and "overwrite=True" not in message
    assert main(["convert", str(photos), str(dst), "--backend", "serial", "--no-progress", "--overwrite"]) == 0
    code, out, err = cli("convert", photos, dst, "--backend", "serial", "--no-progress")
    assert code == 1 and out == "" and err.strip().count("\n") == 0 and "--overwrite" in err


@pytest.mark.parametrize("src", ["missing", "file"])
def test_a_bad_src_says_so_once(photos, tmp_path, src):
    path = tmp_path / "nothing" if src == "missing" else photos / "cat" / "0.jpg"
    with pytest.raises(SystemExit) as info:
        main(["convert", str(path), str(tmp_path / "s"), "--no-progress"])
    message = str(info.value.code)
    assert message.count("feedline convert:") == 1 and "SRC" in message
    assert ("does not exist" if src == "missing" else "is not a folder") in message
    assert not (tmp_path / "s").exists()


def test_the_python_api_does_not_speak_cli(tmp_path):
    from feedline.store import StoreError
    from feedline.testing import convert

    with pytest.raises(StoreError) as info:
        convert(tmp_path / "nothing", tmp_path / "s", progress=False)
    assert "feedline convert" not in str(info.value) and "is not a folder" in str(info.value)


def test_the_summary_of_a_jpeg_conversion_speaks_cli(photos, tmp_path, capsys, no_leaks):
    dst = tmp_path / "s"
    assert main(["convert", str(photos), str(dst), "--encoding", "image=jpeg:90", "--size", "32x32", "--backend", "thread",
                 "--workers", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    for word in PYTHON_SPEAK:
        assert word not in out, f"{word!r} in the summary:\n{out}"
    assert "8 image samples" in out and "skipped 2 files" in out
    assert "dog/9_damaged.jpg: cannot decode as JPEG: damaged (libjpeg-turbo:" in out.replace(os.sep, "/")
    assert "dog/9_truncated.jpg: cannot decode as JPEG: truncated" in out.replace(os.sep, "/")
    assert len(open_store(dst)) == 8
    # --lenient keeps what libjpeg-turbo recovers of the damaged file; the truncated one is still skipped.
    assert main(["convert", str(photos), str(dst), "--overwrite", "--lenient", "--size", "32x32", "--backend", "serial",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "9 image samples" in out and "skipped 1 files" in out and "9_truncated.jpg" in out


def test_counts_are_checked_by_the_command_line(photos, tmp_path):
    for flag, value in (("--rows-per-file", "0"), ("--workers", "-1"), ("--sample-rate", "x")):
        code, out, err = cli("convert", photos, tmp_path / "s", flag, value)
        assert code == 2 and f"argument {flag}: expected an integer" in err, err
    code, out, err = cli("convert", photos, tmp_path / "s", "--workers", "0", "--backend", "process")
    assert code == 1 and "--workers 0" in err and "workers=" not in err
    code, out, err = cli("convert", photos, tmp_path / "s", "--labels", tmp_path / "missing.csv")
    assert code == 1 and "--labels" in err and "is not a file" in err and "Traceback" not in err
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("backend", ["serial", "process"])
def test_ctrl_c_during_convert_prints_one_line_and_exits_130(tmp_path, backend):
    root = tmp_path / "many"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    data = [jpeg_bytes(i, 96, 128) for i in range(8)]
    for i in range(400):
        (root / ("a" if i % 2 else "b") / f"{i:04d}.jpg").write_bytes(data[i % 8])
    dst = tmp_path / "s"
    # One row per Arrow file (each closed and fsynced): slow enough to be interrupted mid-way.
    child = subprocess.Popen(
        [sys.executable, "-m", "feedline.cli", "convert", str(root), str(dst), "--backend", backend, "--workers", "2",
         "--rows-per-file", "1", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:  # wait until rows are being written: the pipeline is running
            tmp = [p for p in tmp_path.iterdir() if p.name.startswith("s.tmp-")]
            if tmp and sum(len(files) for _, _, files in os.walk(tmp[0])) >= 4:
                break
            assert child.poll() is None, f"convert ended before it could be interrupted: {child.communicate()}"
            assert time.monotonic() < deadline, "convert never started writing"
            time.sleep(0.02)
        os.killpg(child.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 130, (child.returncode, out, err)
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    assert err.startswith("feedline convert: interrupted") and str(dst.name) in err
    assert out == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["many"]  # no store, no temporary directory


def test_ctrl_c_in_any_command_is_one_line_and_130(tmp_path, capsys):
    target = tmp_path / "interrupted.py"
    target.write_text("def pipe():\n    raise KeyboardInterrupt  # Ctrl-C while the pipeline is built\n")
    assert main(["bench", f"{target}:pipe"]) == 130
    assert capsys.readouterr().err == "feedline bench: interrupted\n"


# -------------------------------------------------------------------- demo
class FakeStats:
    def __init__(self, backend="process", workers=2, cores=2, cpu_share=0.98, batches=7, trial=None):
        self.backend, self.workers, self.cores, self.cpu_share = backend, workers, cores, cpu_share
        self.batches, self.trial = batches, trial or {}


def test_demo_explains_a_first_epoch_that_start_up_dominates():
    lines = explain_demo(200, naive=0.54, cold=0.71, warm=0.30, cold_stats=FakeStats(trial={"thread": 1}), warm_stats=FakeStats())
    assert lines[0].startswith("  speed-up 1.80x per epoch once running (process x2") and "first epoch 0.76x" in lines[0]
    assert "includes start-up (0.41 s more than the next epoch" in lines[1] and "measuring threads against processes" in lines[1]
    assert "from about 342 samples, even the first epoch is faster" in lines[1]


@pytest.mark.parametrize("stats, reason", [
    (FakeStats(workers=1, cores=1), "without a second core"),
    (FakeStats(backend="thread"), "still choosing its backend"),
    (FakeStats(backend="thread", trial={"thread": 300.0, "process": 310.0}), "300 against 310 samples/s"),
    (FakeStats(cpu_share=0.5), "other programs are using this machine's cores (1-minute load average 3.0"),
    (FakeStats(batches=2), "per-epoch costs"),
])
def test_demo_says_why_there_is_no_speed_up(stats, reason):
    load = 3.0 if stats.cpu_share == 0.5 else 0.1
    lines = explain_demo(64, naive=0.2, cold=0.5, warm=0.21, cold_stats=stats, warm_stats=stats, load=load)
    assert len(lines) == 2 and lines[1].startswith("  no speed-up at this size: ") and reason in lines[1]


def test_a_small_demo_never_shows_a_bare_slow_down(tmp_path, capsys, no_leaks):
    assert main(["demo", "--samples", "96", "--data", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "plain loop (1 core)" in out and "feedline, first epoch" in out and "feedline, next epoch" in out
    [speed] = [line for line in out.splitlines() if line.startswith("  speed-up ")]
    steady, first = (float(part.split("x")[0]) for part in (speed.split()[1], speed.split("first epoch ")[1]))
    if steady <= 1.05:
        assert "no speed-up at this size: " in out
    elif first < 1:
        assert "the first epoch is slower than the plain loop: it includes start-up" in out
