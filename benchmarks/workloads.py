"""The benchmark workloads: data, and a per-sample function written once.

Every loader runs a workload the same way: sample ``i`` is
``w.read(i)`` (by default ``(data[i], index[i])``, read from a NumPy
array or memory map), and the workload's ``fn`` turns it into a tuple of
arrays whose last element is the index. The index travels with the sample
through every loader, so the runner can check that each epoch delivers
every sample exactly once, whatever the loader did in between. Random
augmentation draws from a generator seeded by ``(SEED, index)``, so every
loader's output can be checked against one reference.

Besides the shared function, a workload may name *native* loaders: each
library's idiomatic path where it has one (tf.data's own image ops,
feedline.vision with ``map_batch``, a peer's own file format). They run
their own code, so their output is checked for shape, dtype and
exactly-once, not against the reference.

Data is generated deterministically from a fixed seed. Workloads that need
files cache them under a temporary folder (`cache_dir`).

Add a workload: write its per-sample function at module level (so torch's
spawn workers, Grain's workers and feedline's process workers import it by
name instead of pickling a copy), a builder ``builder(quick) -> Workload``,
and register the builder in `WORKLOADS`.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GIL_ROUNDS", "WORKLOADS", "Workload", "build", "cache_dir", "collate", "digests", "gil_augment"]

SEED = 20240917

# Rounds of the pure-Python loop in `gil_augment`: 1600 rounds over 64 values
# measured ~5 ms a sample on the 2-core AMD EPYC benchmark host (Python
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
        data: ``(N, ...)`` array (or memory map, or array of paths); row ``i``
            is sample ``i``'s input.
        index: ``arange(N)`` as int64 (derived from ``data``); carried
            through every loader for the exactly-once check.
        batch_size: samples per batch.
        fn: ``fn((row, index)) -> (array, ..., index)``, the per-sample
            work (module-level, picklable by reference), or None for identity.
        description: one line for RESULTS.md.
        cpu_bound: whether the 2-core ideal (2x the serial loop) applies.
        hand: keyword arguments of feedline's best hand setting of ``map``
            (None: no map at all, the bulk gather), with ``hand_why``.
        native: loader name -> factory ``(Workload) -> context manager of a
            Run`` for this workload's idiomatic paths.
        notes: loader name -> what the native loader runs, for RESULTS.md.
        skipped: loader name -> why it is not run on this workload.
        native_exact: native loaders that run the shared function (on their
            own file format), so their output must equal the reference.
        files: format -> path of the data files native loaders read.
    """

    name: str
    data: np.ndarray
    batch_size: int
    fn: Callable | None
    description: str
    cpu_bound: bool = True
    hand: dict | None = None
    hand_why: str = ""
    native: dict = field(default_factory=dict)
    notes: dict = field(default_factory=dict)
    skipped: dict = field(default_factory=dict)
    native_exact: set = field(default_factory=set)
    files: dict = field(default_factory=dict)
    index: np.ndarray = field(init=False)

    def __post_init__(self):
        self.index = np.arange(len(self.data), dtype=np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def read(self, i: int):
        """Sample ``i`` as every loader reads it: ``(data[i], index[i])``."""
        return self.data[i], self.index[i]

    def sample(self, i: int) -> tuple:
        """Sample ``i`` after the per-sample function: a batch row, index last."""
        s = self.read(i)
        return s if self.fn is None else self.fn(s)


def collate(rows) -> tuple:
    """Rows ``(a, b, ..., index)`` -> batch ``(stack(a), stack(b), ..., index array)``."""
    return tuple(np.stack(column) for column in zip(*rows))


def digests(batch) -> list[tuple]:
    """One ``(shape, dtype, hash)`` tuple per row of ``batch`` (its arrays but the index).

    What the reference check compares: equal digests mean bit-identical
    rows, and a digest is a few bytes, so the reference of a workload with
    megabyte samples is kept whole in memory.
    """
    arrays = [np.asarray(a) for a in batch[:-1]]
    out = []
    for r in range(len(batch[-1])):
        h = hashlib.blake2b(digest_size=12)
        shapes = []
        for a in arrays:
            row = np.ascontiguousarray(a[r])
            shapes.append((row.shape, row.dtype.str))
            h.update(row.data)
        out.append((tuple(shapes), h.digest()))
    return out


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
        batch_size=32,
        fn=gil_augment,
        description=f"{n} samples; pure-Python loop over {GIL_VALUES} floats x {GIL_ROUNDS} rounds "
        "(holds the GIL); batch 32",
        hand={"backend": "process", "workers": 2},
        hand_why="the function holds the GIL, so only processes run it in parallel",
    )


# --------------------------------------------------------------- tiny
def _tiny(quick: bool) -> Workload:
    n = 4_096 if quick else 50_000
    data = np.random.default_rng(SEED).integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
    return Workload(
        name="tiny",
        data=data,
        batch_size=256,
        fn=None,
        description=f"{n} samples of 3x32x32 uint8 from an in-memory array, identity; batch 256 "
        "(measures loader overhead)",
        cpu_bound=False,
        hand=None,
        hand_why="no per-sample work: `from_arrays(x, idx).batch(256)` gathers whole batches in the calling thread",
    )


# ---------------------------------------------------- the other modules'
def _jpeg(quick: bool) -> Workload:
    from .vision import jpeg_workload

    return jpeg_workload(quick)


def _seg(quick: bool) -> Workload:
    from .story2 import seg_workload

    return seg_workload(quick)


def _audio(quick: bool) -> Workload:
    from .audio import audio_workload

    return audio_workload(quick)


def _store(quick: bool) -> Workload:
    from .vision import store_workload

    return store_workload(quick)


WORKLOADS: dict[str, Callable[[bool], Workload]] = {
    "jpeg": _jpeg,
    "seg": _seg,
    "gil": _gil,
    "audio": _audio,
    "tiny": _tiny,
    "store": _store,
}


def build(name: str, quick: bool = False) -> Workload:
    """The workload called ``name`` (full size, or small with ``quick``)."""
    try:
        builder = WORKLOADS[name]
    except KeyError:
        raise ValueError(f"unknown workload {name!r}; choose from {', '.join(WORKLOADS)}") from None
    return builder(quick)


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
