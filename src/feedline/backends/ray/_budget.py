"""Bytes of batches a Ray pipeline keeps in the object store, and whether one more task fits.

Why: the prefetch depth bounds batches by count; with large batches (a
batch of 64 images of 512x512x3 is 48 MiB) a deep window on many actors
can hold more than the object store, and Ray then spills to disk (or
allocates outside the store), which slows every node. The executor asks
`ByteBudget.admits` before it hands an actor a task.

Protocol (all in the consumer's thread, but for the finalizers):
- in flight = bytes of fetched batches still alive in this process
  (exact: each batch's arrays are views of the object store, and a
  finalizer on the memory they view reports when the last view is gone)
  + tasks sent and not yet fetched x the largest batch seen so far;
- a task is admitted while that stays within the limit; before the first
  batch is known, one task per ready actor; when no task is pending and
  the consumer waits with no result in hand, one is always admitted
  (progress: batches the consumer keeps, or one larger than the limit,
  never stop the epoch; they pass one task at a time);
- finalizers may run in any thread: they only append to a deque, which
  the consumer drains before each decision.
"""

from __future__ import annotations

import collections
import weakref

import numpy as np

from ..._tree import BatchGroup, flatten

__all__ = ["DEFAULT_SHARE", "ByteBudget"]

DEFAULT_SHARE = 0.25  # of the consumer node's object store: leaves room for the shipped pipeline, Ray Data blocks and other pipelines


class ByteBudget:
    """Counts the bytes a pipeline holds in Ray's object store; see the module docstring."""

    def __init__(self, limit: int):
        self.limit = int(limit)
        self.held = 0  # bytes of fetched batches still referenced in this process
        self.estimate: int | None = None  # bytes of the largest batch seen
        self.peak = 0  # the most bytes in flight seen at any decision
        self._freed: collections.deque = collections.deque()

    def in_flight(self, pending: int) -> int:
        """Bytes held now plus ``pending`` tasks' batches (estimated)."""
        self._drain()
        return self.held + pending * (self.estimate or 0)

    def admits(self, pending: int, actors: int, starving: bool) -> bool:
        """Whether a task may be sent with ``pending`` tasks sent and not fetched, on ``actors`` ready actors.

        ``starving``: the consumer waits and has no result in hand.
        """
        if pending == 0 and starving:
            return True
        if self.estimate is None:
            return pending < actors
        return self.in_flight(pending + 1) <= self.limit

    def note(self, pending: int) -> None:
        """Record the bytes in flight now (after a send or a fetch), for `peak`."""
        self.peak = max(self.peak, self.in_flight(pending))

    def track(self, payload) -> int:
        """Count a fetched batch until the memory its arrays view is released; return its bytes."""
        _, leaves = flatten(payload.batches if isinstance(payload, BatchGroup) else payload)
        owners: dict[int, list] = {}
        for leaf in leaves:
            if isinstance(leaf, np.ndarray):
                owner = leaf.base if leaf.base is not None else leaf
                entry = owners.setdefault(id(owner), [owner, 0])
                entry[1] += leaf.nbytes
        total = 0
        for owner, size in owners.values():
            try:
                weakref.finalize(owner, self._freed.append, size)
            except TypeError:  # an owner without weak references (not an object-store view): not counted
                continue
            total += size
        self.held += total
        self.estimate = max(self.estimate or 0, total)
        return total

    def _drain(self) -> None:
        while self._freed:
            self.held -= self._freed.popleft()
