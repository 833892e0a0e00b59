"""WebDataset, TFRecord and ArrayRecord shards on a real S3 server (moto, localhost), read through the shard cache.

Each remote shard is downloaded once, into the local cache that remote
stores use, and read from there: the samples equal the local shards'
(exactly once, on thread and process workers), and a second epoch, or a
second pipeline over the same cache, sends no request for shard data.
"""

from __future__ import annotations

import os
import struct

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("filelock")

import remote_servers  # noqa: E402
import test_shard_formats  # noqa: E402
from test_shard_formats import WDS_SHARDS, write_array_records  # noqa: E402

import feedline as fl  # noqa: E402
from feedline import testing  # noqa: E402

BACKEND_ENV = "FEEDLINE_FS_BACKEND"  # the client for remote URLs: fsspec, obstore or auto
s3_server, shards = remote_servers.s3_server, test_shard_formats.shards  # fixtures (shards: 3 WebDataset tars)

TFR_FILES = (9, 5, 8)  # records per TFRecord file


def masked_crc32c(data: bytes) -> int:
    """The CRC TFRecord stores: CRC32C rotated right by 15 plus 0xa282ead8 (tensorflow/core/lib/hash/crc32c.h)."""
    crc = pytest.importorskip("google_crc32c").value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecords(folder) -> list[bytes]:
    """TFRecord files written by hand (the format is length, CRC, data, CRC); returns the records in order."""
    records, i = [], 0
    for number, count in enumerate(TFR_FILES):
        with open(folder / f"part-{number}.tfrecord", "wb") as f:
            for _ in range(count):
                data = b"record %d " % i + bytes(range(256)) * (1 + i % 4)
                length = struct.pack("<Q", len(data))
                f.write(length + struct.pack("<I", masked_crc32c(length)) + data + struct.pack("<I", masked_crc32c(data)))
                records.append(data)
                i += 1
    return records


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tfr")
    return folder, write_tfrecords(folder)


def wds_pair(sample) -> tuple:
    return sample["__key__"], sample["jpg"], sample["cls"]


def epoch(pipe, fn, backend: str) -> tuple[list, dict]:
    """One shuffled epoch through ``workers=2`` of ``backend``: the samples in order, and the stats' source counts."""
    with pipe.shuffle(seed=3).map(fn, backend=backend, workers=2) as run:
        got = list(run)
        counts = dict(run.stats().source_counts)
    return got, counts


def cached_files(cache_dir) -> list[str]:
    return sorted(os.path.basename(path) for _, _, path in testing.shard_cache(cache_dir).files())


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_remote_webdataset_equals_local_and_later_epochs_read_the_cache(shards, s3_server, backend, tmp_path, no_leaks):
    folder, expected = shards
    url = s3_server.upload("remote-formats", f"wds-{backend}", str(folder))
    cache = tmp_path / "cache"
    remote = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                                storage_options=s3_server.storage_options, cache_dir=cache)
    assert remote.source.files.cache.counts()["downloads"] == len(WDS_SHARDS)  # indexing fetched each shard once
    assert len(cached_files(cache)) == len(WDS_SHARDS)
    local, _ = epoch(fl.from_webdataset(str(folder), decode=False), wds_pair, backend)
    before = s3_server.requests
    first, first_counts = epoch(remote, wds_pair, backend)
    second, second_counts = epoch(remote, wds_pair, backend)
    assert first == local and second == local
    assert sorted(key for key, _, _ in first) == sorted(e["__key__"] for e in expected)  # every sample once
    assert s3_server.requests == before  # both epochs read the cache: no request reached the server
    # The first epoch's stats count what indexing fetched (before it, in this process); the next reads the cache.
    assert first_counts.get("remote downloads") == len(WDS_SHARDS) and "remote downloads" not in second_counts

    again = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                               storage_options=s3_server.storage_options, cache_dir=cache)
    assert again.source.files.cache.counts()["downloads"] == 0  # a new pipeline finds the shards cached
    assert epoch(again, wds_pair, backend)[0] == local


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_remote_tfrecords_equal_local_and_are_downloaded_once(tfrecords, s3_server, backend, tmp_path, no_leaks):
    folder, records = tfrecords
    url = s3_server.upload("remote-formats", f"tfr-{backend}", str(folder))
    remote = fl.from_tfrecord(f"{url}/part-*.tfrecord", decode=None, storage_options=s3_server.storage_options,
                              cache_dir=tmp_path / "cache")
    local, _ = epoch(fl.from_tfrecord(str(folder), decode=None), bytes, backend)
    before = s3_server.requests
    got, _ = epoch(remote, bytes, backend)
    assert got == local and sorted(got) == sorted(records)
    assert s3_server.requests == before
    assert remote.source.files.cache.counts()["downloads"] == len(TFR_FILES)


