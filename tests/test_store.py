"""The Arrow store: round trips, zero-copy reads, every backend, crash safety, damaged stores, interop."""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("pyarrow")

from conftest import snapshot

import feedline as fl
from feedline import testing
from feedline.store import FORMAT_VERSION, StoreError, StoreWriter, _reader, _writer, open_store


def images(n: int, seed: int = 0, shape=(12, 10, 3)) -> np.ndarray:
    """Smooth images (so JPEG round trips are close) with a little noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0 : shape[0], 0 : shape[1]]
    base = (x * 7 + y * 5)[None, :, :, None] + rng.integers(0, 40, (n, 1, 1, shape[2]))
    return np.clip(base + rng.integers(0, 4, (n, *shape)), 0, 255).astype(np.uint8)


def write_store(path, n=40, rows_per_file=16, batch=7, encodings=None, shape=(12, 10, 3)):
    """A store of ``{"image", "label", "name"}`` written in uneven batches; returns what was written."""
    data = {"image": images(n, shape=shape), "label": np.arange(n) * 3, "name": [f"sample-{i}" for i in range(n)]}
    with StoreWriter(path, encodings=encodings, rows_per_file=rows_per_file, meta={"test": True}) as w:
        for start in range(0, n, batch):
            w.write({k: v[start : start + batch] for k, v in data.items()})
    return data


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "train.store"
    write_store(path)
    return path


# ------------------------------------------------------------ round trips
def test_every_kind_of_field_round_trips(tmp_path):
    rng = np.random.default_rng(1)
    n = 9
    imgs = images(n)
    audio = [rng.normal(size=(2, 5 + 3 * i)).astype(np.float32) for i in range(n)]
    rows = [
        {
            "image": imgs[i],
            "mask_png": imgs[i][..., 0],
            "photo_jpeg": imgs[i],
            "audio": audio[i],
            "label": i,
            "weight": float(i) / 2,
            "flag": i % 2 == 0,
            "id": np.int32(100 + i),
            "text": f"café {i}",
            "blob": bytes(range(i)),
            "pair": (np.full(3, i, np.int16), np.float32(i)),
        }
        for i in range(n)
    ]
    path = tmp_path / "all.store"
    with StoreWriter(path, encodings={"mask_png": "png", "photo_jpeg": "jpeg:95", "audio": "zstd", "text": "lz4"}) as w:
        w.write_rows(rows[:4])
        w.write_rows(rows[4:])
    store = open_store(path)
    assert len(store) == n
    for i, row in enumerate(rows):
        got = store[i]
        assert list(got) == list(row)
        np.testing.assert_array_equal(got["image"], row["image"])
        np.testing.assert_array_equal(got["mask_png"], row["mask_png"])  # PNG is lossless
        assert got["photo_jpeg"].shape == row["photo_jpeg"].shape and got["photo_jpeg"].dtype == np.uint8
        assert np.abs(got["photo_jpeg"].astype(int) - row["photo_jpeg"]).mean() < 4  # JPEG is close
        np.testing.assert_array_equal(got["audio"], row["audio"])
        assert got["audio"].dtype == np.float32
        assert type(got["label"]) is int and got["label"] == i
        assert type(got["weight"]) is float and got["weight"] == i / 2
        assert type(got["flag"]) is bool and got["flag"] == (i % 2 == 0)
        assert got["id"].dtype == np.int32 and got["id"] == 100 + i
        assert got["text"] == f"café {i}" and got["blob"] == bytes(range(i))
        assert isinstance(got["pair"], tuple)
        np.testing.assert_array_equal(got["pair"][0], row["pair"][0])
        assert got["pair"][1] == np.float32(i)
    assert [f["name"] for f in store.manifest["fields"]] == list(store.fields) == [
        "image", "mask_png", "photo_jpeg", "audio", "label", "weight", "flag", "id", "text", "blob", "pair/0", "pair/1"]


@pytest.mark.parametrize("sample", ["tuple", "single"])
def test_tuple_and_single_array_samples_keep_their_structure(tmp_path, sample):
    x = images(5)
    path = tmp_path / "s.store"
    with StoreWriter(path) as w:
        w.write((x, np.arange(5)) if sample == "tuple" else x)
    store = open_store(path)
    got = store[3]
    if sample == "tuple":
        assert isinstance(got, tuple) and list(store.fields) == ["0", "1"]
        np.testing.assert_array_equal(got[0], x[3])
        assert got[1] == 3
    else:
        assert isinstance(got, np.ndarray) and list(store.fields) == ["value"]
        np.testing.assert_array_equal(got, x[3])


def test_big_endian_and_bool_arrays_come_back_equal(tmp_path):
    x = np.arange(24, dtype=">i4").reshape(4, 6)
    b = np.arange(24).reshape(4, 2, 3) % 3 == 0
    with StoreWriter(tmp_path / "e.store") as w:
        w.write({"x": x, "b": b})
    store = open_store(tmp_path / "e.store")
    for i in range(4):
        np.testing.assert_array_equal(store[i]["x"], x[i])
        assert store[i]["b"].dtype == np.bool_
        np.testing.assert_array_equal(store[i]["b"], b[i])
    assert store.fields["x"].dtype == "<i4"
    batch = store.gather([3, 0, 2])
    assert batch["b"].dtype == np.bool_ and batch["x"].dtype == np.dtype("<i4")
    np.testing.assert_array_equal(batch["b"], b[[3, 0, 2]])
    np.testing.assert_array_equal(batch["x"], x[[3, 0, 2]])


def test_fixed_shape_arrays_are_read_only_views_of_the_mapped_file(store_path):
    store = open_store(store_path)
    first, again = store[5]["image"], store[5]["image"]
    assert not first.flags.writeable and not first.flags.owndata
    assert first.ctypes.data == again.ctypes.data  # the same bytes of the mapping, not a copy per read
    with pytest.raises(ValueError, match="read-only"):
        first[0, 0, 0] = 1


def test_gather_returns_rows_in_the_order_asked_across_files(tmp_path):
    path = tmp_path / "g.store"
    data = write_store(path, n=40, rows_per_file=16)
    store = open_store(path)
    assert len(store.manifest["files"]) == 3
    order = [39, 0, 17, 16, 15, 33, 2]
    batch = store.gather(order)
    np.testing.assert_array_equal(batch["image"], data["image"][order])
    np.testing.assert_array_equal(batch["label"], data["label"][order])
    assert batch["name"] == [f"sample-{i}" for i in order]
    one_file = store.gather([3, 1, 2])  # all in one record batch: the bulk np.take path
    np.testing.assert_array_equal(one_file["image"], data["image"][[3, 1, 2]])
    assert batch["image"].flags.writeable  # a gathered batch is the caller's own memory, not the mapped file
    batch["image"][:] = 0
    batch["label"][:] = -1
    again = store.gather(order)
    np.testing.assert_array_equal(again["image"], data["image"][order])
    np.testing.assert_array_equal(again["label"], data["label"][order])



def record_batches(store) -> int:
    """The record batches of a store's part files, as its manifest lists them."""
    return sum(len(part["batches"]) for part in store.manifest["files"])


