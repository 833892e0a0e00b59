"""Remote data, feedline vs Mosaic Streaming and LitData (issue 18): the same samples from the same S3 server.

Run (from the repository root, in an environment with ``.[test]`` and the two peers):

    python -m benchmarks.remote_peers            # ~14 minutes on a loaded 2-core host; prints the table
    python -m benchmarks.remote_peers --max-wait 5 --retries 0   # what the last run used (a busy host)
    python -m benchmarks.remote_peers --quick    # smoke test: 1024 samples, one round (~1.5 minutes)

The peers: ``mosaicml-streaming`` (``import streaming``) and ``litdata``. Both
import torchvision, and torchvision from PyPI does not import beside the CPU
build of torch that feedline's CI pins, so they need an environment of their
own with a matching torch/torchvision pair (see benchmarks/RESULTS.md for the
one used last); feedline itself runs in that environment unchanged.

The data: ``--samples`` 128x128 RGB JPEGs (quality 90, ~6.7 kB) and an int64
label, made as `benchmarks.remote_store` makes them, written once by
feedline's `StoreWriter` (256 rows per file); the JPEG bytes are then read
back from the store's Arrow files and written unchanged in each peer's own
format, with the same 256 samples per shard: Mosaic's MDS
(``streaming.MDSWriter``) and LitData's chunks (``litdata.optimize``). All
three go to one moto S3 server (``tests/remote_servers.py``, in a process of
its own, 20 ms added to every request).

Each loader: decode the JPEG (`feedline.vision.decode`, simplejpeg, for all
three), a seeded random 112x112 crop and flip (`benchmarks.remote_store.augment`),
batches of 64, 2 workers, shuffled, one epoch:
- ``feedline auto``: ``from_store(url).shuffle(0).map(augment, workers=2).batch(64)``;
- ``feedline thread`` / ``feedline process``: the same with ``backend=`` set by hand;
- ``mosaic``: ``streaming.StreamingDataset(remote=url, local=cache, shuffle=True, batch_size=64)``
  (decode and augment in ``__getitem__``) in a ``torch.utils.data.DataLoader`` with 2 worker processes;
- ``litdata``: ``litdata.StreamingDataset(url, cache_dir=cache, shuffle=True, transform=...)`` in a
  ``litdata.StreamingDataLoader`` with 2 worker processes.
``cold``: an empty cache directory; ``warm``: the cache one earlier epoch of
the same loader filled. Every epoch runs in a fresh Python process (imports
not timed; dataset construction, worker start-up and every download are),
``--reps`` rounds with the loaders in a seeded shuffled order, medians. Every epoch
is checked: the labels delivered must be each sample's exactly once (a
loader that drops or repeats samples is reported and fails the run).
Reported: samples/s, time to the first batch, both as ratios to ``feedline
auto``, CPU seconds of the loader (its process and workers) and of the S3
server, and the share of the cores other processes took during the run.

Last run: benchmarks/history/undated-remote-data-feedline-vs-mosaic-streaming-and.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from . import runner
from .remote_store import LATENCY, ROWS_PER_FILE, S3Process, _process_cpu, augment, make_store

LOADERS = ("feedline auto", "feedline thread", "feedline process", "mosaic", "litdata")
PREFIX = {"feedline": "feedline.store", "mosaic": "mds", "litdata": "litdata"}  # object prefixes in the bucket
BATCH, WORKERS, SEED = 64, 2, 0


# --- the data, in three formats -------------------------------------------------------------------

def stored_jpegs(store: str) -> tuple[list, np.ndarray]:
    """The JPEG bytes and labels of a feedline store, in row order, read straight from its Arrow files."""
    import pyarrow as pa

    with open(os.path.join(store, "manifest.json")) as f:
        manifest = json.load(f)
    images, labels = [], []
    for part in manifest["files"]:
        with pa.memory_map(os.path.join(store, part["files"]["raw"]["name"])) as source:
            table = pa.ipc.open_file(source).read_all()
        images += [bytes(v) for v in table.column("image").to_pylist()]
        labels.append(table.column("label").to_numpy())
    return images, np.concatenate(labels)


def write_mds(folder: str, images: list, labels: np.ndarray) -> None:
    """Mosaic's MDS shards of ~``ROWS_PER_FILE`` samples (the shard size is set in bytes)."""
    from streaming import MDSWriter

    per_sample = sum(map(len, images)) / len(images) + 64
    with MDSWriter(out=folder, columns={"image": "bytes", "label": "int64"}, size_limit=int(per_sample * ROWS_PER_FILE)) as out:
        for image, label in zip(images, labels):
            out.write({"image": image, "label": int(label)})


