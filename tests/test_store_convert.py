"""`feedline convert` and `feedline inspect`: real image and audio files in, a store out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("pyarrow")
PIL = pytest.importorskip("PIL.Image")
pytest.importorskip("cv2")
pytest.importorskip("simplejpeg")

import feedline as fl
from feedline.cli import main
from feedline.store import StoreError, open_store
from feedline.testing import convert


def picture(h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    return np.clip(np.stack([x * 3, y * 3, x + y], -1) + rng.integers(0, 30, (1, 1, 3)), 0, 255).astype(np.uint8)


@pytest.fixture
def image_folder(tmp_path):
    """cat/ and dog/ with 5 PNGs and 5 JPEGs of various sizes, one broken JPEG and a text file."""
    root = tmp_path / "photos"
    originals = {}
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for i in range(10):
            h, w = (16, 16) if i < 2 else (14 + i, 20 + 2 * i)
            img = picture(h, w, seed=10 * c + i)
            rel = f"{name}/{i:02d}.{'png' if i % 2 == 0 else 'jpg'}"
            PIL.fromarray(img).save(root / rel)
            originals[rel] = img
    (root / "dog" / "99_broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (root / "README.txt").write_text("not an image")
    return root, originals


def run_cli(*argv) -> int:
    return main([str(a) for a in argv])


def test_convert_an_image_folder_to_a_fixed_size_with_labels_from_folders(image_folder, tmp_path, no_leaks):
    root, originals = image_folder
    summary = convert(root, tmp_path / "s", size=(16, 16), fit="center-crop", backend="thread", workers=2, progress=False)
    files = sorted(originals)
    assert summary.samples == 20 and summary.classes == ["cat", "dog"]
    assert [path for path, _ in summary.skipped] == [os.path.join("dog", "99_broken.jpg")]
    assert "JPEG" in summary.skipped[0][1]
    store = open_store(tmp_path / "s")
    assert len(store) == 20 and store.fields["image"].shape == [16, 16, 3]
    labels = [int(store[i]["label"]) for i in range(20)]
    assert labels == [0 if f.startswith("cat") else 1 for f in files]
    np.testing.assert_array_equal(store[0]["image"], originals["cat/00.png"])  # a 16x16 PNG: nothing to crop, lossless
    assert store.meta["classes"] == ["cat", "dog"] and store.meta["size"] == [16, 16]
    assert store.meta["skipped"][0][0] == os.path.join("dog", "99_broken.jpg")
    assert "1 files that could not be read" in str(summary) and "99_broken.jpg" in str(summary)


def test_convert_keeps_each_image_size_without_size_on_process_workers(image_folder, tmp_path, no_leaks):
    root, originals = image_folder
    convert(root, tmp_path / "s", backend="process", workers=2, progress=False)
    store = open_store(tmp_path / "s")
    assert store.fields["image"].kind == "ragged"
    for i, rel in enumerate(sorted(originals)):
        got = store[i]["image"]
        assert got.shape == originals[rel].shape
        if rel.endswith(".png"):
            np.testing.assert_array_equal(got, originals[rel])


def test_convert_with_jpeg_encoding_encodes_in_the_workers(image_folder, tmp_path, no_leaks):
    root, originals = image_folder
    convert(root, tmp_path / "s", size=(16, 16), encodings={"image": "jpeg:95"}, backend="thread", progress=False)
    store = open_store(tmp_path / "s")
    assert store.fields["image"].encoding == "jpeg:95"
    got = store[0]["image"]
    assert got.shape == (16, 16, 3) and np.abs(got.astype(int) - originals["cat/00.png"]).mean() < 4
    with fl.from_store(tmp_path / "s").shuffle(seed=0).batch(8) as pipe:
        assert sum(len(b["label"]) for b in pipe) == 20


def test_convert_takes_labels_from_a_csv(image_folder, tmp_path, no_leaks):
    root, _ = image_folder
    csv = tmp_path / "labels.csv"
    csv.write_text("path,label\ndog/03.jpg,wolf\ncat/00.png,lion\ncat/01.jpg,lion\nmissing.png,lion\n")
    summary = convert(root, tmp_path / "s", labels_csv=csv, backend="serial", progress=False)
    store = open_store(tmp_path / "s")
    assert summary.samples == 3 and store.meta["classes"] == ["lion", "wolf"]
    assert [int(store[i]["label"]) for i in range(3)] == [0, 0, 1]  # cat/00, cat/01, dog/03: sorted by path
    assert summary.skipped == [("missing.png", "listed in the labels CSV but not found (or not an image/audio file)")]


def test_convert_keeps_class_labels_and_lists_stray_images_beside_the_class_folders(image_folder, tmp_path, capsys, no_leaks):
    root, originals = image_folder
    PIL.fromarray(picture(16, 16, seed=90)).save(root / "cover.jpg")  # real files, directly in the root
    PIL.fromarray(picture(16, 16, seed=91)).save(root / "thumb.png")
    assert run_cli("convert", root, tmp_path / "s", "--size", "16x16", "--backend", "serial", "--no-progress") == 0
    out = capsys.readouterr().out
    assert "20 image samples" in out and "2 classes: cat, dog" in out
    assert "left out 2 files that lie directly in the source folder, outside the class folders" in out
    assert "\n    cover.jpg\n    thumb.png\n" in out
    store = open_store(tmp_path / "s")
    assert sorted(store.fields) == ["image", "label"] and store.meta["classes"] == ["cat", "dog"]
    assert [int(store[i]["label"]) for i in range(20)] == [0 if f.startswith("cat") else 1 for f in sorted(originals)]
    assert store.meta["outside_classes"] == ["cover.jpg", "thumb.png"] and store.meta["files"] == 23


def test_convert_refuses_a_folder_whose_loose_images_outnumber_its_class_folders(tmp_path, no_leaks):
    root = tmp_path / "flat"
    (root / "extra").mkdir(parents=True)
    for i in range(3):
        PIL.fromarray(picture(12, 12, seed=i)).save(root / f"{i}.png")
    PIL.fromarray(picture(12, 12, seed=9)).save(root / "extra" / "x.jpg")
    with pytest.raises(StoreError, match=r"3 files directly in it \(0.png, 1.png, 2.png\) and 1 in sub-folders \(extra\).*--labels"):
        convert(root, tmp_path / "s", progress=False)
    assert not (tmp_path / "s").exists()


def test_convert_an_audio_folder(tmp_path, no_leaks):
    soundfile = pytest.importorskip("soundfile")
    root = tmp_path / "clips"
    clips = {}
    rng = np.random.default_rng(0)
    for i in range(6):
        label = "yes" if i % 2 else "no"
        (root / label).mkdir(parents=True, exist_ok=True)
        rel = f"{label}/{i}.{'wav' if i < 3 else 'flac'}"
        pcm = (rng.normal(size=(800 + 50 * i, 2)) * 3000).astype(np.int16)
        soundfile.write(root / rel, pcm, 16000, subtype="PCM_16")
        clips[rel] = pcm.T
    (root / "no" / "zz_bad.wav").write_bytes(b"RIFF\x10\x00\x00\x00WAVEjunk")
    summary = convert(root, tmp_path / "s", audio_dtype="int16", encodings={"audio": "zstd"}, backend="thread", progress=False)
    assert summary.samples == 6 and [p for p, _ in summary.skipped] == [os.path.join("no", "zz_bad.wav")]
    store = open_store(tmp_path / "s")
    for i, rel in enumerate(sorted(clips)):
        np.testing.assert_array_equal(store[i]["audio"], clips[rel])
        assert int(store[i]["label"]) == (rel.startswith("yes"))


def test_convert_refuses_an_existing_store_unless_told_to_overwrite(image_folder, tmp_path, no_leaks):
    root, _ = image_folder
    convert(root, tmp_path / "s", size=(8, 8), backend="serial", progress=False)
    with pytest.raises(StoreError, match="already exists.*overwrite"):
        convert(root, tmp_path / "s", size=(8, 8), backend="serial", progress=False)
    convert(root, tmp_path / "s", size=(4, 4), backend="serial", progress=False, overwrite=True)
    assert open_store(tmp_path / "s").fields["image"].shape == [4, 4, 3]


def test_convert_of_a_folder_without_media_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("x")
    with pytest.raises(StoreError, match="holds no images"):
        convert(tmp_path / "empty", tmp_path / "s", progress=False)


def test_an_interrupted_convert_leaves_no_store(image_folder, tmp_path, monkeypatch, no_leaks):
    root, _ = image_folder
    from feedline.store import StoreWriter

    def interrupted(self, rows):
        raise KeyboardInterrupt  # Ctrl-C while writing

    monkeypatch.setattr(StoreWriter, "write_rows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert(root, tmp_path / "s", backend="serial", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["photos"]


def test_a_killed_convert_leaves_a_temp_dir_that_the_next_run_removes(image_folder, tmp_path, no_leaks):
    root, _ = image_folder
    dst = tmp_path / "s"
    slow = (
        "import time, feedline.store._convert as c\n"
        "call = c.Decode.__call__\n"
        "def slow(self, sample):\n"
        "    time.sleep(0.2)\n"
        "    return call(self, sample)\n"
        "c.Decode.__call__ = slow\n"
        f"c.convert({str(root)!r}, {str(dst)!r}, backend='serial', rows_per_file=1, progress=False)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", slow])
    try:
        deadline = time.monotonic() + 60
        while not any(name.startswith("s.tmp-") for name in os.listdir(tmp_path)):
            assert child.poll() is None, "convert finished before it could be killed"
            assert time.monotonic() < deadline, "the writer's temporary directory never appeared"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    with pytest.raises(StoreError, match="no feedline store"):
        open_store(dst)
    convert(root, dst, backend="serial", progress=False)
    assert sorted(os.listdir(tmp_path)) == ["photos", "s"] and len(open_store(dst)) == 20


def test_convert_and_inspect_commands_print_their_reports(image_folder, tmp_path, capsys, no_leaks):
    root, _ = image_folder
    assert run_cli("convert", root, tmp_path / "s", "--size", "12x10", "--center-crop", "--encoding", "image=png",
                   "--backend", "thread", "--no-progress") == 0
    out = capsys.readouterr().out
    assert "20 image samples" in out and "per sample" in out and "skipped 1 files" in out
    assert open_store(tmp_path / "s").fields["image"].shape == [12, 10, 3]
    assert run_cli("inspect", tmp_path / "s", "--samples", "2") == 0
    out = capsys.readouterr().out
    assert "samples:   20" in out and "image            uint8 array (12, 10, 3), png" in out
    assert "[1] {'image': uint8[12, 10, 3], 'label': int64" in out and '"classes": ["cat", "dog"]' not in out
    assert 'classes: ["cat", "dog"]' in out
    with pytest.raises(SystemExit, match="--encoding takes FIELD=ENCODING"):
        run_cli("convert", root, tmp_path / "t", "--encoding", "jpeg")
    with pytest.raises(SystemExit, match="incomplete|no feedline store"):
        run_cli("inspect", tmp_path / "nothing")


def test_feedline_command_line_runs_convert_when_registered(image_folder, tmp_path):
    root, _ = image_folder
    result = subprocess.run([sys.executable, "-m", "feedline.cli", "convert", str(root), str(tmp_path / "s"), "--size", "8x8",
                             "--no-progress"], capture_output=True, text=True, check=False)
    if result.returncode == 2 and "invalid choice" in result.stderr:
        pytest.skip("feedline.cli does not register the store commands yet (request in the store's notes)")
    assert result.returncode == 0, result.stderr
    assert len(open_store(tmp_path / "s")) == 20