def nested_store(path, n=90):
    """A store of nested samples in 5 files of many small record batches; returns what was written."""
    rng = np.random.default_rng(3)
    data = {"image": rng.integers(0, 255, (n, 4, 5, 3), dtype=np.uint8),
            "meta": {"label": np.arange(n, dtype=np.int64) * 7, "weight": rng.random(n).astype(np.float32),
                     "vec": rng.standard_normal((n, 6)), "name": [f"s{i}" for i in range(n)],
                     "points": [np.arange(i % 4 + 1, dtype=np.int16) for i in range(n)]}}
    with StoreWriter(path, rows_per_file=18, rows_per_batch=4) as w:
        for start in range(0, n, 11):
            w.write({"image": data["image"][start:start + 11],
                     "meta": {k: v[start:start + 11] for k, v in data["meta"].items()}})
    return data


def assert_gathered(store, data, order, gather=lambda store, order: store.gather(order)):
    batch = gather(store, order)
    np.testing.assert_array_equal(batch["image"], data["image"][order])
    for key in ("label", "weight", "vec"):
        np.testing.assert_array_equal(batch["meta"][key], data["meta"][key][order])
        assert batch["meta"][key].dtype == data["meta"][key].dtype
    assert batch["meta"]["name"] == [data["meta"]["name"][i] for i in order]  # variable-size: one value per row
    assert [p.tolist() for p in batch["meta"]["points"]] == [data["meta"]["points"][i].tolist() for i in order]