def test_workers_download_what_the_cache_lost_once_each(shards, s3_server, tmp_path, no_leaks):
    folder, _ = shards
    url = s3_server.upload("remote-formats", "wds-lost", str(folder))
    cache = tmp_path / "cache"
    remote = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                                storage_options=s3_server.storage_options, cache_dir=cache)
    for name in os.listdir(cache / "shards"):
        if not name.endswith(".lock"):
            os.remove(cache / "shards" / name)  # as if another job's reads had evicted them
    got, counts = epoch(remote, wds_pair, "thread")  # thread workers share this process's cache counters
    assert got == epoch(fl.from_webdataset(str(folder), decode=False), wds_pair, "thread")[0]
    # Each shard is fetched again once, by whichever worker reads it first (the other waits for that download).
    assert remote.source.files.cache.counts()["downloads"] == 2 * len(WDS_SHARDS)
    assert counts["remote downloads"] == 2 * len(WDS_SHARDS)  # indexing's, then the epoch's, each once in stats()
    assert len(cached_files(cache)) == len(WDS_SHARDS)


def test_small_cache_evicts_shards_and_still_reads_every_sample_once(shards, s3_server, tmp_path, no_leaks):
    folder, expected = shards
    url = s3_server.upload("remote-formats", "wds-small", str(folder))
    largest = max(os.path.getsize(folder / f"shard-{n:03d}.tar") for n in range(len(WDS_SHARDS)))
    cache = tmp_path / "cache"
    remote = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                                storage_options=s3_server.storage_options, cache_dir=cache, cache_limit=largest + 1024)
    got, _ = epoch(remote, wds_pair, "thread")
    assert sorted(key for key, _, _ in got) == sorted(e["__key__"] for e in expected)
    # Two workers may download two shards at once, and a file being written is not evicted: one shard over, at most.
    assert testing.shard_cache(cache).used_bytes() <= 2 * largest + 1024
    assert remote.source.files.cache.counts()["evicted"] >= 1


def test_shard_larger_than_the_cache_is_read_by_ranges(shards, s3_server, tmp_path, no_leaks):
    folder, expected = shards
    url = s3_server.upload("remote-formats", "wds-tiny", str(folder))
    remote = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                                storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache", cache_limit=100)
    got, _ = epoch(remote, wds_pair, "thread")
    assert sorted(key for key, _, _ in got) == sorted(e["__key__"] for e in expected)
    assert cached_files(tmp_path / "cache") == []


def test_remote_array_records_are_read_from_the_cache(s3_server, tmp_path, no_leaks):
    pytest.importorskip("array_record.python.array_record_module", reason="needs array-record (pip install -e '.[test]')")
    folder = tmp_path / "ar"
    folder.mkdir()
    records = write_array_records(folder)
    url = s3_server.upload("remote-formats", "ar", str(folder))
    remote = fl.from_array_record(f"{url}/part-*.array_record", storage_options=s3_server.storage_options,
                                  cache_dir=tmp_path / "cache")
    assert s3_server.storage_options["secret"] not in remote.source.describe() + repr(remote)
    before = s3_server.requests
    got, _ = epoch(remote, bytes, "process")
    assert got == epoch(fl.from_array_record(str(folder)), bytes, "process")[0]
    assert sorted(got) == sorted(records) and s3_server.requests == before


