"""Workers that wait on the network: feedline's worker count against fixed ones (issue 15).

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks.io_workers            # ~1 minute
    python -m benchmarks.io_workers --latency 0.05 --samples 1000

A local HTTP server (`tests/remote_servers.HttpServer` in a process of its
own, so its threads do not share a GIL with any loader; 127.0.0.1 only) serves ``--samples`` files of 16 KiB and adds
``--latency`` seconds to every request, as object storage does. Each
loader's per-sample function GETs one file and returns its bytes as a
uint8 array; batches of 16; one epoch each, start-up included, loaders in
turn, ``--reps`` rounds, medians. Loaders:

- ``feedline-auto``: ``fl.from_arrays(urls).map(fetch).batch(16)``: the
  worker count starts at one per core and, once the first tasks show that
  the consumer waits on workers that use little CPU, grows at once by the
  tasks' wall/CPU ratio, up to 8 per core (`feedline.engine._autotune.WorkerTuner`).
- ``feedline-remembered``: the same, started on what an earlier run left
  (`feedline.engine._remembered`: the backend and the worker count the
  tuner reached; untimed runs whose trials agree leave them): every later run.
- ``feedline x2``: the same with ``workers=2`` (one per core, fixed).
- ``torch x2`` / ``torch x16``: DataLoader(num_workers=2 / 16) over the
  same function (fork), what a default and a tuned user would write.

The ideal is ``min(workers, samples) / latency`` requests per second; the
table gives samples/s and the speed-up over one worker per core.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from feedline.engine.choice import DEFAULT_POLICY

from .loaders import remembering_in
from .tables import markdown_table

HERE = os.path.dirname(os.path.abspath(__file__))


def fetch(url):
    with urllib.request.urlopen(str(url), timeout=30) as response:
        return np.frombuffer(response.read(), dtype=np.uint8)


def _feedline(urls, workers, memory: str = "0"):
    import feedline as fl

    with remembering_in(memory):
        pipe = fl.from_arrays(np.array(urls)).map(fetch, workers=workers).batch(16)
        with pipe:
            n = sum(len(b) for b in pipe)
            stats = pipe.stats()
    return n, f"{stats.backend} x{stats.workers}"


class _Urls:
    def __init__(self, urls):
        self.urls = urls

    def __len__(self):
        return len(self.urls)

    def __getitem__(self, i):
        return fetch(self.urls[i])


def _torch(urls, workers):
    import torch

    loader = torch.utils.data.DataLoader(_Urls(urls), batch_size=16, num_workers=workers)
    return sum(len(b) for b in loader), f"fork x{workers}"


_SERVE = """
import sys
sys.path.insert(0, sys.argv[1])
from remote_servers import HttpServer
with HttpServer(sys.argv[2], latency=float(sys.argv[3])) as web:
    print(web.url(""), flush=True)
    sys.stdin.read()  # until the benchmark closes our stdin
"""


@contextlib.contextmanager
def _server(root: str, latency: float):
    """The HTTP server in a child process; yields its base URL."""
    tests = os.path.join(os.path.dirname(HERE), "tests")
    proc = subprocess.Popen([sys.executable, "-c", _SERVE, tests, root, str(latency)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip().rstrip("/")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args(argv)
    memory_folder = tempfile.mkdtemp(prefix="feedline-io-memory-")
    atexit.register(shutil.rmtree, memory_folder, True)
    memory = os.path.join(memory_folder, "choices.json")
    loaders = {
        "feedline-auto": lambda urls: _feedline(urls, None),
        "feedline-remembered": lambda urls: _feedline(urls, None, memory),
        "feedline x2": lambda urls: _feedline(urls, 2),
        "torch x2": lambda urls: _torch(urls, 2),
        "torch x16": lambda urls: _torch(urls, 16),
    }
    with tempfile.TemporaryDirectory() as root:
        payload = os.urandom(16 * 1024)
        for i in range(args.samples):
            with open(os.path.join(root, f"{i:06d}.bin"), "wb") as f:
                f.write(payload)
        with _server(root, args.latency) as base_url:
            urls = [f"{base_url}/{i:06d}.bin" for i in range(args.samples)]
            rates = {name: [] for name in loaders}
            ran = {}
            for _ in range(DEFAULT_POLICY.remember.agree):  # untimed: the agreeing trials, which leave the verdict and worker count to start on
                loaders["feedline-remembered"](urls)
            for _ in range(args.reps):
                for name, run in loaders.items():
                    t0 = time.perf_counter()
                    n, ran[name] = run(urls)
                    assert n == args.samples, (name, n)
                    rates[name].append(n / (time.perf_counter() - t0))
    base = statistics.median(rates["feedline x2"])
    print(f"{args.samples} files of 16 KiB over HTTP, {args.latency * 1000:.0f} ms per request, batch 16, one epoch with start-up, "
          f"median of {args.reps}; {os.cpu_count()} cores")
    medians = {name: statistics.median(values) for name, values in rates.items()}
    print(markdown_table(["loader", "ran as (end of epoch)", "samples/s", "vs feedline x2"],
                         [[name, ran[name], f"{rate:,.0f}", f"{rate / base:.2f}x"] for name, rate in medians.items()], "llrr"))


if __name__ == "__main__":
    main()
