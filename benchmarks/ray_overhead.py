"""Per-batch cost of the Ray backend against the process backend, and when Ray pays.

Run: `python -m benchmarks.ray_overhead` (about 4 minutes on 2 cores; `--cluster` adds a
simulated 3-node cluster, about 3 minutes more; `--quick` for a smoke run). It starts a local
Ray instance (`ray.init(address="local", num_cpus=2, include_dashboard=False)`).

What it measures, on one machine: a source of (64, 64, 3) uint8 images (12 KiB each),
a `map` that returns the image (tiny work) or first spins 5 ms of Python (CPU-bound,
holds the GIL), batch 32 and 256; and a map that makes a 512x512x3 uint8 image from the
index (768 KiB, next to no work), batch 64 (48 MiB). With `serial` and with 2 workers of
`process` and `ray`. Workers are started and warmed by one untimed epoch; the table is the best of
5 timed epochs, alternating between backends. "Overhead" is the wall time per batch
minus the ideal (serial time per batch / 2 workers); "vs serial" is the throughput ratio. Second table: the cost of one
Ray call carrying a batch-32 task, through a long-lived actor that holds the unpickled
pipeline (what the backend uses) and through a stateless Ray task given the pipeline as
an argument (which unpickles it on every call), with the tiny map. With `--cluster`, a third
table: the same workloads on `ray.cluster_utils.Cluster` (a head node with 0 CPUs for this
process, two 1-CPU worker nodes), so every batch is moved from another node's object store.

Last result (2026-11-23 18:06 UTC, `--cluster`, 2-core AMD EPYC VM, 24 GiB, Python 3.11.7,
Ray 2.60.0, NumPy 2.4.6; other agents' tests ran on the machine, load average 6.2 before,
4.5 after: rough numbers):

| work | batch | serial ms/batch | process ms/batch (overhead) | ray ms/batch (overhead) | process vs serial | ray vs serial |
|---|---|---|---|---|---|---|
| tiny | 32 | 0.12 | 0.37 (+0.31) | 1.96 (+1.90) | 0.31x | 0.06x |
| tiny | 256 | 0.97 | 1.40 (+0.92) | 3.77 (+3.29) | 0.69x | 0.26x |
| 5 ms/sample | 32 | 160.61 | 85.68 (+5.37) | 82.81 (+2.51) | 1.87x | 1.94x |
| 5 ms/sample | 256 | 1284.45 | 648.12 (+5.89) | 648.60 (+6.38) | 1.98x | 1.98x |
| 512x512x3 fill | 64 | 40.52 | 7.72 (-12.55) | 44.47 (+24.21) | 5.25x | 0.91x |

| Ray call, batch 32, tiny map | ms per call |
|---|---|
| actor holding the pipeline (used) | 3.14 |
| stateless task, pipeline as argument | 6.04 |

| work (simulated cluster, actors on 2 other nodes) | batch | MiB/batch | serial ms/batch | ray ms/batch (overhead) | ray vs serial | MiB/s moved |
|---|---|---|---|---|---|---|
| tiny | 32 | 0.38 | 0.15 | 5.57 (+5.49) | 0.03x | 67 |
| tiny | 256 | 3.00 | 0.94 | 13.26 (+12.79) | 0.07x | 226 |
| 5 ms/sample | 32 | 0.38 | 168.14 | 118.12 (+34.05) | 1.42x | 3 |
| 5 ms/sample | 256 | 3.00 | 1315.66 | 657.70 (-0.13) | 2.00x | 5 |
| 512x512x3 fill | 64 | 48.00 | 29.79 | 74.38 (+59.48) | 0.40x | 645 |

(The 5 ms/sample cluster rows are noisy under this load: a rerun gave +12 ms for batch 32 and
+185 ms for batch 256. The issue 8 run, 2026-11-22, is in benchmarks/history/undated-ray-backend-overhead.md.)

Story 2's per-sample CPU cost for docs/scaling.md's capacity model (`story2_pipeline`,
lowest of 5 runs, the one no other process disturbed): 8.34 ms/sample (decode + crop + class ids 6.68, collate
0.12, float + one-hot 1.54).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import numpy as np

import feedline as fl
from feedline import testing

SHAPE = (64, 64, 3)
LARGE = (512, 512, 3)  # 768 KiB a sample: a batch of 64 is 48 MiB


def tiny(x):
    return x


def busy_5ms(x):
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass
    return x


def large_image(i):
    """A 512x512x3 uint8 image made from the index: many bytes, next to no work (a fill)."""
    return np.full(LARGE, int(i) % 251, np.uint8)


def measure(data: np.ndarray, fn, batch: int, epochs: int, backends=("serial", "process", "ray")) -> dict[str, float]:
    """Best seconds per batch for each backend.

    The three pipelines are built and warmed first (one untimed epoch each, and every
    Ray actor ready), then timed epochs alternate between backends, so that load from
    other processes on the machine falls on all of them alike; the best epoch counts.
    """
    pipes = {}
    for backend in backends:
        workers = None if backend == "serial" else 2
        pipe = pipes[backend] = fl.from_arrays(data).map(fn, backend=backend, workers=workers).batch(batch)
        batches = sum(1 for _ in pipe)  # starts and warms the workers
        if backend == "ray":
            testing.wait_ready(pipe, 120)
    best = dict.fromkeys(pipes, float("inf"))
    for _ in range(epochs):
        for backend, pipe in pipes.items():
            start = time.perf_counter()
            for _ in pipe:
                pass
            best[backend] = min(best[backend], time.perf_counter() - start)
    for pipe in pipes.values():
        pipe.close()
    return {backend: seconds / batches for backend, seconds in best.items()}


def call_costs(data: np.ndarray, calls: int) -> tuple[float, float]:
    """ms per Ray call for a batch-32 task: actor holding the part vs stateless task."""
    import ray

    from feedline.backends.ray._actor import RayWorker, dumps_part, loads_part
    from feedline.worker import Task, run_task

    pipe = fl.from_arrays(data).map(tiny).batch(32)
    part = pipe.plan.part
    shipped = ray.put(dumps_part(part, ray.ObjectRef))
    tasks = [Task(0, k, indices=np.arange(k * 32, k * 32 + 32) % len(data)) for k in range(calls)]

    actor = ray.remote(RayWorker).options(num_cpus=1).remote(shipped)
    ray.get(actor.ready.remote())
    ray.get([actor.run.remote(t) for t in tasks[:10]])
    start = time.perf_counter()
    for t in tasks:
        ray.get(actor.run.remote(t))
    per_actor = (time.perf_counter() - start) / calls
    ray.kill(actor)

    @ray.remote(num_cpus=1)
    def stateless(shipped_part, task):
        data_, buffers, refs, _ = shipped_part
        return run_task(loads_part(data_, buffers, refs), task)

    ray.get([stateless.remote(shipped, t) for t in tasks[:10]])
    start = time.perf_counter()
    for t in tasks:
        ray.get(stateless.remote(shipped, t))
    per_task = (time.perf_counter() - start) / calls
    return per_actor * 1e3, per_task * 1e3


def batch_bytes(pipe: fl.Pipeline) -> int:
    """Bytes of the pipeline's first batch (all its arrays)."""
    from feedline._tree import flatten

    return sum(a.nbytes for a in flatten(next(iter(pipe)))[1])


