"""What the loader takes from the training step: short Python steps in the main thread while batches arrive (issue 58).

A training step on an accelerator is mostly the main thread launching
kernels: short stretches of Python. This loop stands in for it: for each
batch, ``--steps`` steps of ``--step-us`` microseconds of pure Python each,
every step timed. Batches come from two worker processes doing GIL-bound
work (a pure-Python loop of ``--ms`` per sample) on ``--samples`` samples,
batch 16: feedline ``backend="process"`` and torch's DataLoader
(``num_workers=2``) on the same per-sample work. Reported per loader:
the steps' median and 99th percentile (how much the loader's own threads
and hand-offs stretch the user's step), and the consumer's CPU per batch:
the main thread's CPU inside ``next()`` (``time.thread_time``) and, for
feedline, the CPU of its own threads in this process (accept thread and
the like, read through each thread's CPU clock). Rounds alternate the two
loaders; medians over rounds, and the range.

Run from the repository root (needs ``pip install torch``):

    python -m benchmarks.consumer_step                 # ~2 minutes on 2 cores
    python -m benchmarks.consumer_step --rounds 1      # smoke test

Last measured: benchmarks/RESULTS.md, "The training process left alone"; before:
benchmarks/history/2026-12-01-the-consumer-stays-light.md.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import threading
import time

import numpy as np


def python_work(x, ms: float):
    """Pure Python for about ``ms`` milliseconds (holds the GIL in its worker), then the sample."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass
    return np.full(64, x, np.float32)


class Work:
    """The same work as a torch ``Dataset`` (DataLoader's workers call ``[i]``)."""

    def __init__(self, n: int, ms: float):
        self.n, self.ms = n, ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return python_work(i, self.ms)


def step(us: float) -> None:
    """One training step's Python: about ``us`` microseconds of bytecode."""
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def own_threads_cpu() -> float:
    """CPU seconds used so far by feedline's threads in this process (each thread's CPU clock)."""
    total = 0.0
    for thread in threading.enumerate():
        if thread.name.startswith("feedline") and thread.ident is not None:
            try:
                total += time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
            except OSError:  # it ended meanwhile
                continue
    return total


def consume(batches, args) -> dict:
    """Run the step loop over one epoch of ``batches``: step times, and CPU inside ``next()`` per batch."""
    steps, inside, count = [], 0.0, 0
    threads_before = own_threads_cpu()
    it = iter(batches)
    while True:
        t0 = time.thread_time()
        try:
            next(it)
        except StopIteration:
            break
        inside += time.thread_time() - t0
        count += 1
        for _ in range(args.steps):
            s0 = time.perf_counter()
            step(args.step_us)
            steps.append(time.perf_counter() - s0)
    steps.sort()
    return {"median": statistics.median(steps) * 1e6, "p99": steps[int(0.99 * (len(steps) - 1))] * 1e6,
            "next_cpu": inside / count * 1e6, "threads_cpu": (own_threads_cpu() - threads_before) / count * 1e6}


def feedline_round(args) -> dict:
    import feedline as fl
    from feedline import testing

    fn = functools.partial(python_work, ms=args.ms)
    pipe = fl.from_arrays(np.arange(args.samples)).map(fn, backend="process", workers=2).batch(16)
    with pipe:
        list(pipe)  # workers up and warm, as in the DataLoader's persistent workers
        testing.wait_ready(pipe, 60)
        return consume(pipe, args)


def torch_round(args) -> dict:
    import torch.utils.data as tud

    loader = tud.DataLoader(Work(args.samples, args.ms), batch_size=16, num_workers=2, persistent_workers=True)
    list(loader)  # workers up and warm
    result = consume(loader, args)
    result["threads_cpu"] = float("nan")  # (no threads of its own in this process without pin_memory)
    del loader
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=640)
    parser.add_argument("--ms", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--step-us", type=float, default=200.0)
    args = parser.parse_args()
    rows = {"feedline process x2": [], "torch DataLoader x2": []}
    for r in range(args.rounds):
        order = list(rows) if r % 2 == 0 else list(rows)[::-1]
        for name in order:
            rows[name].append(feedline_round(args) if name.startswith("feedline") else torch_round(args))
    print("| loader | step median (us) | step p99 (us) | main thread in next() per batch (us CPU) | own threads per batch (us CPU) |")
    print("|---|---|---|---|---|")
    for name, runs in rows.items():
        cells = []
        for key in ("median", "p99", "next_cpu", "threads_cpu"):
            values = [run[key] for run in runs]
            cells.append(f"{statistics.median(values):,.0f} ({min(values):,.0f}-{max(values):,.0f})"
                         if not any(v != v for v in values) else "-")
        print(f"| {name} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
