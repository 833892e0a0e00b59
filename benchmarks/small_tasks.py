"""Small tasks on the process backend: how busy the workers are, and what the consumer pays per task (issue 14).

Two workloads where messaging, not the user's function, sets the speed:
- ``tiny``: a per-sample identity map over 3x32x32 uint8 samples, batch
  256 (~0.5 ms of work per batch): process x2 at the default prefetch
  depth (from the second epoch the engine puts several batches in a
  task, `Plan.groups_batches`) and at 4 tasks per worker (a depth set
  by hand: a batch per task), and torch's DataLoader (fork, 2 workers,
  the same map) beside them.
- ``unbatched``: ``from_arrays(arange(n)).map(add_one)`` without
  ``batch()`` (~1 us a sample): serial, threads and processes; from the
  second epoch the task size comes from the measured work per sample.
- ``heavy``: 40 samples of ~50 ms of GIL-holding Python each, without
  ``batch()`` (a Keras Sequence's items are such whole batches), one
  epoch with start-up in a fresh pipeline, against a plain loop: process
  x2 and the automatic choice (issue 14 asks >= 1.7x the loop for
  process x2: a first epoch must spread 40 samples over the workers).

Reported per loader: samples/s (median of the epochs after the first),
the workers' busy share (`Stats.worker_busy_share`) and the consumer's CPU
per task (this process's CPU time over the epoch, all threads, over the
tasks).

Run from the repository root:
    python -m benchmarks.small_tasks [--epochs 6] [--quick]

Last measured: benchmarks/history/2026-11-26-tenth-session-small-tasks.md.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from .tables import markdown_table


def identity(sample):
    return sample


def add_one(value):
    return value + 1


def heavy(value):
    """~50 ms of pure Python (holds the GIL), the same result every time."""
    total = 0
    for i in range(HEAVY_LOOP):
        total += i ^ int(value)
    return total


HEAVY_LOOP = 1_000_000  # ~50 ms on the 2-core machine of benchmarks/RESULTS.md


def _heavy_first_epochs(count: int, reps: int) -> list:
    """Seconds for one epoch of ``count`` heavy samples with start-up: a plain loop, process x2, automatic."""
    import feedline as fl

    samples = list(range(count))
    expected = [heavy(s) for s in samples]
    times = {"plain loop": [], "process x2": [], "automatic": []}
    ran_as = {"plain loop": "1 thread"}
    for _ in range(reps):
        t0 = time.perf_counter()
        assert [heavy(s) for s in samples] == expected
        times["plain loop"].append(time.perf_counter() - t0)
        for name, backend in (("process x2", "process"), ("automatic", None)):
            t0 = time.perf_counter()
            with fl.from_sequence(samples).map(heavy, backend=backend, workers=2) as pipe:
                got = list(pipe)
                stats = pipe.stats()
            times[name].append(time.perf_counter() - t0)
            if got != expected:
                raise SystemExit(f"benchmarks.small_tasks: {name} delivered other samples than the loop")
            ran_as[name] = f"{stats.backend} x{stats.workers}"
    loop = statistics.median(times["plain loop"])
    return [[name, ran_as[name], f"{statistics.median(t):.3f}", f"{loop / statistics.median(t):.2f}x"]
            for name, t in times.items()]


def _feedline_epochs(pipe, epochs: int, per_task: int) -> dict:
    rates, busy, consumer = [], [], []
    with pipe:
        for _ in range(epochs):
            t0, c0, rows = time.perf_counter(), time.process_time(), 0
            for item in pipe:
                rows += len(item) if per_task > 1 else 1
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            stats = pipe.stats()
            rates.append(rows / wall)
            busy.append(stats.worker_busy_share or 0.0)
            consumer.append(cpu / max(1, stats.tasks) * 1e6)
        ran_as = f"{stats.backend} x{stats.workers}"
    return {"ran as": ran_as, "rates": rates[1:] or rates, "busy": busy[1:] or busy, "consumer": consumer[1:] or consumer}


def _torch_epochs(data: np.ndarray, batch: int, epochs: int) -> dict:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Samples(Dataset):
        def __len__(self):
            return len(data)

        def __getitem__(self, i):
            return torch.from_numpy(identity(data[i]))

    rates = []
    loader = DataLoader(Samples(), batch_size=batch, num_workers=2, persistent_workers=True)
    for _ in range(epochs):
        t0, rows = time.perf_counter(), 0
        for item in loader:
            rows += len(item)
        rates.append(rows / (time.perf_counter() - t0))
    del loader
    return {"ran as": "fork x2, persistent", "rates": rates[1:] or rates, "busy": [], "consumer": []}


def _row(name: str, measured: dict) -> list:
    busy = f"{statistics.median(measured['busy']):.2f}" if measured["busy"] else "-"
    consumer = f"{statistics.median(measured['consumer']):,.0f}" if measured["consumer"] else "-"
    return [name, measured["ran as"], f"{statistics.median(measured['rates']):,.0f}", busy, consumer]


def main(argv=None) -> None:
    import feedline as fl

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6, help="epochs per loader; the first (start-up) is left out")
    parser.add_argument("--quick", action="store_true", help="small data and 2 epochs: a smoke test, not a measurement")
    args = parser.parse_args(argv)
    epochs = 2 if args.quick else args.epochs
    n_tiny, n_flat = (4_096, 20_000) if args.quick else (50_000, 200_000)

    tiny = np.random.default_rng(0).integers(0, 256, size=(n_tiny, 3, 32, 32), dtype=np.uint8)
    header = ["loader", "ran as", "samples/s", "workers busy", "consumer us/task"]
    rows = []
    for name, depth in (("process x2, default depth", None), ("process x2, 4 tasks/worker", 8)):
        pipe = fl.from_arrays(tiny).map(identity, backend="process", workers=2).batch(256)
        if depth:
            pipe = pipe.prefetch(depth)
        rows.append(_row(name, _feedline_epochs(pipe, epochs, 256)))
    try:
        rows.append(_row("torch DataLoader", _torch_epochs(tiny, 256, epochs)))
    except ImportError:
        rows.append(["torch DataLoader", "not installed", "-", "-", "-"])
    print(f"## tiny: identity map, {n_tiny} samples of 3x32x32 uint8, batch 256, {epochs} epochs\n")
    print(markdown_table(header, rows, "llrrr"))

    flat = np.arange(n_flat)
    rows = []
    for backend in ("serial", "thread", "process"):
        pipe = fl.from_arrays(flat).map(add_one, backend=backend, workers=1 if backend == "serial" else 2)
        rows.append(_row(backend, _feedline_epochs(pipe, epochs, 1)))
    print(f"\n## unbatched: add_one over {n_flat} integers, no batch(), {epochs} epochs\n")
    print(markdown_table(header, rows, "llrrr"))

    count, reps = (8, 1) if args.quick else (40, 3)
    print(f"\n## heavy: {count} samples of ~50 ms of Python, no batch(), one epoch with start-up, median of {reps}\n")
    print(markdown_table(["loader", "ran as", "seconds", "x plain loop"], _heavy_first_epochs(count, reps), "llrr"))


if __name__ == "__main__":
    main()
