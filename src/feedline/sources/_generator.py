"""`from_generator`: a stream split into shards, each read by one worker."""

from __future__ import annotations

import inspect
import itertools
import numbers

from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["GeneratorSource", "from_generator"]


class GeneratorSource(Source):
    """``factory(shard, num_shards)`` yields the samples of one shard.

    Each shard is read by exactly one worker per epoch, so nothing is
    duplicated whatever the worker count. A task reads the next batch's
    worth of one shard; the consumer takes tasks round-robin in shard order
    and re-cuts their rows into batches across shards
    (`feedline.engine._recut`), so only the epoch's last batch is short and
    the output is the same for any number of workers. With
    ``samples_per_epoch``, shard ``s`` stops after its share (`shard_length`).
    """

    streaming = True
    user_code = True  # the factory's generator is user code

    def __init__(self, factory, num_shards: int, samples_per_epoch: int | None = None):
        self.factory = factory
        self.num_shards = num_shards
        self.samples_per_epoch = samples_per_epoch

    def __len__(self) -> int:
        raise TypeError("a generator source has no length")

    def shard_length(self, shard: int) -> int | None:
        """Samples shard ``shard`` gives per epoch: its share of ``samples_per_epoch`` (None: until it ends).

        The first ``samples_per_epoch % num_shards`` shards take one more,
        so the shares add up exactly.
        """
        if self.samples_per_epoch is None:
            return None
        share, extra = divmod(self.samples_per_epoch, self.num_shards)
        return share + (shard < extra)

    def open(self, shard: int):
        items = iter(self.factory(shard, self.num_shards))
        length = self.shard_length(shard)
        # islice counts from the shard's start, so a resumed shard (fast-forwarded
        # by the worker) still stops at the same item.
        return items if length is None else itertools.islice(items, length)

    def where(self, index) -> str:
        shard, position = index
        return f"shard {shard}, item {position}"

    def describe(self) -> str:
        name = getattr(self.factory, "__qualname__", type(self.factory).__name__)
        length = "" if self.samples_per_epoch is None else f", samples_per_epoch={self.samples_per_epoch}"
        return f"from_generator({name}, num_shards={self.num_shards}{length})"


def from_generator(factory, num_shards: int = 1, *, samples_per_epoch: int | None = None) -> Pipeline:
    """A pipeline over a stream: ``factory(shard, num_shards)`` yields samples.

    Use it for data that cannot be indexed (a database cursor, a web
    dataset's tar shards). More shards than workers is fine: each worker
    reads several, one after another. ``shuffle()`` permutes the shard
    order per epoch.

    An epoch ends when every shard's iterator ends, so a factory must end,
    or be given ``samples_per_epoch``: one that loops forever (``while
    True:``, as Keras generators are written) would otherwise never end an
    epoch. ``samples_per_epoch=n`` ends each epoch after ``n`` samples in
    all: shard ``s`` yields at most ``n // num_shards`` items (one more for
    the first ``n % num_shards`` shards), whichever worker reads it, so the
    epoch is the same every run and ``it.state()``/``pipe.resume()`` are
    exact. Each epoch calls the factory again and takes the first items of
    each shard (as ``dataset.take(n)`` does in tf.data): a factory that
    should give new data each epoch draws it from its own random source,
    or let ``map(fn, rng)`` augment (its ``rng`` changes with the epoch).
    Keras's ``steps_per_epoch`` counts batches, this counts samples:
    ``samples_per_epoch = steps * batch_size`` gives ``steps`` full batches.

    Batching: each task reads up to a batch of one shard, shards taken in
    turn (in shuffled order after ``shuffle()``), and the rows are cut into
    batches across shards, so every batch is full but the epoch's last, and
    ``drop_remainder=True`` drops fewer than one batch per epoch. Once a
    shard has ended with a short task, later batches straddle two tasks,
    so they hold samples of two shards. See docs/variable_length.md
    ("Generator sources").

    Args:
        factory: ``factory(shard, num_shards)`` returns an iterable of the
            shard's samples (a generator function with these parameters).
        num_shards: how many shards the stream is split into (the most
            workers that can read at once).
        samples_per_epoch: samples per epoch over all shards (before
            ``shard()`` splits them between ranks); None reads each shard
            until it ends. A shard that ends earlier just ends.

    Raises:
        TypeError: ``factory`` is not callable with ``(shard, num_shards)``.
        ValueError: ``num_shards`` < 1, or ``samples_per_epoch`` not an
            integer >= 1.

    >>> import itertools, feedline as fl
    >>> def endless(shard, num_shards):
    ...     for i in itertools.count():
    ...         yield shard * 1000 + i
    >>> pipe = fl.from_generator(endless, 2, samples_per_epoch=5).map(lambda v: v, backend="serial")
    >>> sorted(pipe)
    [0, 1, 2, 1000, 1001]
    """
    if not callable(factory):
        raise TypeError(f"from_generator() needs a function factory(shard, num_shards); got {type(factory).__name__}")
    if inspect.isgenerator(factory) or inspect.isgeneratorfunction(factory) and _arity(factory) < 2:
        raise TypeError(
            "from_generator() needs a function factory(shard, num_shards) that returns an "
            "iterator for one shard, not a generator object: a generator cannot be split "
            "across workers without duplicating samples"
        )
    if not isinstance(num_shards, int) or num_shards < 1:
        raise ValueError(f"from_generator(): num_shards must be an integer >= 1, got {num_shards!r}")
    if samples_per_epoch is not None and (
        isinstance(samples_per_epoch, bool) or not isinstance(samples_per_epoch, numbers.Integral) or samples_per_epoch < 1
    ):
        raise ValueError(
            f"from_generator(): samples_per_epoch must be an integer >= 1 (samples per epoch over all shards) "
            f"or None (read each shard until it ends), got {samples_per_epoch!r}"
        )
    length = None if samples_per_epoch is None else int(samples_per_epoch)
    return Pipeline(GeneratorSource(factory, num_shards, length))


def _arity(fn) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) + 10 * any(
        p.kind == p.VAR_POSITIONAL for p in params
    )