def cluster_rows(epochs: int, quick: bool) -> list[str]:
    """The same workloads on a simulated cluster: every batch is made on another node and moved to the consumer's.

    Head node with 0 CPUs (this process, the trainer), two worker nodes with
    1 CPU each (`ray.cluster_utils.Cluster`, real raylets and object stores on
    this machine), 2 actors: each batch crosses from a worker node's object
    store to the head's, as between machines (over loopback here).
    """
    import ray
    from ray.cluster_utils import Cluster

    sim = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "object_store_memory": 1 << 30, "include_dashboard": False})
    for _ in range(2):
        sim.add_node(num_cpus=1, object_store_memory=1 << 30)
    ray.init(address=sim.address, log_to_driver=False)
    sim.wait_for_nodes()
    rows = []
    try:
        for label, data, fn, batch in workloads(quick):
            per = measure(data, fn, batch, epochs, backends=("serial", "ray"))
            probe = fl.from_arrays(data).map(fn, backend="serial").batch(batch)
            with probe:
                size = batch_bytes(probe)
            ideal = per["serial"] / 2
            rows.append(
                f"| {label} | {batch} | {size / 2**20:.2f} | {per['serial'] * 1e3:.2f} | {per['ray'] * 1e3:.2f} ({(per['ray'] - ideal) * 1e3:+.2f}) "
                f"| {per['serial'] / per['ray']:.2f}x | {size / per['ray'] / 2**20:.0f} |"
            )
            print(rows[-1], flush=True)
    finally:
        ray.shutdown()
        sim.shutdown()
    return rows


