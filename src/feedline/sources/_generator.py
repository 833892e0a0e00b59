"""`from_generator`: a stream split into shards, each read by one worker."""

from __future__ import annotations

import inspect

from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["GeneratorSource", "from_generator"]


class GeneratorSource(Source):
    """``factory(shard, num_shards)`` yields the samples of one shard.

    Each shard is read by exactly one worker per epoch, so nothing is
    duplicated whatever the worker count. Batches never mix shards; the
    consumer takes them round-robin in shard order, which makes the output
    the same for any number of workers.
    """

    streaming = True
    user_code = True  # the factory's generator is user code

    def __init__(self, factory, num_shards: int):
        self.factory = factory
        self.num_shards = num_shards

    def __len__(self) -> int:
        raise TypeError("a generator source has no length")

    def open(self, shard: int):
        return iter(self.factory(shard, self.num_shards))

    def where(self, index) -> str:
        shard, position = index
        return f"shard {shard}, item {position}"

    def describe(self) -> str:
        name = getattr(self.factory, "__qualname__", type(self.factory).__name__)
        return f"from_generator({name}, num_shards={self.num_shards})"


def from_generator(factory, num_shards: int = 1) -> Pipeline:
    """A pipeline over a stream: ``factory(shard, num_shards)`` yields samples.

    Use it for data that cannot be indexed (a database cursor, a web
    dataset's tar shards). More shards than workers is fine: each worker
    reads several, one after another. ``shuffle()`` permutes the shard
    order per epoch.

    Raises:
        TypeError: ``factory`` is not callable with ``(shard, num_shards)``.
        ValueError: ``num_shards`` < 1.
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
    return Pipeline(GeneratorSource(factory, num_shards))


def _arity(fn) -> int:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 2
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) + 10 * any(
        p.kind == p.VAR_POSITIONAL for p in params
    )