@pytest.fixture(params=["one fancy index", "per record batch", "row by row"])
def copy_path(request):
    """Every way a gather copies fixed-size rows, as ``gather(store, order)``.

    Into new arrays (no ``alloc``): one fancy index over every record
    batch. Into arrays ``alloc`` gives: small rows per record batch, large
    ones row by row.
    """
    if request.param == "one fancy index":
        return lambda store, order: store.gather(order)
    into_given = lambda store, order: store.gather(order, alloc=lambda specs: [np.full(s, 1, d) for s, d in specs])  # noqa: E731
    if request.param == "row by row":
        def row_by_row(store, order):
            with testing.mechanism_policy(gather_row_by_row=0):
                return into_given(store, order)
        return row_by_row
    return into_given


def test_gather_across_many_files_and_record_batches_is_exact(tmp_path, copy_path):
    data = nested_store(tmp_path / "n.store")
    store = open_store(tmp_path / "n.store")
    assert len(store.manifest["files"]) == 5 and record_batches(store) == 25
    rng = np.random.default_rng(0)
    for order in (rng.permutation(90).tolist(), rng.permutation(90)[:17].tolist(), list(range(89, -1, -3))):
        assert_gathered(store, data, order, copy_path)


@pytest.mark.parametrize("count", [256, 200, 501])
def test_a_batch_of_image_rows_is_gathered_exactly_in_pieces_or_whole(tmp_path, count):
    """Rows cut into pieces (so NumPy copies without the GIL) come back whole, in order, across record batches."""
    images = np.random.default_rng(5).integers(0, 255, (600, 3, 16, 16), dtype=np.uint8)  # 768-byte rows
    with StoreWriter(tmp_path / "i.store", rows_per_file=250, rows_per_batch=26) as w:
        w.write({"image": images, "label": np.arange(600)})
    store = open_store(tmp_path / "i.store")
    assert record_batches(store) == 10 + 10 + 4  # files of 250, 250 and 100 rows, in batches of 26 and the rest
    assert _reader._pieces(count, 768) == {256: 2, 200: 3, 501: 1}[count]
    order = np.random.default_rng(count).integers(0, 600, count)
    batch = store.gather(order)
    np.testing.assert_array_equal(batch["image"], images[order])
    np.testing.assert_array_equal(batch["label"], order)


def test_gather_with_repeated_indices_and_an_empty_batch(tmp_path, copy_path):
    data = nested_store(tmp_path / "n.store")
    store = open_store(tmp_path / "n.store")
    assert_gathered(store, data, [5, 80, 5, 5, 40, 80, 0, 0], copy_path)  # the same row from several record batches, again
    assert_gathered(store, data, [33, 33, 33], copy_path)  # one record batch, repeated
    empty = copy_path(store, [])
    assert empty["image"].shape == (0, 4, 5, 3) and empty["meta"]["label"].shape == (0,)
    assert empty["meta"]["name"] == [] and empty["meta"]["points"] == []


def test_gather_writes_into_the_arrays_alloc_gives(tmp_path, copy_path):
    data = nested_store(tmp_path / "n.store")
    store = open_store(tmp_path / "n.store")
    order = [70, 3, 44, 21, 88, 9]
    given = []

    def alloc(specs):
        given.extend(np.full(shape, 1, dtype) for shape, dtype in specs)
        return given

    batch = store.gather(order, alloc=alloc)
    assert batch["image"] is given[0]  # filled in place, as a process worker's shared memory is
    np.testing.assert_array_equal(given[0], data["image"][order])
    np.testing.assert_array_equal(batch["meta"]["vec"], data["meta"]["vec"][order])


def test_shuffled_bulk_batches_across_record_batches_match_numpy(tmp_path):
    data = nested_store(tmp_path / "n.store")
    pipe = fl.from_store(tmp_path / "n.store").shuffle(seed=2).batch(16)
    with pipe:
        seen = []
        for batch in pipe:
            labels = batch["meta"]["label"] // 7
            np.testing.assert_array_equal(batch["image"], data["image"][labels])
            np.testing.assert_array_equal(batch["meta"]["vec"], data["meta"]["vec"][labels])
            seen.extend(labels.tolist())
    assert sorted(seen) == list(range(90)) and seen != list(range(90))

def test_write_rows_and_write_make_the_same_store(tmp_path):
    x, y = images(6), np.arange(6)
    with StoreWriter(tmp_path / "a") as w:
        w.write({"x": x, "y": y})
    with StoreWriter(tmp_path / "b") as w:
        w.write_rows([{"x": x[i], "y": y[i]} for i in range(6)])
    a, b = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    assert a.manifest["fields"] == b.manifest["fields"]
    assert snapshot(a.gather(range(6))) == snapshot(b.gather(range(6)))


