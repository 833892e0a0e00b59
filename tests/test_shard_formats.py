"""WebDataset, TFRecord and ArrayRecord files, read by index: exact contents, order, resume, damage.

The files are made here by the real writers: tar shards with `tarfile`
(JPEG and PNG members made by Pillow), TFRecords by TensorFlow (in a
subprocess, so that this process, and the reading, never import it),
ArrayRecord files by ``array_record``'s writer.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import struct
import subprocess
import sys
import tarfile
import textwrap
import warnings

import numpy as np
import pytest
from remote_servers import Faults, http_server, s3_server  # noqa: F401  (fixtures)

import feedline as fl
from feedline import SampleError
from feedline.sources import ShardFormatError

WDS_SHARDS = (7, 6, 7)  # samples per tar shard
TFR_FILES = (7, 6, 7)  # records per TFRecord file
AR_FILES = (9, 11)  # records per ArrayRecord file


# ------------------------------------------------------------ making the files
def pattern(i: int, shape=(12, 16, 3)) -> np.ndarray:
    """The image of sample ``i``: a gradient whose level depends on ``i`` (compresses well, decodes exactly as PNG)."""
    rows = np.arange(shape[0], dtype=np.int64)[:, None, None]
    return np.broadcast_to((rows * 7 + i * 11) % 256, shape).astype(np.uint8)


def encoded(i: int, fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(pattern(i)).save(out, fmt)
    return out.getvalue()


def add_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def wds_sample(i: int) -> dict:
    """The members of sample ``i`` (extension -> bytes), as written."""
    fields = {"jpg": encoded(i, "JPEG"), "cls": str(i % 5).encode(), "json": json.dumps({"i": i}).encode()}
    if i % 3 == 0:
        fields["seg.png"] = encoded(i, "PNG")
    return fields


def wds_key(i: int, shard: int) -> str:
    return f"val/s{i:04d}" if shard == 2 else f"s{i:04d}"


def write_shards(folder) -> list[dict]:
    """Three tar shards; returns the expected samples (bytes values), in order."""
    expected, i = [], 0
    for shard, count in enumerate(WDS_SHARDS):
        with tarfile.open(folder / f"shard-{shard:03d}.tar", "w") as tar:
            add_member(tar, "README", b"no dot: not a sample")  # left out, as WebDataset leaves it out
            add_member(tar, "__meta__", b"{}")
            folder_entry = tarfile.TarInfo("val")
            folder_entry.type = tarfile.DIRTYPE
            tar.addfile(folder_entry)
            for _ in range(count):
                key = wds_key(i, shard)
                for ext, data in wds_sample(i).items():
                    add_member(tar, f"{key}.{ext}", data)
                expected.append({"__key__": key, **wds_sample(i)})
                i += 1
    return expected


TF_WRITER = textwrap.dedent("""
    import io, sys
    import numpy as np
    import tensorflow as tf
    from PIL import Image

    folder, counts = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]

    def png(i):
        rows = np.arange(12, dtype=np.int64)[:, None, None]
        out = io.BytesIO()
        Image.fromarray(np.broadcast_to((rows * 7 + i * 11) % 256, (12, 16, 3)).astype(np.uint8)).save(out, "PNG")
        return out.getvalue()

    def example(i):
        return tf.train.Example(features=tf.train.Features(feature={
            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[i])),
            "pair": tf.train.Feature(float_list=tf.train.FloatList(value=[i, i / 4])),
            "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[png(i)])),
            "name": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"rec%d" % i])),
        })).SerializeToString()

    i = 0
    for number, count in enumerate(counts):
        with tf.io.TFRecordWriter(f"{folder}/train-{number:02d}.tfrecord") as w:
            for _ in range(count):
                w.write(example(i))
                i += 1
    for number in range(2):
        with tf.io.TFRecordWriter(f"{folder}/packed-{number}.tfrecord.gz", options="GZIP") as w:
            for k in range(5):
                w.write(b"gzip %d %d" % (number, k))
    with tf.io.TFRecordWriter(f"{folder}/packed.tfrecord.zz", options="ZLIB") as w:
        for k in range(300):  # more than one 64 kB read of compressed data
            w.write(b"zlib %d " % k + bytes(range(256)) * 3)
    print(sys.modules.get("tensorflow").__version__)
