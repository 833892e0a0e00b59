"""`get_worker_info()`: which worker runs the code calling it, as ``torch.utils.data.get_worker_info`` says.

The kernel sets it around each task (`run_task`'s ``worker``), per thread,
so a map function, a source's ``__getitem__`` or a generator factory can
read it; anywhere else (the training loop, between tasks) it is None. The
executor that sends a task says which worker takes it and how many there
are now, so the count follows the pool as it grows or shrinks.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

__all__ = ["WorkerInfo", "get_worker_info", "working_as"]

_SEED_KEY = 0x57  # the spawn key of worker seeds: apart from the per-sample generators' keys (epoch, step, index)

_local = threading.local()


@dataclass(frozen=True)
class WorkerInfo:
    """The worker running the current task.

    Attributes:
        id: the worker's number, ``0 <= id < num_workers`` (a replaced worker keeps its number).
        num_workers: the workers of this map's pool now.
        seed: a 64-bit seed, the same for a pipeline seed and worker ``id``,
            different between workers (for per-worker state; augmentation
            should use the ``rng`` argument, which does not depend on the worker).
        backend: ``"serial"``, ``"thread"``, ``"process"`` or ``"ray"``.
    """

    id: int
    num_workers: int
    seed: int
    backend: str


def get_worker_info() -> WorkerInfo | None:
    """The worker that runs the calling code, or None outside feedline's workers.

    >>> import feedline as fl
    >>> fl.get_worker_info() is None  # the training loop is no worker
    True
    >>> pipe = fl.from_sequence(range(4)).map(lambda i: fl.get_worker_info().num_workers, backend="thread", workers=2)
    >>> sorted(pipe)
    [2, 2, 2, 2]
    """
    return getattr(_local, "info", None)


@functools.lru_cache(maxsize=1024)
def _info(worker: int, workers: int, seed: int, backend: str) -> WorkerInfo:
    state = np.random.SeedSequence(seed, spawn_key=(_SEED_KEY, worker)).generate_state(1, np.uint64)
    return WorkerInfo(worker, workers, int(state[0]), backend)


class working_as:  # noqa: N801 (a context manager read as a phrase: ``with working_as(...)``)
    """``with working_as(seed, worker, workers, backend):`` `get_worker_info` says so in this thread; restored after."""

    __slots__ = ("info", "previous")

    def __init__(self, seed: int, worker: int, workers: int, backend: str):
        self.info = _info(worker, workers, seed, backend)

    def __enter__(self) -> WorkerInfo:
        self.previous = getattr(_local, "info", None)
        _local.info = self.info
        return self.info

    def __exit__(self, *exc) -> None:
        _local.info = self.previous