def test_compressed_fields_are_smaller_and_read_the_same(tmp_path):
    sizes = {}
    for encoding in ("raw", "zstd", "lz4"):
        data = write_store(tmp_path / encoding, encodings={"image": encoding}, rows_per_file=40, shape=(32, 32, 3))
        store = open_store(tmp_path / encoding)
        np.testing.assert_array_equal(store.gather(range(40))["image"], data["image"])
        sizes[encoding] = sum(f["files"][g]["bytes"] for f in store.manifest["files"] for g in f["files"])
        groups = {"raw": ["raw"], "zstd": ["raw", "zstd"], "lz4": ["raw", "lz4"]}[encoding]
        assert store.manifest["groups"] == groups
    assert sizes["zstd"] < sizes["raw"] and sizes["lz4"] < sizes["raw"]


def test_variable_shape_images_can_be_jpeg_encoded(tmp_path):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 255, (8 + i, 10 + 2 * i, 3), dtype=np.uint8) for i in range(5)]
    with StoreWriter(tmp_path / "v", encodings={"image": "png"}, variable_shape=["image"]) as w:
        w.write({"image": imgs, "label": np.arange(5)})
    store = open_store(tmp_path / "v")
    assert store.fields["image"].kind == "ragged"
    for i in range(5):
        np.testing.assert_array_equal(store[i]["image"], imgs[i])
    assert [a.shape for a in store.gather([4, 0])["image"]] == [imgs[4].shape, imgs[0].shape]


def test_empty_store_has_no_samples(tmp_path):
    with StoreWriter(tmp_path / "empty"):
        pass
    assert len(open_store(tmp_path / "empty")) == 0


