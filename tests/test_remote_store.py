"""Remote stores: read from real servers on localhost (moto S3, plain HTTP) through the shared cache."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("s3fs")
pytest.importorskip("filelock")

import remote_servers  # noqa: E402
from conftest import snapshot, wait_for  # noqa: E402
from remote_servers import Faults  # noqa: E402

import feedline as fl  # noqa: E402
from feedline import testing  # noqa: E402
from feedline.store import StoreError, StoreWriter, open_store  # noqa: E402

s3_server, http_server = remote_servers.s3_server, remote_servers.http_server  # fixtures

ROWS, PER_FILE = 320, 40  # 8 parts, each a raw and a zstd file


@pytest.fixture(scope="module")
def local_store(tmp_path_factory):
    """A store of 8 parts (16 files) on local disk: images raw, labels zstd."""
    root = tmp_path_factory.mktemp("remote")
    path = str(root / "train.store")
    rng = np.random.default_rng(0)
    with StoreWriter(path, encodings={"label": "zstd"}, rows_per_file=PER_FILE) as w:
        w.write({"image": rng.integers(0, 255, (ROWS, 12, 12, 3), dtype=np.uint8), "label": np.arange(ROWS)})
    return path


def _epoch(pipe):
    with pipe:
        return [snapshot(b) for b in pipe]


def _steps(pipe, backend=None):
    if backend is not None:
        pipe = pipe.map(lambda s: s, backend=backend, workers=2)
    return pipe.shuffle(seed=3).batch(24)


def _cache_files(cache_dir) -> list[str]:
    return sorted(os.path.basename(path) for _, _, path in testing.shard_cache(cache_dir).files())


def test_epoch_from_s3_equals_local_store(local_store, s3_server, backend, tmp_path, no_leaks):
    url = s3_server.upload("feedline", f"epoch-{backend}/train.store", local_store)
    remote = fl.from_store(url, storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache")
    assert _epoch(_steps(remote, backend)) == _epoch(_steps(fl.from_store(local_store), backend))


def test_epoch_from_http_equals_local_store(local_store, http_server, backend, tmp_path, no_leaks):
    web = http_server(os.path.dirname(local_store), latency=0.005)
    remote = fl.from_store(web.url("train.store"), cache_dir=tmp_path / "cache")
    assert _epoch(_steps(remote, backend)) == _epoch(_steps(fl.from_store(local_store), backend))
    assert all(n == 1 for path, n in web.gets.items() if path.endswith(".arrow")), web.gets  # each file fetched once


def test_bulk_epoch_from_s3_equals_local_store(local_store, s3_server, tmp_path, no_leaks):
    url = s3_server.upload("feedline", "bulk/train.store", local_store)
    remote = fl.from_store(url, storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache")
    assert _epoch(remote.shuffle(seed=1).batch(32)) == _epoch(fl.from_store(local_store).shuffle(seed=1).batch(32))


def test_cache_evicts_least_recently_used_file(tmp_path):
    source = tmp_path / "source"
    source.mkdir()
    for name in "abcd":
        (source / name).write_bytes(name.encode() * 1000)
    cache = testing.shard_cache(tmp_path / "cache", limit=3000)

    def get(name):
        time.sleep(0.01)  # distinct mtimes on coarse clocks
        return cache.get(f"s/{name}", 1000, lambda tmp: _copy(source / name, tmp))

    for name in "abc":
        get(name)
    get("a")  # a is now more recent than b
    get("d")  # needs room: b goes
    assert _cache_files(tmp_path / "cache") == ["a", "c", "d"]
    assert cache.used_bytes() <= 3000
    assert open(cache.path("s/a"), "rb").read() == b"a" * 1000
    assert cache.counts()["evicted"] == 1 and cache.counts()["downloads"] == 4 and cache.counts()["hits"] == 1


def _copy(src, dst):
    with open(src, "rb") as f, open(dst, "wb") as out:
        out.write(f.read())


def test_epoch_through_a_small_cache_stays_within_its_limit(local_store, http_server, tmp_path, no_leaks):
    web = http_server(os.path.dirname(local_store))
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local_store) for f in fs if f.endswith(".arrow")]
    limit = 5 * max(sizes)  # 5 of 16 files
    pipe = fl.from_store(web.url("train.store"), cache_dir=tmp_path / "cache", cache_limit=limit).batch(16)
    cache = testing.shard_cache(tmp_path / "cache", limit)
    got = []
    with pipe:
        for batch in pipe:
            got.append(snapshot(batch))
            assert cache.used_bytes() <= limit
    assert got == _epoch(fl.from_store(local_store).batch(16))
    assert len(_cache_files(tmp_path / "cache")) < 16 and cache.used_bytes() <= limit  # files were evicted
    assert sum(n for path, n in web.gets.items() if path.endswith(".arrow")) >= 16


def _largest_on_disk(folder, seen: list, stop: threading.Event) -> None:
    """Sample the bytes every file under ``folder`` takes (partial downloads too) every millisecond; keep the largest."""
    while not stop.is_set():
        total = 0
        for here, _, names in os.walk(folder):
            for name in names:
                try:
                    total += os.path.getsize(os.path.join(here, name))
                except FileNotFoundError:
                    pass  # renamed or evicted meanwhile
        seen[0] = max(seen[0], total)
        time.sleep(0.001)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_concurrent_downloads_never_take_the_cache_past_its_limit(local_store, http_server, backend, tmp_path, no_leaks):
    """Downloads in flight reserve their size: complete and partial files stay within cache_limit at every moment."""
    # Every third file download stalls half-way for 0.05 s, so partial files sit beside complete ones.
    web = http_server(os.path.dirname(local_store), latency=0.01,
                      faults=Faults(every=3, kinds=("stall",), only=".arrow", stall=0.05))
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(local_store) for f in fs if f.endswith(".arrow")]
    limit = int(2.5 * max(sizes))
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    seen, stop = [0], threading.Event()
    sampler = threading.Thread(target=_largest_on_disk, args=(str(cache_dir), seen, stop), daemon=True)
    sampler.start()
    try:
        remote = fl.from_store(web.url("train.store"), cache_dir=cache_dir, cache_limit=limit)
        pipe = remote.shuffle(seed=4).map(lambda s: s, backend=backend, workers=4).batch(8)
        got = _epoch(pipe)
    finally:
        stop.set()
        sampler.join()
    expected = _epoch(fl.from_store(local_store).shuffle(seed=4).map(lambda s: s, backend=backend, workers=4).batch(8))
    assert got == expected  # every sample once, in order
    assert any(kind == "stall" for _, kind in web.injected)
    assert 0 < seen[0] <= limit, f"the cache took {seen[0]} bytes on disk at one moment; its limit is {limit}"


def test_processes_share_the_cache_and_fetch_each_file_once(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store), latency=0.02)
    script = textwrap.dedent(f"""
        import hashlib, feedline as fl
        pipe = fl.from_store({web.url('train.store')!r}, cache_dir={str(tmp_path / 'cache')!r}).shuffle(seed=5).batch(32)
        digest = hashlib.sha256()
        for batch in pipe:
            digest.update(batch["image"].tobytes()); digest.update(batch["label"].tobytes())
        print(digest.hexdigest())
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outputs]
    digests = {out.strip() for out, _ in outputs}
    local = fl.from_store(local_store).shuffle(seed=5).batch(32)
    import hashlib

    expected = hashlib.sha256()
    for batch in local:
        expected.update(batch["image"].tobytes())
        expected.update(batch["label"].tobytes())
    assert digests == {expected.hexdigest()}
    arrow = {path: n for path, n in web.gets.items() if path.endswith(".arrow")}
    assert len(arrow) == 16 and set(arrow.values()) == {1}, arrow  # 3 processes, every file downloaded once