def workloads(quick: bool):
    """(label, data, map function, batch size) of each measured case; ``quick``: one batch size per work, small data."""
    small = np.random.default_rng(0).integers(0, 255, ((256 if quick else 4096), *SHAPE), dtype=np.uint8)
    busy = small[: (64 if quick else 1024)]
    yield "tiny", small, tiny, 32
    if not quick:
        yield "tiny", small, tiny, 256
    yield "5 ms/sample", busy, busy_5ms, 32
    if not quick:
        yield "5 ms/sample", busy, busy_5ms, 256
    yield "512x512x3 fill", np.arange(128 if quick else 512), large_image, 64


def story2_pipeline(count: int = 96) -> fl.Pipeline:
    """Story 2's pipeline on one core, for the capacity model in docs/scaling.md.

    From the repository root, ``python -c "import sys; from feedline.cli import main;
    sys.argv[1:] = ['bench', 'benchmarks.ray_overhead:story2_pipeline', '--batches', '32'];
    main()"`` prints the per-stage seconds (the ``feedline`` console script does not see
    the repository's ``benchmarks`` package): 512x512 PNG + colour mask decoded, cropped to 384x384, one-hot
    and float in map_batch (`benchmarks.story2`'s feedline.vision code), batch 3 (one
    GPU's share in story 2), serial so each stage's time is one core's work.
    """
    from benchmarks.story2 import dataset, feedline_batch, feedline_sample

    images, masks = dataset(count)
    samples = [(image, mask, i) for i, (image, mask) in enumerate(zip(images, masks, strict=True))]
    return fl.from_sequence(samples).shuffle(seed=0).map(feedline_sample, backend="serial").batch(3).map_batch(feedline_batch)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: batch 32 and 64 only, small data, one timed epoch")
    parser.add_argument("--cluster", action="store_true", help="also run the workloads on a simulated 3-node cluster (actors on other nodes)")
    args = parser.parse_args(argv)
    import ray

    load_before = os.getloadavg()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    epochs = 1 if args.quick else 5
    rows = []
    for label, data, fn, batch in workloads(args.quick):
        per = measure(data, fn, batch, epochs)
        ideal = per["serial"] / 2
        cells = [f"{per[b] * 1e3:.2f} ({(per[b] - ideal) * 1e3:+.2f})" for b in ("process", "ray")]
        ratios = [f"{per['serial'] / per[b]:.2f}x" for b in ("process", "ray")]
        rows.append(f"| {label} | {batch} | {per['serial'] * 1e3:.2f} | {cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} |")
        print(rows[-1], flush=True)
    data = np.random.default_rng(0).integers(0, 255, (1024, *SHAPE), dtype=np.uint8)
    actor_ms, task_ms = call_costs(data, 20 if args.quick else 300)
    ray.shutdown()
    cluster = cluster_rows(epochs, args.quick) if args.cluster else []
    print()
    print(f"host: {platform.node()} {platform.processor() or platform.machine()}, Python {sys.version.split()[0]}, "
          f"Ray {ray.__version__}, NumPy {np.__version__}; load average before {load_before[0]:.2f}, after {os.getloadavg()[0]:.2f}")
    print("| work | batch | serial ms/batch | process ms/batch (overhead) | ray ms/batch (overhead) | process vs serial | ray vs serial |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("| Ray call, batch 32, tiny map | ms per call |")
    print("|---|---|")
    print(f"| actor holding the pipeline (used) | {actor_ms:.2f} |")
    print(f"| stateless task, pipeline as argument | {task_ms:.2f} |")
    if cluster:
        print()
        print("| work (simulated cluster, actors on 2 other nodes) | batch | MiB/batch | serial ms/batch | ray ms/batch (overhead) | ray vs serial | MiB/s moved |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(cluster))


if __name__ == "__main__":
    main()