""")


def tfr_expected(i: int) -> dict:
    return {"label": [i], "pair": [i, i / 4], "name": [b"rec%d" % i]}


def write_array_records(folder) -> list[bytes]:
    from array_record.python.array_record_module import ArrayRecordWriter

    expected, i = [], 0
    for number, count in enumerate(AR_FILES):
        writer = ArrayRecordWriter(str(folder / f"part-{number}.array_record"), "group_size:1")
        for _ in range(count):
            record = json.dumps({"i": i, "text": f"record {i}"}).encode()
            writer.write(record)
            expected.append(record)
            i += 1
        writer.close()
    return expected


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    folder = tmp_path_factory.mktemp("wds")
    return folder, write_shards(folder)


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("writing TFRecords needs tensorflow (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("tfr")
    done = subprocess.run([sys.executable, "-c", TF_WRITER, str(folder), ",".join(map(str, TFR_FILES))],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


@pytest.fixture(scope="module")
def array_records(tmp_path_factory):
    pytest.importorskip("array_record.python.array_record_module", reason="needs array-record (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("ar")
    return folder, write_array_records(folder)


# ------------------------------------------------------------ one pipeline per format, for the shared checks
def wds_id(sample) -> int:
    return int(sample["__key__"][-4:])


def tfr_id(sample) -> int:
    return int(sample["label"][0])


def ar_id(record) -> int:
    return json.loads(record)["i"]


@pytest.fixture(params=["webdataset", "tfrecord", "array_record"])
def numbered(request):
    """(pipeline over one of the formats, function sample -> its number, number of samples)."""
    if request.param == "webdataset":
        folder, expected = request.getfixturevalue("shards")
        return fl.from_webdataset(str(folder / "shard-{000..002}.tar")), wds_id, len(expected)
    if request.param == "tfrecord":
        folder = request.getfixturevalue("tfrecords")
        return fl.from_tfrecord(str(folder / "train-*.tfrecord")), tfr_id, sum(TFR_FILES)
    folder, expected = request.getfixturevalue("array_records")
    return fl.from_array_record(str(folder)), ar_id, len(expected)


# ------------------------------------------------------------ WebDataset
def test_webdataset_groups_members_by_key_as_webdataset_does(shards, no_leaks):
    folder, expected = shards
    with fl.from_webdataset(str(folder), decode=False) as pipe:
        got = list(pipe)
    assert [s["__key__"] for s in got] == [e["__key__"] for e in expected]  # README, __meta__ and the folder are left out
    shard_of = [shard for shard, count in enumerate(WDS_SHARDS) for _ in range(count)]
    for sample, want, shard in zip(got, expected, shard_of):
        assert sample.pop("__url__") == str(folder / f"shard-{shard:03d}.tar")
        assert sample == want


def test_webdataset_decodes_labels_json_and_keeps_images_as_bytes(shards, no_leaks):
    import feedline.vision as fv

    folder, expected = shards
    with fl.from_webdataset(str(folder)) as pipe:
        got = list(pipe)
    for i, sample in enumerate(got):
        assert sample["cls"] == i % 5 and sample["json"] == {"i": i}
        assert sample["jpg"] == expected[i]["jpg"]
        assert fv.decode(sample["jpg"]).shape == (12, 16, 3)
        if i % 3 == 0:
            np.testing.assert_array_equal(fv.decode(sample["seg.png"]), pattern(i))  # PNG: lossless
        else:
            assert "seg.png" not in sample
    assert got[0]["__url__"].endswith("shard-000.tar") and got[-1]["__url__"].endswith("shard-002.tar")


def test_webdataset_decode_dict_adds_and_replaces_decoders(shards, no_leaks):
    folder, _ = shards
    pipe = fl.from_webdataset(str(folder / "shard-000.tar"), decode={"cls": None, "jpg": len})
    sample = pipe.source.read(1)
    assert sample["cls"] == b"1" and sample["jpg"] == len(wds_sample(1)["jpg"]) and sample["json"] == {"i": 1}


def test_webdataset_names_expand_from_braces_globs_and_lists_in_order(shards):
    folder, expected = shards
    listed = [str(folder / f"shard-{n:03d}.tar") for n in (2, 0)]
    assert fl.from_webdataset(listed).source.files.names == listed  # a list keeps its order
    braces = fl.from_webdataset(str(folder / "shard-{000..002}.tar")).source
    globbed = fl.from_webdataset(str(folder / "shard-*.tar")).source
    assert braces.files.names == globbed.files.names and len(braces) == len(expected)
    with pytest.raises(FileNotFoundError, match="no files match"):
        fl.from_webdataset(str(folder / "nothing-*.tar"))


def test_a_folder_gives_its_shards_and_leaves_other_files_out(shards, tmp_path):
    folder, _ = shards
    (tmp_path / "b.tar").write_bytes((folder / "shard-001.tar").read_bytes())
    (tmp_path / "a.tar").write_bytes((folder / "shard-000.tar").read_bytes())
    (tmp_path / "dataset_info.json").write_text("{}")
    assert fl.from_webdataset(tmp_path).source.files.names == [str(tmp_path / "a.tar"), str(tmp_path / "b.tar")]
    with pytest.raises(FileNotFoundError, match="holds no .tfrecord"):
        fl.from_tfrecord(tmp_path)


@pytest.mark.parametrize("form", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_tar_index_lists_what_tarfile_lists_for_every_header_kind(tmp_path, form):
    long_folder = "deep/" + "d" * 90 + "/"  # ustar keeps it in the prefix field, GNU in a long-name header
    names = ["a.jpg", long_folder + "b.jpg", "e" * 60 + "/" + "f" * 50 + ".txt"]
    if form == tarfile.PAX_FORMAT:
        names.append("éé.cls")  # not ASCII: a pax header
    path = tmp_path / "kinds.tar"
    with tarfile.open(path, "w", format=form) as tar:
        for k, name in enumerate(names):
            add_member(tar, name, bytes([k]) * (k * 300 + 1))
        link = tarfile.TarInfo("a.lnk")
        link.type, link.linkname = tarfile.SYMTYPE, "a.jpg"
        tar.addfile(link)
    with tarfile.open(path) as tar:
        expected = {m.name: tar.extractfile(m).read() for m in tar if m.isreg()}  # the link is no member of a sample
    samples = list(fl.from_webdataset(str(path), decode=False))
    got = {f"{s['__key__']}.{ext}": data for s in samples for ext, data in s.items() if not ext.startswith("__")}
    assert got == expected


def test_truncated_tar_shard_is_refused_naming_shard_and_member(shards, tmp_path):
    folder, _ = shards
    data = (folder / "shard-001.tar").read_bytes()
    (tmp_path / "cut.tar").write_bytes(data[: len(data) // 2])
    with pytest.raises(ShardFormatError, match=r"cut\.tar: member \d+ .* is cut short"):
        fl.from_webdataset(str(tmp_path / "cut.tar"))


def test_damaged_tar_header_is_refused_naming_the_member(shards, tmp_path):
    folder, _ = shards
    data = bytearray((folder / "shard-000.tar").read_bytes())
    with tarfile.open(folder / "shard-000.tar") as tar:
        fifth = tar.getmembers()[5]
    data[fifth.offset + 100:fifth.offset + 108] = b"garbage!"  # the mode field: the header checksum no longer matches
    (tmp_path / "bad.tar").write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match=rf"bad\.tar: tar header of member 5 \(byte {fifth.offset}\) is damaged"):
        fl.from_webdataset(str(tmp_path / "bad.tar"))


def test_a_key_holding_an_extension_twice_is_refused(tmp_path):
    with tarfile.open(tmp_path / "twice.tar", "w") as tar:
        for data in (b"1", b"2"):
            add_member(tar, "k7.cls", data)
    with pytest.raises(ShardFormatError, match=r"twice\.tar: sample 'k7' holds 'cls' twice \(member 1"):
        fl.from_webdataset(str(tmp_path / "twice.tar"))


def test_field_a_decoder_rejects_raises_naming_shard_and_key(tmp_path, no_leaks):
    with tarfile.open(tmp_path / "json.tar", "w") as tar:
        add_member(tar, "a.json", b'{"ok": 1}')
        add_member(tar, "b.json", b"{not json")
    with fl.from_webdataset(str(tmp_path / "json.tar")).map(lambda s: s["json"], backend="thread") as pipe:
        with pytest.raises(SampleError, match=r"json\.tar sample 'b'") as caught:
            list(pipe)
    assert "cannot decode field 'json'" in str(caught.value.__cause__)


def test_compressed_shards_stream_exactly_once_in_order(shards, tmp_path, no_leaks):
    folder, expected = shards
    for shard in range(len(WDS_SHARDS)):
        data = (folder / f"shard-{shard:03d}.tar").read_bytes()
        with tarfile.open(fileobj=io.BytesIO(data)) as tar, tarfile.open(tmp_path / f"z-{shard}.tar.gz", "w:gz") as out:
            for member in tar:
                out.addfile(member, tar.extractfile(member) if member.isreg() else None)
    pipe = fl.from_webdataset(str(tmp_path / "z-*.tar.gz"))
    with pipe.map(lambda s: (s["__key__"], s["cls"], s["jpg"]), backend="process", workers=2) as run:
        got = list(run)
    want = [(e["__key__"], int(e["cls"]), e["jpg"]) for e in expected]
    assert sorted(got) == sorted(want)
    first_shard = [g for g in got if g[0] in {w[0] for w in want[: WDS_SHARDS[0]]}]
    assert first_shard == want[: WDS_SHARDS[0]]  # a shard is read in tar order


def test_truncated_compressed_shard_raises_naming_it(shards, tmp_path, no_leaks):
    folder, _ = shards
    (tmp_path / "z.tar.gz").write_bytes(gzip.compress((folder / "shard-000.tar").read_bytes())[:-3000])
    with fl.from_webdataset(str(tmp_path / "z.tar.gz")).map(lambda s: s["__key__"], backend="thread") as pipe:
        with pytest.raises(SampleError) as caught:
            list(pipe)
    assert "z.tar.gz: cannot read as a compressed tar" in str(caught.value.__cause__)


# ------------------------------------------------------------ TFRecord
def test_tfrecord_examples_written_by_tensorflow_read_back_exactly(tfrecords, no_leaks):
    import feedline.vision as fv

    with fl.from_tfrecord(str(tfrecords / "train-*.tfrecord")).map(lambda s: s, backend="thread", workers=2) as pipe:
        got = list(pipe)
    assert len(got) == sum(TFR_FILES)
    for i, sample in enumerate(got):
        want = tfr_expected(i)
        assert sorted(sample) == ["image/encoded", "label", "name", "pair"]
        assert sample["label"].dtype == np.int64 and sample["label"].tolist() == want["label"]
        assert sample["pair"].dtype == np.float32 and sample["pair"].tolist() == want["pair"]
        assert sample["name"] == want["name"]
        np.testing.assert_array_equal(fv.decode(sample["image/encoded"][0]), pattern(i))


def test_tfrecord_is_read_without_importing_tensorflow(tfrecords):
    script = textwrap.dedent(f"""
        import sys, feedline as fl
        pipe = fl.from_tfrecord({str(tfrecords / "train-*.tfrecord")!r}).map(lambda s: int(s["label"][0]), backend="process", workers=2)
        print(sorted(pipe) == list(range({sum(TFR_FILES)})), "tensorflow" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]


