"""Store integrity: checksums written with the store, `feedline inspect --verify`, verify on read, a real full disk."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("xxhash")

import feedline as fl
from feedline.cli import main
from feedline.store import StoreError, StoreWriter, open_store, verify_store

N = 400
SHAPE = (32, 32, 3)


def write_store(path) -> dict:
    """400 rows of a raw image, a zstd mask and a label, in 2 part files of several record batches each.

    The zstd field makes the writer cut record batches of ~1 MB (146 rows
    here), so each part file holds 2 record batches (146 and 54 rows).
    """
    rng = np.random.default_rng(0)
    data = {
        "image": rng.integers(0, 256, (N, *SHAPE), dtype=np.uint8),
        "mask": rng.integers(0, 4, (N, 64, 64), dtype=np.uint8),
        "label": np.arange(N, dtype=np.int64),
    }
    with StoreWriter(path, encodings={"mask": "zstd"}, rows_per_file=200) as w:
        for start in range(0, N, 50):
            w.write({k: v[start : start + 50] for k, v in data.items()})
    return data


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    path = tmp_path_factory.mktemp("integrity") / "pristine.store"
    data = write_store(path)
    return path, data


@pytest.fixture
def store_copy(pristine, tmp_path):
    """A fresh copy of the pristine store for a test to damage."""
    import shutil

    src, data = pristine
    dst = tmp_path / "copy.store"
    shutil.copytree(src, dst)
    return dst, data


def manifest(path) -> dict:
    return json.loads((path / "manifest.json").read_text())


def batch_rows(path, part: int, batch: int) -> tuple[int, int]:
    entry = manifest(path)["files"][part]
    start = entry["rows"][0] + sum(entry["batches"][:batch])
    return start, start + entry["batches"][batch]


def flip_bytes(path, part: int, group: str, batch: int | None, count: int = 8) -> None:
    """Flip ``count`` bytes in the middle of record batch ``batch`` (None: in the footer) of a part file, in place."""
    entry = manifest(path)["files"][part]["files"][group]
    offsets = entry["checksums"]["offsets"]
    start, stop = (offsets[batch], offsets[batch + 1]) if batch is not None else (offsets[-1], entry["bytes"])
    target = path / entry["name"]
    with open(target, "r+b") as f:
        f.seek((start + stop) // 2)
        chunk = bytearray(f.read(count))
        f.seek((start + stop) // 2)
        f.write(bytes(b ^ 0xFF for b in chunk))


def run_cli(*argv) -> int:
    return main([str(a) for a in argv])


def strip_checksums(path) -> None:
    """Make the manifest what a format-version-1 writer wrote: no checksums anywhere."""
    m = manifest(path)
    m["format_version"] = 1
    del m["checksum"], m["manifest_checksum"]
    for part in m["files"]:
        for entry in part["files"].values():
            del entry["checksums"]
    (path / "manifest.json").write_text(json.dumps(m, indent=1))


# ------------------------------------------------------------ what the writer records
def test_the_writer_records_a_checksum_per_record_batch_of_every_file(pristine):
    path, _ = pristine
    m = manifest(path)
    assert m["format_version"] == 2 and m["checksum"] == "xxh3_64" and m["manifest_checksum"]
    assert len(m["files"]) == 2 and m["groups"] == ["raw", "zstd"]
    for part in m["files"]:
        assert len(part["batches"]) >= 2
        for entry in part["files"].values():
            checks = entry["checksums"]
            assert len(checks["batches"]) == len(part["batches"]) and len(checks["offsets"]) == len(part["batches"]) + 1
            assert checks["offsets"] == sorted(checks["offsets"]) and checks["offsets"][-1] < entry["bytes"]


# ------------------------------------------------------------ inspect --verify
def test_an_undamaged_store_passes_inspect_verify(pristine, capsys):
    path, _ = pristine
    assert run_cli("inspect", path, "--verify", "--samples", "1") == 0
    out = capsys.readouterr().out
    assert "4 files" in out and "ok: every byte matches" in out and "DAMAGED" not in out
    assert "checksums: xxh3_64 per record batch" in out and "samples:   400" in out


def test_inspect_verify_names_the_damaged_file_and_its_rows(store_copy, capsys):
    path, _ = store_copy
    flip_bytes(path, part=1, group="raw", batch=1)
    start, stop = batch_rows(path, 1, 1)
    assert run_cli("inspect", path, "--verify") == 1
    out = capsys.readouterr().out
    assert f"DAMAGED: raw/part-00001.arrow, record batch 1 (rows {start}-{stop - 1}); fields image, label" in out
    assert out.count("DAMAGED") == 1 and "copy the store again" in out
    assert "samples:" not in out  # no description of a damaged store


def test_a_damaged_compressed_file_and_footer_are_each_named(store_copy):
    path, _ = store_copy
    flip_bytes(path, part=0, group="zstd", batch=1)
    flip_bytes(path, part=1, group="raw", batch=None)
    report = verify_store(path)
    found = sorted(region.describe() for region in report.damaged)
    assert found == ["raw/part-00001.arrow, footer (rows 200-399)", "zstd/part-00000.arrow, record batch 1 (rows 146-199)"]
    assert not report.ok and "fields mask" in str(report)


def test_an_edited_manifest_is_reported_by_verify_and_refused_by_verify_on_read(store_copy):
    path, _ = store_copy
    m = manifest(path)
    m["meta"]["classes"] = ["cat", "dog"]  # what a hand edit or a damaged byte could do: still valid JSON
    (path / "manifest.json").write_text(json.dumps(m))
    report = verify_store(path)
    assert not report.ok and not report.damaged and "manifest.json does not match its checksum" in str(report)
    with pytest.raises(StoreError, match="manifest of the store .* does not match its checksum"):
        open_store(path, verify=True)
    assert len(open_store(path)) == N  # without verify it reads, as before checksums


def test_every_byte_of_a_file_is_covered_a_flip_anywhere_is_found_in_its_region(store_copy):
    path, _ = store_copy
    entry = manifest(path)["files"][1]["files"]["zstd"]
    offsets, size = entry["checksums"]["offsets"], entry["bytes"]
    target = path / entry["name"]
    original = target.read_bytes()
    edges = {0, size - 1, *offsets, *(o - 1 for o in offsets), *np.linspace(0, size - 1, 40).astype(int).tolist()}
    positions = sorted(p for p in edges if 0 <= p < size)  # both sides of every region boundary, and 40 between
    for position in positions:
        damaged = bytearray(original)
        damaged[position] ^= 0x01  # one bit
        target.write_bytes(bytes(damaged))
        found = verify_store(path).damaged
        batch = int(np.searchsorted(offsets, position, side="right")) - 1
        expected = "header" if batch < 0 else "footer" if batch == len(offsets) - 1 else f"record batch {batch}"
        assert [(r.file, r.what) for r in found] == [("zstd/part-00001.arrow", expected)], position
    target.write_bytes(original)
    assert verify_store(path).ok


# ------------------------------------------------------------ verify on read
def test_verify_on_read_raises_naming_the_file_and_rows(store_copy):
    path, data = store_copy
    flip_bytes(path, part=0, group="raw", batch=1)
    start, stop = batch_rows(path, 0, 1)
    plain = open_store(path)
    read = np.stack([plain[i]["image"] for i in range(start, stop)])
    assert not np.array_equal(read, data["image"][start:stop])  # without verify the damage reads back silently
    store = open_store(path, verify=True)
    np.testing.assert_array_equal(store[start - 1]["image"], data["image"][start - 1])  # the batch before: intact
    np.testing.assert_array_equal(store[stop]["image"], data["image"][stop])  # the batch after, same file
    with pytest.raises(StoreError, match=rf"damaged: raw/part-00000\.arrow, record batch 1 \(rows {start}-{stop - 1}\).*inspect --verify"):
        store[start + 3]
    with pytest.raises(StoreError, match=rf"rows {start}-{stop - 1}"):
        store.gather([0, stop - 1])


def test_verify_on_read_in_process_workers_names_the_file_and_rows(store_copy, no_leaks):
    path, _ = store_copy
    flip_bytes(path, part=1, group="zstd", batch=0)
    start, stop = batch_rows(path, 1, 0)
    pipe = fl.from_store(path, verify=True).map(lambda s: s["label"], backend="process", workers=2).batch(50)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    text = str(info.value)
    assert "zstd/part-00001.arrow, record batch 0" in text and f"rows {start}-{stop - 1}" in text
    with fl.from_store(path, verify=True).batch(25) as pipe, pytest.raises(fl.FeedlineError, match=rf"rows {start}-{stop - 1}"):
        list(pipe)  # the bulk gather path too


def test_verify_on_read_gives_the_same_batches_on_an_intact_store(pristine, backend, no_leaks):
    path, data = pristine
    with fl.from_store(path, verify=True).map(lambda s: s, backend=backend, workers=2).batch(64) as pipe:
        labels = np.concatenate([b["label"] for b in pipe])
        assert "verify=True" in str(pipe)
    np.testing.assert_array_equal(labels, data["label"])


def test_verify_checks_each_record_batch_once_per_process(store_copy):
    path, data = store_copy
    store = open_store(path, verify=True)
    start, stop = batch_rows(path, 0, 1)
    np.testing.assert_array_equal(store[start]["image"], data["image"][start])  # checked and cached
    flip_bytes(path, part=0, group="raw", batch=1)  # damaged after the check, through the same mapping
    store[start + 1]  # no second check of a record batch already verified: no per-row cost
    with pytest.raises(StoreError, match="rows"):
        open_store(path, verify=True)[start]  # a new reader (another process) checks again


# ------------------------------------------------------------ stores without checksums
def test_a_store_without_checksums_still_reads_and_says_it_has_none(store_copy, capsys):
    path, data = store_copy
    strip_checksums(path)
    store = open_store(path)
    np.testing.assert_array_equal(store[399]["image"], data["image"][399])
    with fl.from_store(path).batch(100) as pipe:
        assert sum(len(b["label"]) for b in pipe) == N
    assert run_cli("inspect", path, "--samples", "0") == 0
    assert "checksums: none (format version 1" in capsys.readouterr().out
    assert run_cli("inspect", path, "--verify") == 1
    out = capsys.readouterr().out
    assert "sizes and Arrow structure only" in out and "cannot verify the contents" in out and "DAMAGED" not in out
    with pytest.raises(StoreError, match="has no checksums .*verify=True cannot check it"):
        fl.from_store(path, verify=True)


def test_verify_without_checksums_still_finds_a_file_that_does_not_parse(store_copy):
    path, _ = store_copy
    strip_checksums(path)
    target = path / "raw" / "part-00000.arrow"
    data = bytearray(target.read_bytes())
    data[-12:-6] = b"\x00" * 6  # the footer's length: the file no longer parses
    target.write_bytes(bytes(data))
    report = verify_store(path)
    assert [r.file for r in report.damaged] == ["raw/part-00000.arrow"] and "unreadable as Arrow IPC" in report.damaged[0].what


# ------------------------------------------------------------ a real full disk
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux), whose writes fail with ENOSPC")
@pytest.mark.parametrize("rows", [2, 200], ids=["fails-when-the-file-is-closed", "fails-while-writing"])
def test_a_real_full_disk_raises_store_error_naming_the_store_and_leaves_nothing(tmp_path, rows):
    # Fault injection by the kernel: the writer's first part file is a link to /dev/full, so every write
    # that reaches the disk fails with ENOSPC, as on a full disk (buffered writes fail later, when flushed).
    path = tmp_path / "full.store"
    writer = StoreWriter(path)
    os.mkdir(os.path.join(writer.tmp, "raw"))
    os.symlink("/dev/full", os.path.join(writer.tmp, "raw", "part-00000.arrow"))
    batch = {"image": np.zeros((rows, 64, 64, 3), np.uint8)}  # 2 rows stay in the 1 MiB buffer; 200 rows overflow it
    with pytest.raises(StoreError) as info, writer:
        writer.write(batch)
    text = str(info.value)
    assert "part-00000.arrow" in text and str(path) in text and "No space left" in text
    assert "free disk space, or choose a path on another disk" in text and "temporary directory is removed" in text
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []  # no store, no temporary directory


# ------------------------------------------------------------ the optional dependency
def test_missing_xxhash_names_the_extra_when_writing_and_verifying_but_plain_reads_work(pristine, tmp_path):
    path, _ = pristine
    prelude = "import sys; sys.modules['xxhash'] = None; import numpy as np, feedline as fl; from feedline.store import StoreWriter; "
    runs = {
        "write": f"StoreWriter({str(tmp_path / 'new.store')!r})",
        "verify": f"fl.from_store({str(path)!r}, verify=True).epoch(0)",
        "read": f"print(len(list(fl.from_store({str(path)!r}).batch(100))))",
    }
    results = {name: subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, check=False)
               for name, code in runs.items()}
    for name in ("write", "verify"):
        assert results[name].returncode != 0, name
        assert "checksums needs xxhash" in results[name].stderr and "pip install 'feedline[store]'" in results[name].stderr
    assert results["read"].returncode == 0 and results["read"].stdout.strip() == "4", results["read"].stderr