def test_credentials_stay_out_of_the_cache_and_messages(shards, s3_server, tmp_path, no_leaks):
    folder, _ = shards
    url = s3_server.upload("remote-formats", "wds-secret", str(folder))
    secret = s3_server.storage_options["secret"]
    pipe = fl.from_webdataset(f"{url}/shard-000.tar", storage_options=s3_server.storage_options,
                              cache_dir=tmp_path / "cache")
    assert secret not in repr(pipe) + pipe.source.describe() + " ".join(cached_files(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError):
        fl.from_webdataset(f"{url}/missing-*.tar", storage_options=s3_server.storage_options, cache_dir=tmp_path / "c2")


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_remote_parquet_folder_equals_local_and_is_downloaded_once(s3_server, backend, tmp_path, no_leaks):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "pq"
    folder.mkdir()
    for part in range(3):
        ids = list(range(part * 40, part * 40 + 40))
        pq.write_table(pa.table({"id": ids, "text": [f"row {i}" for i in ids]}), folder / f"part-{part}.parquet",
                       row_group_size=16)
    url = s3_server.upload("remote-formats", f"pq-{backend}", str(folder))
    remote = fl.from_parquet(url, storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache")  # a folder URL
    assert len(remote) == 120 and remote.source.remote.cache.counts()["downloads"] == 3
    local, _ = epoch(fl.from_parquet(folder), dict, backend)
    before = s3_server.requests
    got, _ = epoch(remote, dict, backend)
    assert got == local and sorted(row["id"] for row in got) == list(range(120))
    assert s3_server.requests == before
    with pytest.raises(fl.store.StoreError, match="no files match"):
        fl.from_parquet(f"{url}/missing-*.parquet", storage_options=s3_server.storage_options, cache_dir=tmp_path / "c")


# ------------------------------------------------------------ the filesystem layer: obstore or fsspec
@pytest.mark.parametrize("backend", ["fsspec", "obstore"])
def test_both_filesystem_layers_download_the_same_shards(shards, s3_server, backend, tmp_path, monkeypatch, no_leaks):
    if backend == "obstore":
        pytest.importorskip("obstore")
    folder, expected = shards
    url = s3_server.upload("remote-formats", f"layer-{backend}", str(folder))
    monkeypatch.setenv(BACKEND_ENV, backend)  # process workers inherit it
    assert testing.remote_client("s3", s3_server.storage_options) == backend
    remote = fl.from_webdataset(f"{url}/shard-{{000..002}}.tar", decode=False,
                                storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache")
    got, _ = epoch(remote, wds_pair, "process")
    assert got == epoch(fl.from_webdataset(str(folder), decode=False), wds_pair, "process")[0]
    with pytest.raises(OSError, match="shard-009.tar does not exist"):
        fl.from_webdataset(f"{url}/shard-009.tar", storage_options=s3_server.storage_options,
                           cache_dir=tmp_path / "cache")


def test_obstore_is_chosen_only_where_it_reads_the_same_url_and_options(monkeypatch):
    pytest.importorskip("obstore")
    choose_backend = testing.remote_client
    monkeypatch.delenv(BACKEND_ENV, raising=False)
    assert choose_backend("s3", {"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9"}) == "obstore"
    assert choose_backend("https", {}) == "obstore"
    assert choose_backend("s3", {"requester_pays": True}) == "fsspec"  # no obstore equivalent: fsspec takes it as is
    assert choose_backend("az", {}) == "fsspec"  # obstore's az:// names the account, adlfs's does not
    monkeypatch.setenv(BACKEND_ENV, "obstore")
    with pytest.raises(ValueError, match="obstore cannot read az://"):
        choose_backend("az", {})
    monkeypatch.setenv(BACKEND_ENV, "rust")
    with pytest.raises(ValueError, match="use 'auto', 'fsspec' or 'obstore'"):
        choose_backend("s3", {})
