"""What every framework adapter shares: lazy imports, epochs, even shards.

An adapter turns a pipeline into the object a framework iterates. The rules
they all follow, so the four behave alike:

- One framework epoch is one feedline epoch: each ``iter()`` of the adapted
  object starts the pipeline's next epoch (a new shuffle), and nothing runs
  until its first batch is asked for. Frameworks that create an iterator
  they never use (Keras makes the next epoch's iterator at the end of each
  epoch) therefore cost nothing.
- A sharded pipeline yields the same number of batches on every rank
  (`steps_per_epoch`), so no rank waits forever in a collective at the
  end of an epoch. Where ranks would differ by one batch, the longer ranks
  stop one batch early; that batch holds a single sample per rank when the
  pipeline keeps partial batches, or one batch's worth when it drops them
  (it is dropped already on the shorter ranks).
- Frameworks are imported when an adapter is used, never when feedline is;
  a missing one raises `ImportError` naming the extra to install.
"""

from __future__ import annotations

from .._errors import FeedlineError
from .._optional import require
from ..pipeline._checkpoint import between_epochs, decode, encode
from ..pipeline._steps import Shard

__all__ = ["EpochPosition", "epoch_batches", "even_steps", "map_structure", "require", "steps_per_epoch"]


def map_structure(fn, tree):
    """Apply ``fn`` to every leaf of nested tuples, lists and dicts (the shapes batches take).

    Named tuples keep their type.

    >>> map_structure(lambda v: v * 10, {"a": (1, [2, 3])})
    {'a': (10, [20, 30])}
    """
    if isinstance(tree, tuple):
        items = [map_structure(fn, v) for v in tree]
        return type(tree)(*items) if hasattr(tree, "_fields") else tuple(items)
    if isinstance(tree, list):
        return [map_structure(fn, v) for v in tree]
    if isinstance(tree, dict):
        return {k: map_structure(fn, v) for k, v in tree.items()}
    return fn(tree)


def _shards(pipe) -> list:
    """The `Shard` steps of ``pipe``, in order."""
    return [step for step in pipe.steps if isinstance(step, Shard)]


def even_steps(pipe, even: bool = True) -> int | None:
    """Batches every rank takes per epoch, for a pipeline sharded across ranks.

    Args:
        pipe: the pipeline.
        even: False turns the rule off (returns None).

    Returns:
        For a pipeline with a ``shard`` step of ``count > 1``: the number of
        batches of the rank with the fewest. None when the pipeline is not
        sharded (or ``even`` is False): then an epoch is simply all of it.

    Raises:
        FeedlineError: the pipeline is sharded but its length is unknown (a
            generator source, or ``filter``), so ranks could take different
            numbers of steps and hang at the end of the epoch.
    """
    shards = [step for step in _shards(pipe) if step.count > 1]
    if not even or not shards:
        return None
    deal = pipe._plan.deal
    if deal is not None and deal.count > 1:  # shard(even=...) deals whole packed / budgeted batches: equal by construction
        return None
    try:
        own = len(pipe)
    except TypeError as e:
        raise FeedlineError(
            f"this pipeline is sharded {shards[0].count} ways but its number of batches is unknown ({e}); "
            "ranks could then take different numbers of steps, and the ones that finish first "
            "would leave the others waiting in a collective forever. Use a random-access source "
            "without filter() (mark bad samples in map() instead, or use on_error=), or pass "
            "even_batches=False if your loop handles uneven inputs itself (e.g. torch's Join)"
        ) from e
    plan = pipe._plan
    # The shortest rank: shard(even="pad") gives every rank ceil(length/count)
    # samples; "drop" gives floor to all; an exact partition (even=None) gives
    # floor or ceil, so floor to the shortest.
    shortest = len(plan.part.source)
    for step in shards:
        shortest = -(-shortest // step.count) if step.even == "pad" else shortest // step.count
    size = plan.part.batch_size
    if size is None:
        return min(own, shortest)
    fewest = shortest // size if plan.drop_remainder else -(-shortest // size)
    return min(own, fewest)


def steps_per_epoch(pipe, even: bool = True) -> int | None:
    """Batches an adapter yields per epoch (see `even_steps`), or None if unknown."""
    steps = even_steps(pipe, even)
    if steps is not None:
        return steps
    try:
        return len(pipe)
    except TypeError:
        return None


def epoch_batches(pipe, steps: int | None = None):
    """A generator over one epoch of ``pipe``, started lazily.

    Args:
        pipe: the pipeline.
        steps: from `even_steps`: yield exactly this many batches (stop
            early if the epoch has more); None yields the whole epoch.

    The epoch starts at the first ``next()``, so an iterator that is created
    and dropped unused starts nothing. Closing the generator early cancels
    the epoch's outstanding work.

    Raises:
        FeedlineError: the epoch had fewer than ``steps`` batches (samples
            were skipped with ``on_error="skip"``), which would leave the
            other ranks waiting.
    """
    return EpochPosition(pipe).epoch(steps)


def short_epoch(epoch: int, given: int, steps: int) -> FeedlineError:
    """The error for a sharded epoch that ended before the steps every rank must take."""
    return FeedlineError(
        f"epoch {epoch} ended after {given} batches, but every rank must take {steps} "
        "steps (samples were skipped, so this rank ran short). Ranks that take fewer steps "
        "leave the others waiting; with sharded training use on_error='raise', or a function "
        "on_error=(index, error) -> replacement sample"
    )


class EpochPosition:
    """Runs a pipeline's epochs for an adapter and says where the live one stands, as a framework checkpoint.

    Each `epoch` is one feedline epoch (``iter()`` of an adapter). The
    live one is remembered, so that `state_dict` describes the position
    after the last batch handed out, and `load_state_dict` makes the next
    epoch continue there (``pipe.resume``) or, for a state taken between
    epochs, start the next one. The layout: `feedline.pipeline._checkpoint`.
    """

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