def _litdata_item(pair):
    return {"image": pair[0], "label": int(pair[1])}


def write_litdata(folder: str, images: list, labels: np.ndarray) -> None:
    """LitData's optimized chunks of ``ROWS_PER_FILE`` samples, in sample order."""
    import litdata

    litdata.optimize(fn=_litdata_item, inputs=list(zip(images, labels.tolist())), output_dir=folder,
                     chunk_size=ROWS_PER_FILE, num_workers=1, reorder_files=False, verbose=False)


# --- one epoch of one loader (run in a fresh process) ---------------------------------------------

def decode_augment(image: bytes, label: int):
    """What every peer's worker does per sample: decode the JPEG, then `augment` it (rng seeded by sample)."""
    from feedline.vision import decode

    rng = np.random.default_rng([SEED, label])
    return augment({"image": decode(image, mode="RGB"), "label": label}, rng)


def _feedline_batches(spec: dict):
    import feedline as fl

    backend = None if spec["loader"] == "feedline auto" else spec["loader"].split()[1]
    pipe = (fl.from_store(spec["url"], storage_options=spec["storage_options"], cache_dir=spec["cache"])
            .shuffle(seed=SEED).map(augment, workers=WORKERS, backend=backend).batch(BATCH))
    with pipe:
        for _images, labels in pipe:
            yield np.asarray(labels)
        stats = pipe.stats()
        spec["ran_as"] = f"{stats.backend} x{stats.workers} ({stats.decision})"


def _mosaic_batches(spec: dict):
    import streaming
    import torch

    class Augmented(streaming.StreamingDataset):
        def __getitem__(self, index):
            sample = super().__getitem__(index)
            return decode_augment(sample["image"], int(sample["label"]))

    data = Augmented(remote=spec["url"], local=spec["cache"], shuffle=True, shuffle_seed=SEED, batch_size=BATCH)
    for _images, labels in torch.utils.data.DataLoader(data, batch_size=BATCH, num_workers=WORKERS):
        yield labels.numpy()


def _litdata_batches(spec: dict):
    import litdata
    from litdata.streaming import downloader

    # LitData downloads chunks with obstore, which refuses a plain-http endpoint unless allowed; its client
    # options are a module-level dict with no setting to pass this through (litdata 0.2.76).
    downloader._OBSTORE_CLIENT_OPTIONS["allow_http"] = "true"

    data = litdata.StreamingDataset(spec["url"], cache_dir=spec["cache"], shuffle=True, seed=SEED,
                                    storage_options=spec["litdata_options"],
                                    transform=lambda item: decode_augment(item["image"], int(item["label"])))
    for _images, labels in litdata.StreamingDataLoader(data, batch_size=BATCH, num_workers=WORKERS):
        yield labels.numpy()


def _setup(loader: str) -> None:
    """Untimed: import what ``loader`` needs, S3 clients included (workers inherit it); clear Mosaic's stale shared memory."""
    import feedline.vision  # noqa: F401  (the peers' decode_augment uses it)

    if loader.startswith("feedline"):
        import s3fs  # noqa: F401  (feedline imports it on the first URL)

        import feedline.store  # noqa: F401  (and pyarrow: `fl.from_store` imports them on first use)
    elif loader == "mosaic":
        import boto3.s3.transfer  # noqa: F401  (Mosaic imports it on the first download, in each worker)
        import torch  # noqa: F401
        from streaming.base.util import clean_stale_shared_memory

        clean_stale_shared_memory()  # a previous run's leftovers would make Mosaic refuse the cache folder
    elif loader == "litdata":
        import litdata  # noqa: F401


