"""`EpochPosition`: where an adapter's epochs stand, as a framework checkpoint (``state_dict``).

An adapter iterates one feedline epoch per ``iter()``. This object runs
those epochs and remembers the live one, so that ``state_dict()`` can
describe the position after the last batch handed out, and
``load_state_dict()`` makes the next ``iter()`` continue there
(``pipe.resume``) or, for a state taken between epochs, start the next
epoch. The layout: `feedline.pipeline._checkpoint`.
"""

from __future__ import annotations

from ..pipeline._checkpoint import between_epochs, decode, encode
from ._common import short_epoch

__all__ = ["EpochPosition"]


class EpochPosition:
    """Runs a pipeline's epochs for an adapter and says where the live one stands."""

    def __init__(self, pipe):
        self.pipe = pipe
        self.iterator = None  # the live epoch's iterator (None between epochs)
        self.given = 0  # batches handed out in the live epoch
        self.steps = None  # the live epoch's cap (even shards), or None
        self.pending = None  # what load_state_dict asked the next epoch to be

    def epoch(self, steps: int | None):
        """A generator over the next epoch (or the loaded position's rest of it), started lazily."""
        pending, self.pending = self.pending, None
        if pending is not None and pending.get("state") is not None:
            iterator, given = self.pipe.resume(pending["state"]), pending["given"]
        else:
            if pending is not None:
                self.pipe.set_epoch(pending["next_epoch"])
            iterator, given = iter(self.pipe), 0
        self.iterator, self.given, self.steps = iterator, given, steps
        try:
            while steps is None or self.given < steps:
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                self.given += 1
                yield batch
            if steps is not None and self.given < steps:
                raise short_epoch(iterator.epoch, self.given, steps)
        finally:
            self.iterator = None
            iterator.close()

    def state_dict(self) -> dict:
        """The position after the last batch handed out (see the module docstring)."""
        if self.pending is not None:
            position = self.pending  # loaded and not iterated yet: still that position
        elif self.iterator is None or (self.steps is not None and self.given >= self.steps):
            epoch = self.pipe._next_epoch if self.iterator is None else self.iterator.epoch + 1
            position = between_epochs(epoch)
        else:
            position = {"next_epoch": self.iterator.epoch + 1, "state": self.iterator.state(), "given": self.given}
        return encode(position)

    def load_state_dict(self, state_dict: dict, where: str) -> None:
        """Make the next epoch continue at ``state_dict``'s position; checked now, nothing runs."""
        self.pending = decode(state_dict, where, self.pipe)