def test_tfrecord_decode_none_gives_the_serialized_bytes_and_a_function_decodes(tfrecords):
    raw = fl.from_tfrecord(str(tfrecords / "train-00.tfrecord"), decode=None).source.read(0)
    assert isinstance(raw, bytes) and b"rec0" in raw
    assert fl.from_tfrecord(str(tfrecords / "train-00.tfrecord"), decode=len).source.read(0) == len(raw)


def damaged_copy(src, dst, record: int, where: str) -> int:
    """Copy a TFRecord file with one byte of record ``record`` flipped (in its length or data); return its offset."""
    raw = bytearray(src.read_bytes())
    offset = 0
    for _ in range(record):
        offset += 16 + struct.unpack("<Q", raw[offset:offset + 8])[0]
    raw[offset + (2 if where == "length" else 20)] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return offset


def test_damaged_tfrecord_data_raises_naming_file_and_record(tfrecords, tmp_path, backend, no_leaks):
    offset = damaged_copy(tfrecords / "train-01.tfrecord", tmp_path / "bad.tfrecord", 3, "data")
    files = [str(tfrecords / "train-00.tfrecord"), str(tmp_path / "bad.tfrecord")]
    with fl.from_tfrecord(files).map(tfr_id, backend=backend, workers=2) as pipe:
        with pytest.raises(SampleError) as caught:
            list(pipe)
    message = str(caught.value)
    assert "bad.tfrecord record 3" in message and f"(byte {offset}) is damaged: the CRC of its data" in message
    assert caught.value.index == TFR_FILES[0] + 3


