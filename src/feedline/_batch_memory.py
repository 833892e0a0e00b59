"""Where batches that live in this process get their memory: new arrays, and large ones used again.

A fresh NumPy array of tens of MiB costs more than filling it: the kernel
maps and zeroes every page on first touch (gathering image batches into
arrays used before is markedly faster: benchmarks/store_gather.py). So the thread and serial
backends hand large batch arrays out again once nobody holds them.

Ownership rule: an array handed out is the caller's, and whoever holds a
reference to it (the batch itself, a view or slice of it, a torch tensor
made with ``from_numpy``, a memoryview) keeps it. `NewArrays` reuses an
array only when its own list holds the last reference: CPython's reference
count says so exactly, so a batch the user keeps is never written again.
Memory held: at most `KEEP` arrays per shape and dtype, dropped with the
allocator (when the executor closes).
"""

from __future__ import annotations

import math
import sys
import threading

import numpy as np

from ._mechanism_policy import current_mechanisms

__all__ = ["KEEP", "NewArrays", "new_arrays", "reusing_arrays"]

KEEP = 16  # arrays kept per (shape, dtype): the batches in flight (prefetch depth + one per worker) and the user's


def _free_count() -> int:
    """``sys.getrefcount(pool[i])`` of an array that only ``pool`` (a list) holds."""
    pool = [np.empty(1)]
    return sys.getrefcount(pool[0])


_FREE = _free_count()


class NewArrays:
    """An allocator: ``alloc([(shape, dtype), ...]) -> arrays`` for batches that stay in this process.

    Arrays of at least ``reuse_from`` bytes come from a pool of arrays this
    allocator handed out before and nobody references any more (see the
    module docstring); smaller ones, and all of them when ``reuse_from`` is
    None, are new. Thread-safe. A source's bulk read given a `NewArrays`
    may instead return new arrays it allocated its own way for arrays it
    would not reuse (`reuses`): a store gathers small rows with one fancy
    index, which allocates its result (one copy instead of two).
    """

    def __init__(self, reuse_from: int | None = None):
        self.reuse_from = reuse_from
        self._pools: dict = {}  # (shape, dtype.str) -> [array handed out before]
        self._lock = threading.Lock()

    def reuses(self, nbytes: int) -> bool:
        """Whether an array of ``nbytes`` would come from the pool."""
        return self.reuse_from is not None and nbytes >= self.reuse_from

    def __call__(self, specs: list) -> list:
        return [self.array(shape, dtype) for shape, dtype in specs]

    def array(self, shape, dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        shape = tuple(int(s) for s in shape)
        if not self.reuses(dtype.itemsize * math.prod(shape)):
            return np.empty(shape, dtype)
        with self._lock:
            pool = self._pools.setdefault((shape, dtype.str), [])
            for i in range(len(pool)):
                if sys.getrefcount(pool[i]) <= _FREE:
                    return pool[i]  # the reference returned is counted before the lock is let go
            array = np.empty(shape, dtype)
            if len(pool) < KEEP:
                pool.append(array)
            return array

    def clear(self) -> None:
        """Forget every pooled array (arrays still held stay valid: they are the holders' now)."""
        with self._lock:
            self._pools.clear()


new_arrays = NewArrays()  # plain new arrays, nothing reused


def reusing_arrays() -> NewArrays:
    """The allocator of a thread or serial executor: arrays of ``MechanismPolicy.reuse_arrays_from`` bytes or more used again."""
    return NewArrays(reuse_from=current_mechanisms().reuse_arrays_from)