# ------------------------------------------------------------ pipelines
def test_every_sample_exactly_once_on_every_backend_with_shuffle_and_shard(store_path, backend, no_leaks):
    seen = []
    for rank in range(2):
        pipe = fl.from_store(store_path).shuffle(seed=3).shard(rank, 2).map(lambda s: s, backend=backend, workers=2).batch(4)
        with pipe:
            for batch in pipe:
                seen.extend(int(v) // 3 for v in batch["label"])
    assert sorted(seen) == list(range(40))


def test_batches_are_identical_on_every_backend_with_and_without_map(store_path, backend, no_leaks):
    def flip(sample, rng):
        return {"image": sample["image"][:, ::-1] if rng.random() < 0.5 else sample["image"], "label": sample["label"]}

    reference = [snapshot(b) for b in fl.from_store(store_path).shuffle(seed=1).map(flip, backend="serial").batch(8)]
    with fl.from_store(store_path).shuffle(seed=1).map(flip, backend=backend, workers=2).batch(8) as pipe:
        assert [snapshot(b) for b in pipe] == reference
    gathered = fl.from_store(store_path).shuffle(seed=1).batch(8)  # no per-sample step: bulk gathers
    serial = [snapshot({"image": b["image"], "label": b["label"]}) for b in gathered]
    with fl.from_store(store_path).shuffle(seed=1).map(lambda s: s, backend=backend, workers=2).batch(8) as pipe:
        assert [snapshot({"image": b["image"], "label": b["label"]}) for b in pipe] == serial


def test_store_pipeline_resumes_mid_epoch(store_path, no_leaks):
    pipe = fl.from_store(store_path).shuffle(seed=0).batch(6)
    full = [snapshot(b["image"]) for b in pipe.epoch(0)]
    it = pipe.epoch(0)
    next(it), next(it)
    state = json.loads(json.dumps(it.state()))
    assert [snapshot(b["image"]) for b in fl.from_store(store_path).shuffle(seed=0).batch(6).resume(state)] == full[2:]


def test_store_pickles_as_path_and_manifest_only(tmp_path):
    path = tmp_path / "big.store"
    with StoreWriter(path) as w:
        w.write(np.zeros((64, 128, 128, 3), np.uint8))  # 3 MiB of data
    store = open_store(path)
    store.gather(range(64))  # caches filled: they must not travel
    payload = pickle.dumps(store)
    assert len(payload) < 4096
    copy = pickle.loads(payload)
    assert copy.path == store.path and len(copy) == 64 and copy[63].shape == (128, 128, 3)


# ------------------------------------------------------------ crash safety
def test_an_exception_while_writing_leaves_no_store_and_no_temp_dir(tmp_path):
    path = tmp_path / "crash.store"
    with pytest.raises(RuntimeError, match="boom"), StoreWriter(path, rows_per_file=4) as w:
        w.write({"x": images(10)})
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


def test_a_directory_without_manifest_is_reported_incomplete(tmp_path):
    path = tmp_path / "half.store"
    w = StoreWriter(path, rows_per_file=4)
    w.write({"x": images(10)})
    os.rename(w.tmp, path)  # what a reader would find had the writer been killed before its manifest
    with pytest.raises(StoreError, match="incomplete.*no manifest.json"):
        fl.from_store(path)


def test_a_writer_removes_the_temp_dir_of_a_writer_that_died(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"x.store.tmp-{dead.pid}-deadbeef"
    stale.mkdir()
    (stale / "raw").mkdir()
    mine = tmp_path / f"x.store.tmp-{os.getpid()}-cafecafe"  # a live writer's: kept
    mine.mkdir()
    with StoreWriter(tmp_path / "x.store") as w:
        w.write(np.zeros((2, 2)))
    assert not stale.exists() and mine.exists()


def test_disk_full_while_writing_leaves_no_store_that_looks_complete(tmp_path, monkeypatch):
    written = {"bytes": 0}
    real_write = _writer._FileSink.write

    def write_until_full(self, data):  # fault injection: the disk fills after 64 KiB
        if written["bytes"] + len(data) > 64 << 10:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        written["bytes"] += len(data)
        return real_write(self, data)

    monkeypatch.setattr(_writer._FileSink, "write", write_until_full)
    path = tmp_path / "full.store"
    with pytest.raises(StoreError, match="No space left.*free disk space") as info, StoreWriter(path, rows_per_file=8) as w:
        for _ in range(20):
            w.write({"x": images(8, shape=(32, 32, 3))})
    assert isinstance(info.value.__cause__, OSError) and info.value.__cause__.errno == errno.ENOSPC
    assert os.listdir(tmp_path) == []


def test_overwrite_replaces_an_existing_store(tmp_path):
    path = tmp_path / "o.store"
    write_store(path, n=10)
    with pytest.raises(StoreError, match="already exists.*overwrite=True"):
        StoreWriter(path)
    with StoreWriter(path, overwrite=True) as w:
        w.write({"y": np.arange(3)})
    assert len(open_store(path)) == 3 and list(open_store(path).fields) == ["y"]
    assert sorted(os.listdir(tmp_path)) == ["o.store"]


# ------------------------------------------------------------ damaged stores
def test_a_newer_format_version_is_refused_with_upgrade_advice(store_path):
    manifest_path = store_path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = FORMAT_VERSION + 1
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(StoreError, match=f"format version {FORMAT_VERSION + 1}.*pip install -U feedline"):
        open_store(store_path)


def test_a_missing_arrow_file_is_named(store_path):
    os.remove(store_path / "raw" / "part-00001.arrow")
    with pytest.raises(StoreError, match=r"missing its file 'raw.part-00001.arrow'.*write it again"):
        open_store(store_path)


def test_a_truncated_arrow_file_is_named(store_path):
    target = store_path / "raw" / "part-00002.arrow"
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError, match=r"part-00002.arrow.*truncated"):
        open_store(store_path)


def test_a_file_truncated_after_opening_is_named_when_a_worker_reads_it(store_path, no_leaks):
    pipe = fl.from_store(store_path).map(lambda s: s["label"], backend="process", workers=1).batch(8)
    target = store_path / "raw" / "part-00001.arrow"
    target.write_bytes(target.read_bytes()[:100])  # after from_store() checked the files
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert "part-00001.arrow" in str(info.value) and "truncated" in str(info.value)


# ------------------------------------------------------------ bad input
def test_batches_that_do_not_match_the_first_are_errors(tmp_path):
    with StoreWriter(tmp_path / "m") as w:
        w.write({"x": images(3), "y": np.arange(3)})
        with pytest.raises(StoreError, match="structure"):
            w.write({"x": images(3)})
        with pytest.raises(StoreError, match=r"field 'x'.*shape \(5, 5, 3\).*variable_shape"):
            w.write({"x": images(3, shape=(5, 5, 3)), "y": np.arange(3)})
        with pytest.raises(StoreError, match="different row counts"):
            w.write({"x": images(3), "y": np.arange(2)})


@pytest.mark.parametrize(
    "encodings, match",
    [({"nope": "zstd"}, "encodings name fields the data does not have"), ({"x": "gzip"}, "unknown encoding 'gzip'"),
     ({"y": "jpeg:90"}, "jpeg encoding is for image arrays"), ({"x": "jpeg:101"}, "quality must be 1-100")],
)
def test_bad_encodings_are_named(tmp_path, encodings, match):
    with pytest.raises((StoreError, ValueError), match=match), StoreWriter(tmp_path / "bad", encodings=encodings) as w:
        w.write({"x": images(2), "y": np.arange(2)})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("option", ["rows_per_file", "rows_per_batch"])
@pytest.mark.parametrize("rows", [0, -3, 2.5, True, "8"])
def test_row_counts_that_are_not_whole_numbers_of_one_or_more_are_refused_naming_the_argument(tmp_path, option, rows):
    with pytest.raises(StoreError, match=f"{option} must be an integer >= 1 or None, got {rows!r}"):
        StoreWriter(tmp_path / "r", **{option: rows})
    assert os.listdir(tmp_path) == []


def test_record_batches_hold_the_rows_asked_for_and_end_with_their_file(tmp_path):
    """``rows_per_batch``: each file's record batches hold that many rows but its last (cut at the file's end)."""
    with StoreWriter(tmp_path / "b.store", rows_per_file=10, rows_per_batch=4) as w:
        for start in range(0, 23, 5):  # writes that do not line up with the batches
            w.write({"x": images(min(5, 23 - start), seed=start)})
    store = open_store(tmp_path / "b.store")
    assert [part["batches"] for part in store.manifest["files"]] == [[4, 4, 2], [4, 4, 2], [3]]
    with StoreWriter(tmp_path / "big.store", rows_per_file=3, rows_per_batch=50) as w:  # at most a file's rows
        w.write({"x": images(7)})
    assert [part["batches"] for part in open_store(tmp_path / "big.store").manifest["files"]] == [[3], [3], [1]]


def test_values_a_store_cannot_hold_are_named(tmp_path):
    with pytest.raises(StoreError, match=r"field 'obj' holds a set .*Convert it in map"), StoreWriter(tmp_path / "o") as w:
        w.write_rows([{"x": 1, "obj": {1, 2}}])
    with pytest.raises(StoreError, match=r"field 'obj' holds an object array of shape \(2, 1\)"), StoreWriter(tmp_path / "o") as w:
        w.write({"obj": np.array([None, 1], dtype=object).reshape(2, 1)})


# ------------------------------------------------------------ interop
def test_pyarrow_polars_duckdb_and_datasets_read_a_store(tmp_path):
    import pyarrow.dataset as pads

    path = tmp_path / "interop.store"
    data = write_store(path, n=40, rows_per_file=16, encodings={"name": "zstd"})
    arrow_table = pads.dataset(str(path / "raw"), format="ipc").to_table()
    table = arrow_table
    assert table.column("label").to_pylist() == data["label"].tolist()
    first = np.asarray(table.column("image")[7].values).reshape(open_store(path).fields["image"].shape)
    np.testing.assert_array_equal(first, data["image"][7])
    names = pads.dataset(str(path / "zstd"), format="ipc").to_table()  # a compressed group reads the same way
    assert names.column("name").to_pylist() == data["name"]

    polars = pytest.importorskip("polars")
    frame = polars.scan_ipc(str(path / "raw" / "*.arrow")).filter(polars.col("label") >= 111).select("label").collect()
    assert frame["label"].to_list() == [111, 114, 117]
    duckdb = pytest.importorskip("duckdb")
    assert duckdb.sql("select count(*), sum(label) from arrow_table").fetchall() == [(40, int(data["label"].sum()))]
    datasets = pytest.importorskip("datasets")
    hf = datasets.Dataset(table)
    assert hf[7]["label"] == 21 and len(hf[7]["image"]) == data["image"][7].size


# ------------------------------------------------------------ optional dependency
def test_importing_feedline_does_not_import_pyarrow():
    code = "import sys, feedline, feedline.store; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_missing_pyarrow_names_the_extra_to_install(store_path):
    code = f"import sys; sys.modules['pyarrow'] = None; import feedline as fl; fl.from_store({str(store_path)!r})"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "pip install 'feedline[store]'" in result.stderr