def test_damaged_tfrecord_is_skipped_and_counted_with_on_error_skip(tfrecords, tmp_path, no_leaks):
    damaged_copy(tfrecords / "train-01.tfrecord", tmp_path / "bad.tfrecord", 2, "data")
    with fl.from_tfrecord(str(tmp_path / "bad.tfrecord")).map(tfr_id, on_error="skip", backend="thread") as pipe:
        with pytest.warns(RuntimeWarning, match="skipped"):
            it = iter(pipe)
            got = list(it)
    first = TFR_FILES[0]
    assert got == [first + k for k in range(TFR_FILES[1]) if k != 2]
    assert [index for index, _ in it.stats().skipped] == [2]


def test_damaged_tfrecord_length_is_refused_when_indexing(tfrecords, tmp_path):
    offset = damaged_copy(tfrecords / "train-00.tfrecord", tmp_path / "bad.tfrecord", 4, "length")
    with pytest.raises(ShardFormatError, match=rf"bad\.tfrecord: record 4 \(byte {offset}\) is damaged: the CRC of its length"):
        fl.from_tfrecord(str(tmp_path / "bad.tfrecord"))


def test_truncated_tfrecord_is_refused_naming_the_last_record(tfrecords, tmp_path):
    raw = (tfrecords / "train-00.tfrecord").read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(raw[:-10])
    with pytest.raises(ShardFormatError, match=rf"cut\.tfrecord: record {TFR_FILES[0] - 1} .* is cut short"):
        fl.from_tfrecord(str(tmp_path / "cut.tfrecord"))


