"""Remote stores (issue 18): the same store read from local disk and from S3 on localhost, warm and cold cache.

Run (from the repository root, in the project's virtualenv with ``.[test]``):

    python -m benchmarks.remote_store            # ~2-3 minutes on a shared 2-core host; prints the table
    python -m benchmarks.remote_store --in-order # the same without shuffle()
    python -m benchmarks.remote_store --quick    # smoke test, ~30 s

The store: ``--samples`` 128x128 RGB images stored ``jpeg:90`` (~6 kB each;
decoded on read, as an ImageNet-style training input is) and an int64
label, 256 rows per file. The pipeline, identical for every variant:
``from_store(x).shuffle(seed).map(augment, backend="thread", workers=2).batch(64)``
(``--in-order``: without ``shuffle``)
where ``augment`` takes a seeded random 112x112 crop and flip and scales to
float32. Variants:
- ``local``: the store on local disk, in the page cache (read once before timing).
- ``S3 warm``: the store on moto's S3 server (``tests/remote_servers.py``,
  in a process of its own, 20 ms added to every request), every file
  already in the local cache (an epoch was read before).
- ``S3 cold``: the same with an empty cache: every file is downloaded
  during the epoch (read-ahead: 8 requests in flight).
- ``S3 cold, no read-ahead``: the same, each file fetched by the worker
  that first needs it (what read-ahead is worth).
- ``HTTP cold`` / ``HTTP cold, 1% failing``: the store's folder on a
  plain HTTP server (``tests/remote_servers.HttpServer``, in a process of
  its own, 20 ms per request), empty cache; in the second, 1 % of the GETs
  (``--fail-rate``)
  fail (a 500, a reset connection or a truncated body, seeded): the epoch
  must still deliver every sample once, and the table gives the failed
  requests the server injected and the retries `stats()` counted.
One epoch per measurement (worker start-up included), ``--reps`` rounds
alternating the variants, medians; before each, a wait for a quiet machine,
and a run during which other processes used over 10 % of the cores is
redone (twice at most; the table shows the worst foreign load kept); the first batches of every variant are
checked bit-identical before timing. Reported: samples/s, time to the
first batch, the ratio to local, and the CPU seconds per epoch of the
loader (this process and its workers) and of the S3 server: on a shared
host, where samples/s move with other processes' load, equal CPU seconds
say that a variant costs the same.

Last run: benchmarks/history/undated-remote-stores.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import runner
from .tables import markdown_table

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LATENCY = 0.02  # seconds added to every S3 request (the target setting)
ROWS_PER_FILE = 256


def augment(sample, rng):
    """A seeded random 112x112 crop and horizontal flip, scaled to float32."""
    image = sample["image"]
    top, left = rng.integers(0, image.shape[0] - 112 + 1), rng.integers(0, image.shape[1] - 112 + 1)
    crop = image[top:top + 112, left:left + 112]
    if rng.random() < 0.5:
        crop = crop[:, ::-1]
    return crop.astype(np.float32) * (1 / 255), sample["label"]


def make_store(path: str, samples: int) -> None:
    from feedline.store import StoreWriter

    rng = np.random.default_rng(0)
    with StoreWriter(path, encodings={"image": "jpeg:90"}, rows_per_file=ROWS_PER_FILE, overwrite=True) as writer:
        for start in range(0, samples, 512):
            n = min(512, samples - start)
            # smooth images (a gradient plus noise) compress like photos do
            base = np.linspace(0, 200, 128, dtype=np.float32)[None, :, None]
            noise = rng.normal(0, 12, (n, 128, 128, 3)).astype(np.float32)
            images = np.clip(base + noise + rng.integers(0, 40, (n, 1, 1, 3)), 0, 255).astype(np.uint8)
            writer.write({"image": images, "label": np.arange(start, start + n, dtype=np.int64)})


class S3Process:
    """moto's S3 server (tests/remote_servers.py) in a process of its own, so it does not share our GIL."""

    def __init__(self, latency: float):
        code = ("import sys; sys.path.insert(0, 'tests'); from remote_servers import S3Server; "
                f"s = S3Server(latency={latency!r}).start(); print(s.endpoint, flush=True); sys.stdin.read()")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.endpoint = self.proc.stdout.readline().strip()
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from remote_servers import CREDENTIALS

        self.storage_options = {**CREDENTIALS, "endpoint_url": self.endpoint, "client_kwargs": {"region_name": "us-east-1"}}

    def upload(self, folder: str, bucket: str, prefix: str) -> str:
        import boto3

        client = boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1",
                              aws_access_key_id=self.storage_options["key"], aws_secret_access_key=self.storage_options["secret"])
        client.create_bucket(Bucket=bucket)
        for here, _, names in os.walk(folder):
            for name in names:
                full = os.path.join(here, name)
                client.upload_file(full, bucket, "/".join([prefix, *os.path.relpath(full, folder).split(os.sep)]))
        return f"s3://{bucket}/{prefix}"

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


