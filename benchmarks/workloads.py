"""The benchmark workloads: data, and a per-sample function written once.

Every loader runs the same workload the same way: sample ``i`` is
``(data[i], index[i])``, read from NumPy arrays, and the workload's
``fn`` (if any) turns it into ``(array, index)``. The index travels with
the sample through every loader, so the runner can check that each epoch
delivers every sample exactly once, whatever the loader did in between.

Data is generated deterministically from a fixed seed. Workloads that need
files cache them under a temporary folder (`cache_dir`); the two here are
small enough to build in memory, in well under a second.

Add a workload: write its per-sample function at module level (so that
torch's spawn workers and feedline's process workers import it by name
instead of pickling a copy), then a builder that returns a `Workload`, and
register it in `WORKLOADS`.
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["GIL_ROUNDS", "WORKLOADS", "Workload", "build", "cache_dir", "gil_augment"]

SEED = 20240917

# Rounds of the pure-Python loop in `gil_augment`: 900 rounds over 64 values
# measured 5.2 ms a sample on the 2-core AMD EPYC benchmark host (Python
# 3.11). A constant, not a run-time calibration, so every worker process and
# every machine runs exactly the same code; RESULTS.md records the per-sample
# time measured on the machine that ran it.
GIL_ROUNDS = 1600
GIL_VALUES = 64


@dataclass
class Workload:
    """One benchmark workload.

    Attributes:
        name: the ``--workload`` name.
        data: ``(N, ...)`` array; row ``i`` is sample ``i``'s input.
        index: ``(N,)`` int64 array, ``index[i] == i``; carried through
            every loader for the exactly-once check.
        batch_size: samples per batch.
        fn: ``fn((row, index)) -> (array, index)``, the per-sample work
            (module-level, picklable by reference), or None for identity.
        description: one line for RESULTS.md.
    """

    name: str
    data: np.ndarray
    index: np.ndarray
    batch_size: int
    fn: Callable | None
    description: str

    def __len__(self) -> int:
        return len(self.index)

    def read(self, i: int):
        """Sample ``i`` as every loader reads it: ``(data[i], index[i])``."""
        return self.data[i], self.index[i]

    def sample(self, i: int):
        """Sample ``i`` after the per-sample function: what a batch row holds."""
        s = self.read(i)
        return s if self.fn is None else self.fn(s)


def cache_dir() -> str:
    """Where generated data files are cached (``$FEEDLINE_BENCH_CACHE`` or a temp folder)."""
    path = os.environ.get("FEEDLINE_BENCH_CACHE") or os.path.join(tempfile.gettempdir(), "feedline-bench")
    os.makedirs(path, exist_ok=True)
    return path


# ---------------------------------------------------------------- gil
def gil_augment(sample):
    """CPU-bound augmentation in pure Python: it holds the GIL all the time.

    A stand-in for the per-pixel Python a user writes (a hand-rolled colour
    jitter, a tokenizer, a Python-level parser): ``GIL_ROUNDS`` passes of
    arithmetic over a list of ``GIL_VALUES`` floats. Deterministic: the
    output depends only on the input row.
    """
    row, index = sample
    vals = row.tolist()
    n = len(vals)
    for r in range(GIL_ROUNDS):
        shift = 0.0003 * r
        for k in range(n):
            v = vals[k] * 1.0001 + shift
            if v >= 1.0:
                v -= 1.0
            vals[k] = v
    return np.asarray(vals, dtype=np.float32), index


def _gil(quick: bool) -> Workload:
    n = 128 if quick else 640
    data = np.random.default_rng(SEED).random((n, GIL_VALUES), dtype=np.float32)
    return Workload(
        name="gil",
        data=data,
        index=np.arange(n, dtype=np.int64),
        batch_size=32,
        fn=gil_augment,
        description=f"{n} samples; pure-Python loop over {GIL_VALUES} floats x {GIL_ROUNDS} rounds "
        "(holds the GIL); batch 32",
    )


# --------------------------------------------------------------- tiny
def _tiny(quick: bool) -> Workload:
    n = 20_000 if quick else 100_000
    data = np.random.default_rng(SEED).integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    return Workload(
        name="tiny",
        data=data,
        index=np.arange(n, dtype=np.int64),
        batch_size=256,
        fn=None,
        description=f"{n} samples of 3x32x32 uint8 from an in-memory array, identity; batch 256 "
        "(measures loader overhead)",
    )


WORKLOADS: dict[str, Callable[[bool], Workload]] = {"gil": _gil, "tiny": _tiny}


def build(name: str, quick: bool = False) -> Workload:
    """The workload called ``name`` (full size, or small with ``quick``)."""
    try:
        return WORKLOADS[name](quick)
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None


def per_sample_seconds(workload: Workload, samples: int = 20, rounds: int = 3) -> float | None:
    """Time of the per-sample function alone, in this process.

    The lowest of ``rounds`` medians over ``samples`` calls each: a burst of
    other work on the machine inflates one round, not all of them.
    """
    if workload.fn is None:
        return None
    medians = []
    for _ in range(rounds):
        times = []
        for i in range(min(samples, len(workload))):
            s = workload.read(i)
            t0 = time.perf_counter()
            workload.fn(s)
            times.append(time.perf_counter() - t0)
        medians.append(float(np.median(times)))
    return min(medians)