def test_gzip_tfrecords_stream_one_file_per_shard_exactly_once(tfrecords, no_leaks):
    pipe = fl.from_tfrecord(str(tfrecords / "packed-*.tfrecord.gz"), compression="GZIP", decode=None)
    with pipe.map(bytes.decode, backend="process", workers=2) as mapped:
        got = list(mapped)
    assert sorted(got) == sorted(f"gzip {n} {k}" for n in range(2) for k in range(5))
    assert [g for g in got if g.startswith("gzip 0")] == [f"gzip 0 {k}" for k in range(5)]  # a file is read in order


def test_gzip_tfrecord_stream_resumes_exactly(tfrecords, no_leaks):
    build = lambda: fl.from_tfrecord(str(tfrecords / "packed-*.tfrecord.gz"), compression="GZIP", decode=None).map(  # noqa: E731
        bytes.decode, backend="process", workers=2).batch(2)
    with build() as first:
        it = iter(first)
        head = [next(it) for _ in range(2)]
        state = it.state()
        rest = list(it)
    with build() as second:
        assert list(second.resume(state)) == rest
    assert sorted(v for b in head + rest for v in b) == sorted(f"gzip {n} {k}" for n in range(2) for k in range(5))


def test_zlib_tfrecords_are_read_exactly(tfrecords, no_leaks):
    with fl.from_tfrecord(str(tfrecords / "packed.tfrecord.zz"), compression="ZLIB", decode=None) as pipe:
        got = list(pipe)
    assert got == [b"zlib %d " % k + bytes(range(256)) * 3 for k in range(300)]