class HttpProcess:
    """``tests/remote_servers.HttpServer`` over ``root`` in a process of its own; ``rate`` of its GETs fail."""

    def __init__(self, root: str, latency: float, rate: float):
        code = ("import sys; sys.path.insert(0, 'tests'); from remote_servers import Faults, HttpServer; "
                f"s = HttpServer({root!r}, latency={latency!r}, faults=Faults(rate={rate!r})).start(); "
                "print(s.url(), flush=True)\n"
                "for line in sys.stdin: print(len(s.injected), flush=True)")
        self.proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()

    def injected(self) -> int:
        """Failures injected so far."""
        self.proc.stdin.write("count\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


SHUFFLE = [True]  # --in-order sets it to False


def pipeline(source, cache_dir=None, storage_options=None, read_ahead=True):
    import feedline as fl

    remote = {} if cache_dir is None else {"cache_dir": cache_dir, "storage_options": storage_options, "read_ahead": read_ahead}
    pipe = fl.from_store(source, **remote)
    if SHUFFLE[0]:
        pipe = pipe.shuffle(seed=0)
    return pipe.map(augment, backend="thread", workers=2).batch(64)


def _process_cpu(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def epoch(pipe, server_pid: int | None = None) -> dict:
    """One epoch: seconds, samples, seconds to the first batch, and the share of the cores other processes used."""
    busy0, cpu0, server0 = runner._machine_busy_seconds(), runner._cpu_seconds(), _process_cpu(server_pid or 0)
    t0 = time.perf_counter()
    first, samples = None, 0
    with pipe:
        for _images, labels in pipe:
            if first is None:
                first = time.perf_counter() - t0
            samples += len(labels)
        counts = pipe.stats().source_counts
    wall = time.perf_counter() - t0
    server_cpu = _process_cpu(server_pid or 0) - server0
    cpu = runner._cpu_seconds() - cpu0
    busy1 = runner._machine_busy_seconds()
    foreign = 0.0 if busy0 is None or busy1 is None else max(0.0, busy1 - busy0 - cpu - server_cpu) / (wall * runner.cores())
    return {"seconds": wall, "samples": samples, "first": first, "foreign": foreign, "cpu": cpu, "server_cpu": server_cpu,
            "retries": counts.get("remote download retries", 0), "failures": counts.get("remote downloads failed", 0)}


def first_batches(pipe, count=3) -> list:
    out = []
    with pipe:
        for images, labels in pipe:
            out.append((np.array(images), np.array(labels)))
            if len(out) == count:
                break
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.remote_store")
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="2048 samples, 1 rep: a smoke test")
    p.add_argument("--max-wait", type=float, default=120.0,
                   help="seconds to wait for a quiet machine before each run; a run with over 10 %% foreign load is redone twice")
    p.add_argument("--in-order", action="store_true", help="no shuffle: the epoch reads the files in order")
    p.add_argument("--fail-rate", type=float, default=0.01, help="share of the GETs that fail in the failing HTTP variant")
    args = p.parse_args(argv)
    SHUFFLE[0] = not args.in_order
    if args.quick:
        args.samples, args.reps, args.max_wait = 2048, 1, 0.0
    work = tempfile.mkdtemp(prefix="feedline-remote-bench-")
    server = S3Process(LATENCY)
    web = failing = None
    try:
        path = os.path.join(work, "bench.store")
        make_store(path, args.samples)
        files = [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f.endswith(".arrow")]
        size = sum(os.path.getsize(f) for f in files)
        url = server.upload(path, "bench", "bench.store")
        web, failing = HttpProcess(work, LATENCY, 0.0), HttpProcess(work, LATENCY, args.fail_rate)
        http_url, failing_url = web.url + "bench.store", failing.url + "bench.store"
        failing_name = f"HTTP cold, {args.fail_rate:.0%} failing"
        print(f"store: {args.samples} samples, {len(files)} files, {size / 1e6:.1f} MB; S3 at {server.endpoint}, "
              f"{LATENCY * 1000:.0f} ms per request")
        warm_dir = os.path.join(work, "warm-cache")
        epoch(pipeline(url, warm_dir, server.storage_options))  # fills the warm cache
        epoch(pipeline(path))  # the local store into the page cache
        reference = first_batches(pipeline(path))
        for name, pipe in (("S3 warm", pipeline(url, warm_dir, server.storage_options)),
                           ("S3 cold", pipeline(url, os.path.join(work, "check-cache"), server.storage_options))):
            got = first_batches(pipe)
            if not all(np.array_equal(a, c) and np.array_equal(b, d) for (a, b), (c, d) in zip(reference, got)):
                raise SystemExit(f"benchmarks.remote_store: {name} gives batches that differ from the local store's")
        print("checked: remote batches are bit-identical to the local store's")

        variants = {
            "local": lambda rep: pipeline(path),
            "S3 warm": lambda rep: pipeline(url, warm_dir, server.storage_options),
            "S3 cold": lambda rep: pipeline(url, os.path.join(work, f"cold-{rep}-{time.monotonic_ns()}"), server.storage_options),
            "S3 cold, no read-ahead": lambda rep: pipeline(
                url, os.path.join(work, f"cold-plain-{rep}-{time.monotonic_ns()}"), server.storage_options, read_ahead=False),
            "HTTP cold": lambda rep: pipeline(http_url, os.path.join(work, f"http-{rep}-{time.monotonic_ns()}"), {}),
            failing_name: lambda rep: pipeline(failing_url, os.path.join(work, f"fail-{rep}-{time.monotonic_ns()}"), {}),
        }
        servers = {"HTTP cold": web, failing_name: failing}
        runs = {name: [] for name in variants}
        names = list(variants)
        for rep in range(args.reps):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                host = servers.get(name, server)
                for _attempt in range(3):
                    runner.wait_quiet(args.max_wait, log=lambda *_: None)
                    injected = host.injected() if host is failing else 0
                    m = epoch(variants[name](rep), host.proc.pid)
                    m["injected"] = (host.injected() if host is failing else 0) - injected
                    if m["foreign"] <= 0.10:
                        break
                if m["samples"] != args.samples:
                    raise SystemExit(f"benchmarks.remote_store: {name} delivered {m['samples']} of {args.samples} samples")
                runs[name].append(m)
                print(f"    {name:22s} rep {rep}: {m['samples'] / m['seconds']:8.0f} samples/s, first batch {m['first']:.3f} s, "
                      f"foreign load {m['foreign']:.0%}")
        load = os.getloadavg()
        local_rate = statistics.median(m["samples"] / m["seconds"] for m in runs["local"])
        rows = []
        for name in names:
            ms = runs[name]
            rate = statistics.median(m["samples"] / m["seconds"] for m in ms)
            rows.append([name, f"{rate:.0f}", f"{rate / local_rate:.2f}", f"{statistics.median(m['first'] for m in ms):.3f}",
                         f"{statistics.median(m['cpu'] for m in ms):.2f}", f"{statistics.median(m['server_cpu'] for m in ms):.2f}",
                         f"{max(m['foreign'] for m in ms):.0%}",
                         f"{sum(m['injected'] for m in ms)} / {sum(m['retries'] for m in ms)} / {sum(m['failures'] for m in ms)}"])
        header = ["variant", f"samples/s (median of {args.reps})", "vs local", "first batch (s)", "CPU s, loader",
                  "CPU s, server", "foreign load (max)", "failed requests / retries / gave up (all reps)"]
        print("\n" + markdown_table(header, rows, "lrrrrrrr"))
        print(f"\nload average during the run: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    finally:
        server.close()
        for http in (web, failing):
            if http is not None:
                http.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
