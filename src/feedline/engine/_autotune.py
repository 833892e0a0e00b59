"""The prefetch depth, tuned while running (`DepthTuner`).

When, within a window of batches, the consumer had to wait *and* the
workers were held back because every prefetch slot was taken, the depth
grows by one batch per worker, up to a memory budget (`MEMORY_BUDGET`
bytes of batches in flight). The backend is chosen by `feedline.engine._trial`,
the worker count by `feedline.engine._choice` (one per core available).
"""

from __future__ import annotations

__all__ = ["DepthTuner", "MEMORY_BUDGET"]

MEMORY_BUDGET = 1 << 30  # bytes of batches the prefetch depth may keep in flight


class DepthTuner:
    """Raises the prefetch depth while the consumer waits behind full prefetch slots."""

    WINDOW = 16  # batches per decision

    def __init__(self, depth: int, workers: int, enabled: bool):
        self.depth, self.workers, self.enabled = depth, workers, enabled
        self.batch_bytes = None
        self._waited = 0
        self._blocked = 0
        self._seen = 0

    def observe(self, waited: bool, blocked: bool, batch) -> str | None:
        """Record one batch; return a decision (text) when the depth changes."""
        if not self.enabled:
            return None
        if self.batch_bytes is None:
            self.batch_bytes = _nbytes(batch)
        self._seen += 1
        self._waited += waited
        self._blocked += blocked
        if self._seen < self.WINDOW:
            return None
        waited, blocked = self._waited, self._blocked
        self._seen = self._waited = self._blocked = 0
        if waited >= 2 and blocked >= 2:
            limit = max(self.depth, MEMORY_BUDGET // max(1, self.batch_bytes or 1))
            new = min(self.depth + self.workers, limit)
            if new > self.depth:
                old, self.depth = self.depth, new
                return (f"prefetch depth {old} -> {new}: the consumer waited in {waited} of {self.WINDOW} batches "
                        f"while workers were held back by full prefetch slots in {blocked}")
        return None


def _nbytes(batch) -> int:
    from .._tree import flatten

    _, arrays = flatten(batch)
    return sum(a.nbytes for a in arrays) or 1
