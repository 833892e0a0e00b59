"""Per-batch cost of the Ray backend against the process backend, and when Ray pays.

Run: `python -m benchmarks.ray_overhead` (about 3 minutes on 2 cores; `--quick` for a
smoke run). It starts a local Ray instance (`ray.init(num_cpus=2, include_dashboard=False)`).

What it measures, on one machine: a source of (64, 64, 3) uint8 images (12 KiB each),
a `map` that returns the image (tiny work) or first spins 5 ms of Python (CPU-bound,
holds the GIL), batch 32 and 256, with `serial` and with 2 workers of `process` and
`ray`. Workers are started and warmed by one untimed epoch; the table is the best of
5 timed epochs, alternating between backends. "Overhead" is the wall time per batch
minus the ideal (serial time per batch / 2 workers); "vs serial" is the throughput ratio. Second table: the cost of one
Ray call carrying a batch-32 task, through a long-lived actor that holds the unpickled
pipeline (what the backend uses) and through a stateless Ray task given the pipeline as
an argument (which unpickles it on every call), with the tiny map.

Last result (2026-11-22 04:44 UTC, 2-core AMD EPYC VM, 24 GiB, Python 3.11.7, Ray 2.60.0,
NumPy 2.4.6; other benchmarks ran on the machine, load average 2.9 before, 3.3 after):

| work | batch | serial ms/batch | process ms/batch (overhead) | ray ms/batch (overhead) | process vs serial | ray vs serial |
|---|---|---|---|---|---|---|
| tiny | 32 | 0.11 | 0.32 (+0.26) | 2.62 (+2.57) | 0.34x | 0.04x |
| tiny | 256 | 0.98 | 1.27 (+0.78) | 6.25 (+5.76) | 0.77x | 0.16x |
| 5 ms/sample | 32 | 160.59 | 81.22 (+0.92) | 82.88 (+2.58) | 1.98x | 1.94x |
| 5 ms/sample | 256 | 1283.28 | 644.77 (+3.13) | 649.14 (+7.50) | 1.99x | 1.98x |

| Ray call, batch 32, tiny map | ms per call |
|---|---|
| actor holding the pipeline (used) | 2.13 |
| stateless task, pipeline as argument | 3.76 |

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


def tiny(x):
    return x


def busy_5ms(x):
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass
    return x


def measure(data: np.ndarray, fn, batch: int, epochs: int) -> dict[str, float]:
    """Best seconds per batch for each backend.

    The three pipelines are built and warmed first (one untimed epoch each, and every
    Ray actor ready), then timed epochs alternate between backends, so that load from
    other processes on the machine falls on all of them alike; the best epoch counts.
    """
    pipes = {}
    for backend in ("serial", "process", "ray"):
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
    parser.add_argument("--quick", action="store_true", help="small sizes, one timed epoch (smoke run)")
    args = parser.parse_args(argv)
    import ray

    load_before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    epochs = 1 if args.quick else 5
    rows = []
    for label, fn, samples in (("tiny", tiny, 4096), ("5 ms/sample", busy_5ms, 1024)):
        if args.quick:
            samples //= 8
        data = np.random.default_rng(0).integers(0, 255, (samples, *SHAPE), dtype=np.uint8)
        for batch in (32, 256):
            per = measure(data, fn, batch, epochs)
            ideal = per["serial"] / 2
            cells = [f"{per[b] * 1e3:.2f} ({(per[b] - ideal) * 1e3:+.2f})" for b in ("process", "ray")]
            ratios = [f"{per['serial'] / per[b]:.2f}x" for b in ("process", "ray")]
            rows.append(f"| {label} | {batch} | {per['serial'] * 1e3:.2f} | {cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} |")
            print(rows[-1], flush=True)
    data = np.random.default_rng(0).integers(0, 255, (1024, *SHAPE), dtype=np.uint8)
    actor_ms, task_ms = call_costs(data, 50 if args.quick else 300)
    ray.shutdown()
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


if __name__ == "__main__":
    main()