def one_epoch(spec: dict) -> dict:
    """Time one epoch of ``spec["loader"]``; check that every label arrives exactly once."""
    batches = {"mosaic": _mosaic_batches, "litdata": _litdata_batches}.get(spec["loader"], _feedline_batches)
    _setup(spec["loader"])
    cpu0 = runner._cpu_seconds()
    t0 = time.perf_counter()
    first, got = None, []
    for labels in batches(spec):
        if first is None:
            first = time.perf_counter() - t0
        got.append(labels)
    seconds = time.perf_counter() - t0
    counts = np.bincount(np.concatenate(got).astype(np.int64), minlength=spec["samples"])
    return {"seconds": seconds, "first": first, "samples": int(counts.sum()), "cpu": runner._cpu_seconds() - cpu0,
            "missing": int((counts == 0).sum()), "repeated": int((counts > 1).sum()), "extra": int(len(counts) - spec["samples"]),
            "ran_as": spec.get("ran_as", "")}


def run_child(spec: dict, env: dict) -> dict:
    """`one_epoch` in a fresh interpreter; its result, plus the CPU its whole process tree used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "benchmarks.remote_peers", "--epoch", json.dumps(spec)],
                          cwd=runner_root(), env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.remote_peers: {spec['loader']} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["tree_cpu"] = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return result


def runner_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --- the run ---------------------------------------------------------------------------------------

def _versions() -> str:
    from importlib.metadata import version

    names = ("feedline", "mosaicml-streaming", "litdata", "torch", "s3fs", "moto")
    return ", ".join(f"{n} {version(n)}" for n in names)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.remote_peers")
    p.add_argument("--samples", type=int, default=16384)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="1024 samples, 1 round: a smoke test")
    p.add_argument("--loaders", default=",".join(LOADERS), help="comma-separated subset of: " + ", ".join(LOADERS))
    p.add_argument("--max-wait", type=float, default=60.0,
                   help="seconds to wait for a quiet machine before each epoch")
    p.add_argument("--retries", type=int, default=2, help="redo an epoch during which other processes used over 10 %% of the cores, this many times")
    p.add_argument("--epoch", help=argparse.SUPPRESS)  # internal: one epoch, as a child process
    args = p.parse_args(argv)
    if args.epoch:
        print(json.dumps(one_epoch(json.loads(args.epoch))))
        return
    if args.quick:
        args.samples, args.reps, args.max_wait = 1024, 1, 0.0
    loaders = [name.strip() for name in args.loaders.split(",")]
    unknown = sorted(set(loaders) - set(LOADERS))
    if unknown:
        raise SystemExit(f"benchmarks.remote_peers: unknown --loaders {unknown}; choose from {', '.join(LOADERS)}")
    work = tempfile.mkdtemp(prefix="feedline-peers-bench-")
    server = S3Process(LATENCY)
    try:
        store = os.path.join(work, "local", PREFIX["feedline"])
        make_store(store, args.samples)
        images, labels = stored_jpegs(store)
        if not np.array_equal(labels, np.arange(args.samples)):
            raise SystemExit("benchmarks.remote_peers: the store's labels are not 0..n-1; the exactly-once check needs them")
        write_mds(os.path.join(work, "local", PREFIX["mosaic"]), images, labels)
        write_litdata(os.path.join(work, "local", PREFIX["litdata"]), images, labels)
        urls = {kind: server.upload(os.path.join(work, "local", prefix), "bench", prefix) for kind, prefix in PREFIX.items()}
        sizes = {kind: _folder_size(os.path.join(work, "local", prefix)) for kind, prefix in PREFIX.items()}
        print(f"{args.samples} samples, {sum(map(len, images)) / len(images) / 1e3:.1f} kB per JPEG; on S3 at {server.endpoint} "
              f"({LATENCY * 1000:.0f} ms per request): " + ", ".join(f"{k} {n} files / {b / 1e6:.1f} MB" for k, (n, b) in sizes.items()))
        print(_versions())
        credentials = server.storage_options
        env = {**os.environ, "S3_ENDPOINT_URL": server.endpoint, "AWS_ACCESS_KEY_ID": credentials["key"],
               "AWS_SECRET_ACCESS_KEY": credentials["secret"], "AWS_DEFAULT_REGION": "us-east-1"}
        litdata_options = {"endpoint_url": server.endpoint, "aws_access_key_id": credentials["key"],
                           "aws_secret_access_key": credentials["secret"], "region_name": "us-east-1"}

        def spec(loader: str, cache: str) -> dict:
            kind = loader.split()[0]
            return {"loader": loader, "url": urls[kind], "cache": cache, "samples": args.samples,
                    "storage_options": credentials, "litdata_options": litdata_options}

        warm = {name: os.path.join(work, "warm-" + name.replace(" ", "-")) for name in loaders}
        for name in loaders:  # fills each warm cache, and checks every loader once before timing
            _check(name, "fill", run_child(spec(name, warm[name]), env), args.samples)
        runs = {(name, cache): [] for name in loaders for cache in ("cold", "warm")}
        order = list(runs)
        for rep in range(args.reps):
            for name, cache in random.Random(rep).sample(order, len(order)):
                for _attempt in range(1 + args.retries):
                    runner.wait_quiet(args.max_wait, log=lambda *_: None)
                    folder = warm[name] if cache == "warm" else os.path.join(work, f"cold-{time.monotonic_ns()}")
                    busy0, server0, t0 = runner._machine_busy_seconds(), _process_cpu(server.proc.pid), time.perf_counter()
                    m = run_child(spec(name, folder), env)
                    wall, server_cpu = time.perf_counter() - t0, _process_cpu(server.proc.pid) - server0
                    busy1 = runner._machine_busy_seconds()
                    m["server_cpu"] = server_cpu
                    m["foreign"] = 0.0 if busy0 is None or busy1 is None else \
                        max(0.0, busy1 - busy0 - max(m["tree_cpu"], m["cpu"]) - server_cpu) / (wall * runner.cores())
                    if cache == "cold":
                        shutil.rmtree(folder, ignore_errors=True)
                    if m["foreign"] <= 0.10:
                        break
                _check(name, cache, m, args.samples)
                runs[(name, cache)].append(m)
                print(f"    {name:16s} {cache}, round {rep}: {m['samples'] / m['seconds']:7.0f} samples/s, "
                      f"first batch {m['first']:.3f} s, foreign load {m['foreign']:.0%}"
                      + (f", ran as {m['ran_as']}" if m.get("ran_as") else ""), flush=True)
        _table(runs, loaders, args.reps)
        load = os.getloadavg()
        print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)


def _folder_size(folder: str) -> tuple[int, int]:
    files = [os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs]
    return len(files), sum(map(os.path.getsize, files))


def _check(name: str, cache: str, m: dict, samples: int) -> None:
    """Stop the run if an epoch did not deliver every sample exactly once."""
    if m["missing"] or m["repeated"] or m["extra"] or m["samples"] != samples:
        raise SystemExit(f"benchmarks.remote_peers: {name} ({cache}) delivered {m['samples']} labels for {samples} samples: "
                         f"{m['missing']} missing, {m['repeated']} repeated, {m['extra']} out of range")


def _table(runs: dict, loaders: list, reps: int) -> None:
    def med(name, cache, key):
        return statistics.median(m[key] for m in runs[(name, cache)])

    def rate(name, cache):
        return statistics.median(m["samples"] / m["seconds"] for m in runs[(name, cache)])

    base = loaders[0]
    print(f"\n| loader | cache | samples/s (median of {reps}) | vs {base} | first batch (s) | vs {base} "
          "| CPU s, loader | CPU s, S3 server | foreign load (max) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for cache in ("cold", "warm"):
        for name in loaders:
            r, first = rate(name, cache), med(name, cache, "first")
            worst = max(m["foreign"] for m in runs[(name, cache)])
            print(f"| {name} | {cache} | {r:.0f} | {r / rate(base, cache):.2f} | {first:.3f} | "
                  f"{first / med(base, cache, 'first'):.2f} | {med(name, cache, 'cpu'):.1f} | "
                  f"{med(name, cache, 'server_cpu'):.1f} | {worst:.0%} |")


if __name__ == "__main__":
    main()