# ------------------------------------------------------------ ArrayRecord
def test_array_records_read_back_exactly(array_records, no_leaks):
    folder, expected = array_records
    with fl.from_array_record(str(folder / "part-*.array_record"), decode=json.loads) as pipe:
        got = list(pipe)
    assert got == [json.loads(r) for r in expected]
    assert fl.from_array_record(str(folder)).source.read(10) == expected[10]


def test_damaged_array_record_file_is_refused_naming_it(tmp_path):
    pytest.importorskip("array_record.python.array_record_module", reason="needs array-record")
    (tmp_path / "bad.array_record").write_bytes(b"not an array record" * 10)
    with pytest.raises(ShardFormatError, match=r"bad\.array_record: cannot read as an ArrayRecord file"):
        fl.from_array_record(str(tmp_path / "bad.array_record"))


# ------------------------------------------------------------ every format: the feedline guarantees
@pytest.mark.parametrize("workers", [1, 8])
def test_shuffled_order_is_the_same_on_every_backend_and_worker_count(numbered, backend, workers, no_leaks):
    pipe, number, count = numbered
    with pipe.shuffle(seed=7).map(number, backend="serial").batch(4) as reference:
        expected = [b.tolist() for b in reference]
    with pipe.shuffle(seed=7).map(number, backend=backend, workers=workers).batch(4) as run:
        got = [b.tolist() for b in run]
    assert got == expected
    assert sorted(n for b in got for n in b) == list(range(count))  # every sample exactly once
    assert [n for b in expected for n in b] != list(range(count))  # the shuffle did permute


@pytest.mark.parametrize("backend", ["serial", "process"])
def test_resume_continues_exactly_after_the_checkpoint(numbered, backend, no_leaks):
    pipe, number, count = numbered
    build = lambda: pipe.shuffle(seed=3).map(number, backend=backend, workers=2).batch(3)  # noqa: E731
    with build() as first:
        it = iter(first)
        head = [next(it).tolist() for _ in range(2)]
        state = it.state()
        rest = [b.tolist() for b in it]
    with build() as second:
        resumed = [b.tolist() for b in second.resume(state)]
    assert resumed == rest
    assert sorted(n for b in head + resumed for n in b) == list(range(count))


