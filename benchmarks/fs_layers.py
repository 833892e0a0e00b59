"""The filesystem layer (issue 18): fsspec (s3fs) against obstore, reading the same objects from the same S3 server.

Run (from the repository root, in the project's virtualenv with ``.[test]`` and ``obstore``):

    python -m benchmarks.fs_layers            # ~2-4 minutes on a shared 2-core host; prints the table
    python -m benchmarks.fs_layers --quick    # smoke test, fewer objects, one round

The server is moto's S3 (``tests/remote_servers.py``) in a process of its
own (`benchmarks.remote_store.S3Process`), with 20 ms added to every
request. The objects: ``--files`` files of ~1.7 MB (a store file's size at
256 rows of ~6.6 kB), ``--small`` objects of 16 kB, and ranged reads of
64 kB at seeded random offsets of the large files (what an uncached shard
read is). Each workload is read 1 and 8 requests at a time (threads over
the client's synchronous API, as feedline's read-ahead issues them), by
each client, alternating the clients, ``--reps`` rounds, medians; every
byte read is checked against the local copy before timing. Reported:
MB/s, requests/s, and the CPU seconds per GiB of this process (the client:
the server's CPU is not counted) -- on a shared host, MB/s move with the
others' load, CPU s per GiB less so.

Last run: benchmarks/history/2026-11-23-filesystem-layer-fsspec-vs-obstore.md.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from . import runner
from .remote_store import S3Process
from .tables import markdown_table

LATENCY = 0.02  # seconds added to every request
LARGE = 1_700_000  # bytes per large file
SMALL = 16 << 10  # bytes per small object
RANGE = 64 << 10  # bytes per ranged read
BUCKET, PREFIX = "fs-layers", "data"


def make_objects(folder: str, files: int, small: int) -> None:
    """``large/`` and ``small/`` under ``folder``, random bytes (incompressible; seeded)."""
    rng = random.Random(0)
    for sub, count, size in (("large", files, LARGE), ("small", small, SMALL)):
        os.makedirs(os.path.join(folder, sub))
        for i in range(count):
            with open(os.path.join(folder, sub, f"obj-{i:05d}.bin"), "wb") as f:
                f.write(rng.randbytes(size))


class Fsspec:
    """s3fs, as `Location` uses it: ``cat_file`` for a whole object or a byte range."""

    name = "fsspec (s3fs)"

    def __init__(self, options: dict):
        import fsspec

        self.fs = fsspec.filesystem("s3", **options)

    def get(self, key: str) -> bytes:
        return self.fs.cat_file(f"{BUCKET}/{PREFIX}/{key}")

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return self.fs.cat_file(f"{BUCKET}/{PREFIX}/{key}", start=start, end=start + length)


class Obstore:
    """obstore's S3Store (Rust, object_store): ``get(...).bytes()`` and ``get_range``."""

    name = "obstore"

    def __init__(self, options: dict):
        import obstore
        from obstore.store import S3Store

        self.obstore = obstore
        self.store = S3Store(BUCKET, endpoint=options["endpoint_url"], access_key_id=options["key"],
                             secret_access_key=options["secret"], region="us-east-1",
                             client_options={"allow_http": True})

    def get(self, key: str) -> bytes:
        return bytes(self.obstore.get(self.store, f"{PREFIX}/{key}").bytes())

    def get_range(self, key: str, start: int, length: int) -> bytes:
        return bytes(self.obstore.get_range(self.store, f"{PREFIX}/{key}", start=start, length=length))


def workloads(files: int, small: int, ranges: int) -> dict:
    """name -> list of (key, start, length) requests; length None: the whole object."""
    rng = random.Random(1)
    return {
        "large files": [(f"large/obj-{i:05d}.bin", 0, None) for i in range(files)],
        "small objects": [(f"small/obj-{i:05d}.bin", 0, None) for i in range(small)],
        "64 kB ranges": [(f"large/obj-{rng.randrange(files):05d}.bin", rng.randrange(LARGE - RANGE), RANGE)
                         for _ in range(ranges)],
    }


def fetch(client, request) -> bytes:
    key, start, length = request
    return client.get(key) if length is None else client.get_range(key, start, length)


def measure(client, requests: list, concurrency: int) -> dict:
    """Wall seconds, bytes and this process's CPU seconds of reading ``requests`` ``concurrency`` at a time."""
    cpu0, t0 = time.process_time(), time.perf_counter()
    if concurrency == 1:
        total = sum(len(fetch(client, r)) for r in requests)
    else:
        with ThreadPoolExecutor(concurrency) as pool:
            total = sum(len(b) for b in pool.map(lambda r: fetch(client, r), requests))
    return {"seconds": time.perf_counter() - t0, "cpu": time.process_time() - cpu0, "bytes": total,
            "requests": len(requests)}


def check(client, folder: str, requests: list) -> None:
    """Every byte a client returns equals the local copy's (a sample of the requests)."""
    for key, start, length in requests[:: max(1, len(requests) // 16)]:
        with open(os.path.join(folder, *key.split("/")), "rb") as f:
            f.seek(start)
            want = f.read() if length is None else f.read(length)
        if fetch(client, (key, start, length)) != want:
            raise SystemExit(f"benchmarks.fs_layers: {client.name} returned other bytes for {key} ({start}, {length})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fs_layers")
    p.add_argument("--files", type=int, default=64)
    p.add_argument("--small", type=int, default=1024)
    p.add_argument("--ranges", type=int, default=512)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--max-wait", type=float, default=120.0, help="seconds to wait for a quiet machine before each round")
    p.add_argument("--quick", action="store_true", help="16 files, 128 small objects, 64 ranges, 1 round")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.small, args.ranges, args.reps, args.max_wait = 16, 128, 64, 1, 0.0
    work = tempfile.mkdtemp(prefix="feedline-fs-layers-")
    server = S3Process(LATENCY)
    try:
        make_objects(work, args.files, args.small)
        server.upload(work, BUCKET, PREFIX)
        clients = [Fsspec(server.storage_options), Obstore(server.storage_options)]
        loads = workloads(args.files, args.small, args.ranges)
        for client in clients:
            for requests in loads.values():
                check(client, work, requests)
        print(f"checked: both clients return the local bytes; S3 at {server.endpoint}, {LATENCY * 1000:.0f} ms per request")
        runs: dict = {}
        for rep in range(args.reps):
            runner.wait_quiet(args.max_wait, log=lambda *_: None)
            for load, requests in loads.items():
                for concurrency in (1, 8):
                    for client in clients if rep % 2 == 0 else clients[::-1]:
                        m = measure(client, requests, concurrency)
                        runs.setdefault((load, concurrency, client.name), []).append(m)
                        print(f"    rep {rep} {load:13s} x{concurrency} {client.name:14s} {m['bytes'] / m['seconds'] / 1e6:7.1f} MB/s")
        load_avg = os.getloadavg()
        rows = [[load, concurrency, name,
                 f"{statistics.median(m['bytes'] / m['seconds'] for m in ms) / 1e6:.1f}",
                 f"{statistics.median(m['requests'] / m['seconds'] for m in ms):.0f}",
                 f"{statistics.median(m['cpu'] / (m['bytes'] / 2**30) for m in ms):.1f}"]
                for (load, concurrency, name), ms in runs.items()]
        header = ["workload", "in flight", "client", "MB/s", "requests/s", "client CPU s per GiB"]
        print("\n" + markdown_table(header, rows, "lrlrrr"))
        print(f"\nload average after the run: {load_avg[0]:.2f} {load_avg[1]:.2f} {load_avg[2]:.2f} on {os.cpu_count()} cores")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