def test_killed_downloader_leaves_no_partial_file(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store), faults=Faults(kinds=("stall",), every=1, only="part-00000", stall=60))
    cache_dir = tmp_path / "cache"
    script = (f"import feedline.store as s; s.open_store({web.url('train.store')!r}, cache_dir={str(cache_dir)!r}, "
              "read_ahead=False)[0]")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.DEVNULL)
    try:
        def partial():
            return [os.path.join(d, f) for d, _, fs in os.walk(cache_dir) for f in fs if ".tmp-" in f and os.path.getsize(os.path.join(d, f))]

        assert wait_for(lambda: bool(partial()), timeout=60), "the downloader never started writing"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert partial() and not any(f.endswith(".arrow") for f in _cache_files(cache_dir))  # half a file, never under its name
    web.faults = None
    store = open_store(web.url("train.store"), cache_dir=cache_dir, read_ahead=False)
    assert snapshot(store[0]) == snapshot(open_store(local_store)[0])
    assert not partial()  # the next holder of the file's lock removed the dead download
    store.close()


def test_injected_failures_still_deliver_every_sample_once(local_store, http_server, tmp_path, no_leaks):
    web = http_server(os.path.dirname(local_store), faults=Faults(every=4, seed=2))  # 25 % of GETs fail
    pipe = fl.from_store(web.url("train.store"), cache_dir=tmp_path / "cache", read_ahead=False)
    seen = []
    with pipe.map(lambda s: s, backend="thread", workers=2).batch(20) as run:
        for batch in run:
            seen.extend(batch["label"].tolist())
    assert sorted(seen) == list(range(ROWS)) and seen == list(range(ROWS))
    assert {kind for _, kind in web.injected} == {"500", "reset", "truncate"}
    assert pipe.source.counts()["retries"] >= 1  # (aiohttp itself retries some resets on a reused connection)