# ------------------------------------------------------------ feedline convert
def test_convert_reads_webdataset_shards_into_a_store(shards, tmp_path, no_leaks):
    pytest.importorskip("pyarrow")
    from feedline.testing import convert

    folder, expected = shards
    summary = convert(str(folder / "shard-00{0,1}.tar"), tmp_path / "out.store", size=(8, 8), progress=False, backend="thread")
    first_two = expected[: WDS_SHARDS[0] + WDS_SHARDS[1]]
    # samples without seg.png differ from the first sample's fields: skipped and listed
    kept = [e for e in first_two if "seg.png" in e]
    assert summary.samples == len(kept) and len(summary.skipped) == len(first_two) - len(kept)
    assert all("differ from the first sample's" in reason for _, reason in summary.skipped)
    rows = list(fl.from_store(tmp_path / "out.store"))
    assert [r["__key__"] for r in rows] == [e["__key__"] for e in kept]
    assert rows[0]["jpg"].shape == (8, 8, 3) and rows[0]["seg.png"].shape == (8, 8, 3)
    assert [int(r["cls"]) for r in rows] == [int(e["cls"]) for e in kept]
    assert [r["json"] for r in rows] == [e["json"].decode() for e in kept]


def test_convert_command_reads_tfrecords_into_a_store(tfrecords, tmp_path):
    pytest.importorskip("pyarrow")
    done = subprocess.run([sys.executable, "-m", "feedline.cli", "convert", str(tfrecords / "train-*.tfrecord"),
                           str(tmp_path / "tf.store"), "--no-progress", "--workers", "0"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{sum(TFR_FILES)} tfrecord samples" in done.stdout
    rows = list(fl.from_store(tmp_path / "tf.store"))
    assert [r["label"].tolist() for r in rows] == [[i] for i in range(sum(TFR_FILES))]
    assert rows[5]["name"] == b"rec5" and rows[5]["pair"].tolist() == [5, 1.25]
    np.testing.assert_array_equal(rows[5]["image"]["encoded"], pattern(5))  # the PNG is decoded once


# ------------------------------------------------------------ remote files (servers on localhost)


@pytest.mark.parametrize("cached", [True, False])
def test_webdataset_over_http_with_failing_requests_is_read_exactly(shards, http_server, cached, tmp_path,  # noqa: F811
                                                                      no_leaks):
    pytest.importorskip("aiohttp", reason="http:// needs aiohttp (pip install -e '.[test]')")
    folder, expected = shards
    # Cached, the three shards are three downloads: fail every second one so that some fail.
    web = http_server(str(folder), faults=Faults(every=2 if cached else 4, kinds=("500", "reset", "truncate")))
    pipe = fl.from_webdataset(web.url("shard-{000..002}.tar"), decode=False,
                              cache_dir=tmp_path / "cache" if cached else False)
    with pipe.map(lambda s: (s["__key__"], s["jpg"]), backend="process", workers=2) as run:
        got = list(run)
    assert got == [(e["__key__"], e["jpg"]) for e in expected]
    assert web.injected  # failures were injected, and retried


def test_tfrecords_on_s3_are_read_exactly(tfrecords, s3_server, no_leaks):  # noqa: F811
    url = s3_server.upload("shard-formats", "tfr", str(tfrecords))
    pipe = fl.from_tfrecord(f"{url}/train-*.tfrecord", storage_options=s3_server.storage_options, cache_dir=False)
    assert len(pipe.source.files.names) == len(TFR_FILES)
    assert s3_server.storage_options["secret"] not in repr(pipe) + str(pipe.source.describe())
    with pipe.shuffle(seed=1).map(tfr_id, backend="thread", workers=4) as run:
        assert sorted(run) == list(range(sum(TFR_FILES)))


def test_array_record_url_without_a_cache_is_refused_with_what_to_do():
    with pytest.raises(ValueError, match="opens local files only; leave cache_dir unset"):
        fl.from_array_record("s3://bucket/data.array_record", cache_dir=False)


def test_convert_reads_array_records_into_a_store(array_records, tmp_path, no_leaks):
    pytest.importorskip("pyarrow")
    from feedline.testing import convert

    folder, expected = array_records
    summary = convert(folder, tmp_path / "ar.store", progress=False, workers=0)  # a Path works too
    assert summary.samples == len(expected) and not summary.skipped
    assert [r["record"] for r in fl.from_store(tmp_path / "ar.store")] == expected


def test_remote_read_that_keeps_failing_is_reported_naming_shard_and_sample(shards, http_server, no_leaks):  # noqa: F811
    pytest.importorskip("aiohttp", reason="http:// needs aiohttp (pip install -e '.[test]')")
    folder, _ = shards
    web = http_server(str(folder))
    # Ranged reads (no cache): indexed while the server is healthy, each sample read later is a request.
    pipe = fl.from_webdataset(web.url("shard-{000..002}.tar"), decode=False, cache_dir=False)
    web.faults = Faults(every=1, kinds=("500",), only="shard-001")  # then every request for one shard fails
    with pipe.map(lambda s: s["__key__"], backend="serial") as run:
        with pytest.raises(SampleError) as caught:
            list(run)
    assert caught.value.index == WDS_SHARDS[0]  # the first sample of shard-001, after every sample before it
    assert f"shard-001.tar sample {wds_key(WDS_SHARDS[0], 1)!r}" in str(caught.value)
    assert "5 attempts failed" in str(caught.value.__cause__)
    assert len(web.injected) >= 5


# ------------------------------------------------ one type per feature across records and files
DRIFT_WRITER = textwrap.dedent("""
    import sys
    import tensorflow as tf

    def example(label):
        kind = tf.train.Feature(int64_list=tf.train.Int64List(value=[label])) if isinstance(label, int) else \\
            tf.train.Feature(float_list=tf.train.FloatList(value=[label]))
        return tf.train.Example(features=tf.train.Features(feature={"label": kind})).SerializeToString()

    for number, labels in enumerate(([0, 1, 2], [3, 4.5, 5])):  # record 1 of the second file: a float label
        with tf.io.TFRecordWriter(f"{sys.argv[1]}/drift-{number}.tfrecord") as w:
            for label in labels:
                w.write(example(label))
""")


@pytest.fixture(scope="module")
def drifting_tfrecords(tmp_path_factory):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("writing TFRecords needs tensorflow (pip install -e '.[test]')")
    folder = tmp_path_factory.mktemp("drift")
    done = subprocess.run([sys.executable, "-c", DRIFT_WRITER, str(folder)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def test_a_tfrecord_feature_whose_type_changes_is_refused_naming_file_record_and_feature(drifting_tfrecords, backend, no_leaks):
    tmp_path = drifting_tfrecords
    pipe = fl.from_tfrecord(str(tmp_path / "drift-*.tfrecord")).map(lambda s: int(s["label"][0]), backend=backend, workers=2)
    with pipe, pytest.raises(fl.SampleError) as caught:
        list(pipe)
    assert caught.value.index == 4
    cause = str(caught.value.__cause__)
    assert f"{tmp_path / 'drift-1.tfrecord'} record 1: feature 'label' is float_list" in cause, cause
    assert f"{tmp_path / 'drift-0.tfrecord'} record 0 holds int64_list" in cause and "decode=None" in cause, cause
    with fl.from_tfrecord(str(tmp_path / "drift-*.tfrecord")).map(lambda s: s, on_error="skip", backend=backend) as skipping:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert [int(s["label"][0]) for s in skipping] == [0, 1, 2, 3, 5]


def test_a_webdataset_sample_without_a_field_the_others_have_is_refused_by_batch_naming_shard_and_key(tmp_path):
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        for key, fields in (("k0", {"cls": b"1", "txt": b"a"}), ("k1", {"cls": b"2"}), ("k2", {"cls": b"3", "txt": b"c"})):
            for ext, data in fields.items():
                add_member(tar, f"{key}.{ext}", data)
    assert [sorted(s) for s in fl.from_webdataset(tmp_path / "a.tar")][1] == ["__key__", "__url__", "cls"]  # unbatched: as stored
    with pytest.raises(SampleError, match=r"sample 1 \(.*a\.tar sample 'k1'\).*structure .*differs from sample 0"):
        list(fl.from_webdataset(tmp_path / "a.tar").batch(3))
