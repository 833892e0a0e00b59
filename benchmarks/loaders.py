"""The loaders under test: one function per loader.

Each takes a `Workload` and returns a context manager that yields a
`Run`: an iterable of ``(x, index)`` batches for one epoch, plus a line
saying what the loader actually ran (feedline's automatic choice).
Building the loader (pipeline, DataLoader, worker processes) happens
inside the context, so the runner's clock counts start-up the way a user
experiences it, and leaving the context releases everything (``with
pipe:`` for feedline; the DataLoader iterator shuts its workers down, as
``persistent_workers=False``).

All loaders read a sample the same way, ``(data[i], index[i])``, and apply
the workload's one per-sample function; only the machinery differs.

Add a loader: write a generator function decorated with
``@contextlib.contextmanager``, register it in `LOADERS` (its name is the
``--loader`` value and the row label in RESULTS.md), and, if it only makes
sense for some workloads, say so in `applies`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .workloads import Workload

__all__ = ["LOADERS", "NOTES", "Run", "SampleDataset", "applies", "prepare"]


@dataclass
class Run:
    """One epoch of one loader: its batches, and what it ran."""

    batches: Iterable
    detail: str = ""
    why: str = ""  # feedline's reason for its choice of backend


# ------------------------------------------------------------- serial loop
@contextlib.contextmanager
def serial_loop(w: Workload):
    """The single-core reference: a plain Python loop and ``np.stack``."""

    def batches():
        n, size = len(w), w.batch_size
        for start in range(0, n, size):
            rows = [w.sample(i) for i in range(start, min(start + size, n))]
            yield np.stack([r[0] for r in rows]), np.array([r[1] for r in rows])

    yield Run(batches(), "1 process, 1 thread")


# ----------------------------------------------------------------- feedline
def _identity(sample):
    return sample


def _feedline_pipe(w: Workload, backend: str | None):
    import feedline as fl

    pipe = fl.from_arrays(w.data, w.index)
    if w.fn is not None:
        pipe = pipe.map(w.fn, backend=backend, workers=None if backend in (None, "serial") else 2)
    elif backend is not None:
        # A map step is the only way to choose a backend; with no per-sample
        # work this measures feedline's per-sample path, not its bulk gather.
        pipe = pipe.map(_identity, backend=backend, workers=None if backend == "serial" else 2)
    return pipe.batch(w.batch_size)


def _feedline(backend: str | None):
    @contextlib.contextmanager
    def loader(w: Workload):
        with _feedline_pipe(w, backend) as pipe:
            it = iter(pipe)  # builds the runtime: workers start here
            stats = it.stats()
            try:
                yield Run(it, f"{stats.backend} x{stats.workers}", stats.decision)
            finally:
                it.close()

    return loader


# -------------------------------------------------------------------- torch
class SampleDataset:
    """A map-style torch Dataset over a workload: ``fn((data[i], index[i]))``.

    Defined at module level so spawn workers import it by name; the
    workload's arrays travel to each spawn worker by pickle, as they would
    for a user's Dataset.
    """

    def __init__(self, w: Workload):
        self.data, self.index, self.fn = w.data, w.index, w.fn

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        s = (self.data[i], self.index[i])
        return s if self.fn is None else self.fn(s)


def _torch(context: str | None):
    @contextlib.contextmanager
    def loader(w: Workload):
        from torch.utils.data import DataLoader

        dl = DataLoader(
            SampleDataset(w),
            batch_size=w.batch_size,
            shuffle=False,
            num_workers=2,
            multiprocessing_context=context,
            persistent_workers=False,
        )
        it = iter(dl)  # starts the workers; inside the timed region
        try:
            yield Run(it, f"{context or 'fork'} x2")
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)  # joins the workers now, not at GC
            if shutdown is not None:
                shutdown()
            del it

    return loader


LOADERS: dict[str, Callable] = {
    "serial-loop": serial_loop,
    "feedline-serial": _feedline("serial"),
    "feedline-thread": _feedline("thread"),
    "feedline-process": _feedline("process"),
    "feedline-auto": _feedline(None),
    "torch-fork": _torch(None),
    "torch-spawn": _torch("spawn"),
}

# What each loader is, for RESULTS.md.
NOTES: dict[str, str] = {
    "serial-loop": "plain Python loop calling the per-sample function, np.stack per batch (1 core)",
    "feedline-serial": "map(fn, backend='serial')",
    "feedline-thread": "map(fn, backend='thread', workers=2)",
    "feedline-process": "map(fn, backend='process', workers=2)",
    "feedline-auto": "map(fn) with no backend: feedline chooses (tiny: no map at all, bulk gather)",
    "torch-fork": "DataLoader(num_workers=2), default (fork) context, persistent_workers=False",
    "torch-spawn": "DataLoader(num_workers=2, multiprocessing_context='spawn'), persistent_workers=False",
}


def prepare(names) -> None:
    """Import what the named loaders need, so no timed run pays for an import."""
    import feedline  # noqa: F401

    if any(name.startswith("torch") for name in names):
        import torch.utils.data  # noqa: F401


def applies(loader: str, w: Workload) -> bool:
    """Whether ``loader`` is run on workload ``w`` (all combinations, for now)."""
    return loader in LOADERS