def test_download_that_keeps_failing_names_file_and_sample(local_store, http_server, tmp_path, no_leaks):
    web = http_server(os.path.dirname(local_store), faults=Faults(rate=1.0, kinds=("500",), only="raw/part-00002"))
    store = fl.from_store(web.url("train.store"), cache_dir=tmp_path / "cache", retries=1, read_ahead=False)
    with store.map(lambda s: s, backend="serial").batch(PER_FILE) as pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    text = str(info.value)
    assert "sample 80" in text and "raw/part-00002.arrow" in text and "2 attempts" in text
    counts = pipe.stats().source_counts
    assert counts["remote downloads failed"] == 1 and counts["remote download retries"] == 1  # retries=1
    skipping = store.map(lambda s: s, backend="serial", on_error="skip").batch(PER_FILE)
    with skipping, pytest.warns(RuntimeWarning, match="skipped 40 samples"):
        labels = [int(x) for b in skipping for x in b["label"]]
        skipped = sorted(i for i, _ in skipping.stats().skipped)
    assert skipped == list(range(80, 120)) and labels == [i for i in range(ROWS) if not 80 <= i < 120]


def test_read_ahead_fetches_files_in_plan_order_and_stays_bounded(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store))
    store = open_store(web.url("train.store"), cache_dir=tmp_path / "cache", concurrency=1)  # 2 files unread at most
    order = np.random.default_rng(7).permutation(ROWS)
    store.read_ahead(order)

    def fetched():
        return [p for p in web.order if p.endswith(".arrow")]

    assert wait_for(lambda: len(fetched()) == 2, timeout=30)
    time.sleep(0.3)
    assert len(fetched()) == 2  # nothing read yet: the read-ahead waits
    assert [int(store[int(i)]["label"]) for i in order] == order.tolist()
    assert wait_for(lambda: testing.read_ahead(store).done, timeout=30)
    parts = list(dict.fromkeys(int(i) // PER_FILE for i in order))
    assert fetched() == [f"/train.store/{g}/part-{p:05d}.arrow" for p in parts for g in ("raw", "zstd")]
    store.close()


def test_credentials_stay_out_of_reprs_and_errors(local_store, s3_server, http_server, tmp_path):
    url = s3_server.upload("feedline", "secret/train.store", local_store)
    secret = s3_server.storage_options["secret"]
    pipe = fl.from_store(url, storage_options=s3_server.storage_options, cache_dir=tmp_path / "cache").batch(8)
    shown = [repr(pipe), str(pipe), repr(pipe.source), pipe.source.describe(), repr(pipe.source.location)]
    assert not any(secret in s or s3_server.storage_options["key"] in s for s in shown), shown
    with pytest.raises(StoreError) as info:
        fl.from_store(url.replace("secret/", "absent/"), storage_options=s3_server.storage_options, retries=0,
                      cache_dir=tmp_path / "cache")
    assert "absent/train.store" in str(info.value) and secret not in str(info.value)
    web = http_server(os.path.dirname(local_store))
    with pytest.raises(StoreError) as info:
        fl.from_store(web.url("nothing.store").replace("http://", "http://user:hunter22@"), retries=0)
    assert "hunter22" not in str(info.value) and "***@" in str(info.value)
    clone = pickle.loads(pickle.dumps(pipe.source))  # explicit options travel to workers
    assert clone.location.options == s3_server.storage_options and len(clone) == ROWS


def test_remote_options_with_a_local_path_are_refused(local_store):
    with pytest.raises(TypeError, match="cache_limit apply only to a remote store"):
        fl.from_store(local_store, cache_limit="1GiB")
    with pytest.raises(ValueError, match="cache_limit='lots' is not a size"):
        fl.from_store("s3://bucket/x.store", cache_limit="lots")


def test_verify_catches_a_remote_file_damaged_in_place(local_store, http_server, tmp_path, no_leaks):
    import shutil

    copy = tmp_path / "served" / "train.store"
    shutil.copytree(local_store, copy)
    target = copy / "raw" / "part-00001.arrow"
    data = bytearray(target.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 64] = bytes(255 - b for b in data[middle:middle + 64])  # same size: only checksums see it
    target.write_bytes(bytes(data))
    web = http_server(str(tmp_path / "served"))
    store = open_store(web.url("train.store"), cache_dir=tmp_path / "cache", verify=True, read_ahead=False)
    assert snapshot(store[0]) == snapshot(open_store(local_store)[0])
    with pytest.raises(StoreError, match="damaged"):
        store[PER_FILE]
    store.close()


def test_read_ahead_ends_when_nobody_reads(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store))
    store = open_store(web.url("train.store"), cache_dir=tmp_path / "cache", concurrency=1)
    with testing.mechanism_policy(read_ahead_idle_stop=0.5):  # an epoch abandoned half-way leaves no thread behind
        store.read_ahead(np.arange(ROWS))
    assert wait_for(lambda: testing.read_ahead(store).done, timeout=20)
    assert len([p for p in web.order if p.endswith(".arrow")]) == 2  # stopped at its bound, never past it
    store.close()


MANY, SMALL = 600, 4  # 150 parts, 300 files: 1 % of the GETs is 3 of them


@pytest.fixture(scope="module")
def many_files_store(tmp_path_factory):
    """A store of 300 small files, so that failing 1 % of the requests fails a few."""
    path = str(tmp_path_factory.mktemp("many") / "many.store")
    rng = np.random.default_rng(1)
    with StoreWriter(path, encodings={"label": "zstd"}, rows_per_file=SMALL) as w:
        w.write({"image": rng.integers(0, 255, (MANY, 4, 4, 3), dtype=np.uint8), "label": np.arange(MANY)})
    return path


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_one_percent_of_requests_failing_still_delivers_every_sample_once(many_files_store, http_server, backend,
                                                                           tmp_path, no_leaks):
    # Every 100th GET fails, the kinds in turn: a 500, a connection reset, a truncated body.
    web = http_server(os.path.dirname(many_files_store), faults=Faults(every=100))
    remote = fl.from_store(web.url("many.store"), cache_dir=tmp_path / "cache")
    labels = []
    with _steps(remote, backend) as pipe:
        for batch in pipe:
            labels.extend(batch["label"].tolist())
        stats = pipe.stats()
    with _steps(fl.from_store(many_files_store), backend) as local:
        expected = [x for batch in local for x in batch["label"].tolist()]
    assert labels == expected and sorted(labels) == list(range(MANY))  # every sample once, in the same order
    assert {kind for _, kind in web.injected} == {"500", "reset", "truncate"}
    arrow = {path: n for path, n in web.gets.items() if path.endswith(".arrow")}
    assert len(arrow) == 2 * MANY // SMALL and set(arrow.values()) == {1}  # each file arrived whole, once
    counts = stats.source_counts  # summed over the consumer's read-ahead and the workers, threads or processes
    assert counts["remote downloads"] == 2 * MANY // SMALL and "remote downloads failed" not in counts
    assert 1 <= counts["remote download retries"] <= len(web.injected)  # (aiohttp retries some resets itself)
    assert f"remote download retries {counts['remote download retries']}" in str(stats)


def test_store_counts_downloads_for_stats_once_each(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store), faults=Faults(every=2, kinds=("500",), only=".arrow"))
    store = open_store(web.url("train.store"), cache_dir=tmp_path / "cache", read_ahead=False)
    assert store.path == web.url("train.store") and pickle.loads(pickle.dumps(store)).path == store.path
    store.take_counters()  # the manifest's download is not a file's
    store[0]  # part 0: its raw file (GET 1) and its zstd file (GET 2 fails, GET 3 brings it)
    counts = store.take_counters()
    assert counts["remote downloads"] == 2 and counts["remote download retries"] == 1
    assert counts["remote bytes downloaded"] == sum(
        os.path.getsize(os.path.join(local_store, g, "part-00000.arrow")) for g in ("raw", "zstd"))
    store[1]
    assert store.take_counters() == {}  # nothing new: the files are in the cache; nothing counted twice
    store.close()


