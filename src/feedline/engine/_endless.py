"""`EndlessIterator`: the iterator of ``repeat()`` without a count.

Each pass is an ordinary epoch (`EpochIterator`) of the pipeline; when one
ends, the next starts on the same runtime, so the stream never stops.
``state()`` is the current pass's state (its ``"epoch"`` is the pass), so
``pipe.resume(state)`` continues that pass and then goes on with the next.
"""

from __future__ import annotations

from .._errors import FeedlineError

__all__ = ["EndlessIterator"]


class EndlessIterator:
    """Passes ``k, k + 1, ...`` of a pipeline, one after another, without end."""

    def __init__(self, first, open_pass):
        self._current = first
        self._open_pass = open_pass  # open_pass(k) -> the EpochIterator of pass k

    @property
    def epoch(self) -> int:
        """The pass being read."""
        return self._current.epoch

    @property
    def finished(self) -> bool:
        """Never: a stream without a count does not end."""
        return False

    def __iter__(self):
        return self

    def __next__(self):
        empty = 0
        while True:
            try:
                return next(self._current)
            except StopIteration:
                empty += 1
                if empty > 2:  # a resumed pass may end at once; two more empty passes mean it never yields
                    raise FeedlineError(
                        f"repeat() without a count: passes {self.epoch - 1} and {self.epoch} gave no batch, so the "
                        "stream would never yield one (an empty source, or filter() drops everything)"
                    ) from None
                self._current = self._open_pass(self._current.epoch + 1)

    def state(self) -> dict:
        """The current pass's ``it.state()``: ``pipe.resume`` continues from it, then goes on."""
        return self._current.state()

    def stats(self):
        """Counters of the current pass (see `feedline.Stats`)."""
        return self._current.stats()

    def close(self) -> None:
        """Stop reading; outstanding work of the current pass is cancelled."""
        self._current.close()