def test_stats_show_source_counts_only_when_there_are_some():
    stats = fl.Stats("thread", 2, 4, "chosen by a test")
    assert stats.as_dict()["source_counts"] == {} and "source:" not in str(stats)
    stats.add_counts({"remote download retries": 2})
    stats.add_counts({"remote download retries": 1, "remote downloads": 5})
    stats.add_counts({})
    assert stats.as_dict()["source_counts"] == {"remote download retries": 3, "remote downloads": 5}
    assert "source: remote download retries 3, remote downloads 5" in str(stats)


def test_read_ahead_fetches_the_first_files_alone_then_widens(local_store, http_server, tmp_path):
    web = http_server(os.path.dirname(local_store), latency=0.02)
    store = open_store(web.url("train.store"), cache_dir=tmp_path / "cache", concurrency=4)
    order = np.roll(np.arange(ROWS), -3 * PER_FILE)  # starts in part 3
    store.read_ahead(order)
    assert wait_for(lambda: testing.read_ahead(store).fetched == 8, timeout=30)
    events = [(kind, path.rsplit("/", 2)[-2] + "/" + path.rsplit("/", 1)[-1]) for kind, path in web.events
              if path.endswith(".arrow")]
    first = {"raw/part-00003.arrow", "zstd/part-00003.arrow"}
    sent_first = max(events.index(("sent", name)) for name in first)
    others = [i for i, (kind, name) in enumerate(events) if kind == "get" and name not in first]
    assert others and min(others) > sent_first, events  # nothing else asked for until the first task's files came
    outstanding, most = 0, 0
    for kind, _ in events[sent_first + 1:]:
        outstanding += 1 if kind == "get" else -1
        most = max(most, outstanding)
    assert most >= 2, events  # then several requests at once
    store.close()
