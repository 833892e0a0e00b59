"""Checks of the arguments of `Pipeline` methods that a step record does not make itself.

Each raises the error the method documents, naming the argument and the fix,
before a new pipeline is built.
"""

from __future__ import annotations

import numbers
import warnings

from ._environment import rank_from_environment
from ._plan import OrderedSource
from ._settings import Ray

__all__ = ["check_cache", "check_epoch", "check_list", "check_repeat", "ray_settings", "shard_rank"]


def ray_settings(backend, ray_address, ray_options) -> Ray | None:
    """The Ray settings of the deprecated ``map(ray_address=..., ray_options=...)`` (None when neither is given).

    Warns with the line of the user's ``map()`` call (two frames up).
    """
    if (ray_address is not None or ray_options is not None) and isinstance(backend, Ray):
        raise ValueError("map(backend=fl.Ray(...)) and ray_address/ray_options both give Ray settings; put them all in fl.Ray(...)")
    if ray_address is None and ray_options is None:
        return None
    warnings.warn(
        "map(ray_address=..., ray_options={...}) is deprecated; write "
        "map(fn, backend=fl.Ray(address=..., num_cpus=..., ...)) instead",
        DeprecationWarning, stacklevel=3,
    )
    return Ray.from_options(ray_address, ray_options)


def check_list(method: str, name: str, value) -> None:
    """``value`` is a sized collection, not a string (e.g. ``bucket_by_length(boundaries=...)``)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise ValueError(f"{method}({name}=...) must be a list of integers, got {value!r}")


def check_epoch(method: str, k) -> None:
    """``k`` is an epoch number: an integer >= 0 (a bool is not)."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"{method}(k) needs an integer k >= 0, got {k!r}")


def check_repeat(count, source) -> None:
    """``repeat(count)``: a count >= 1 or None, over a source with a sample order to replay."""
    if count is not None and (isinstance(count, bool) or not isinstance(count, numbers.Integral) or count < 1):
        raise ValueError(f"repeat(count={count!r}) must be an integer >= 1, or None for an endless epoch")
    if source.streaming:
        raise ValueError("repeat(count) needs a random-access source; a generator source has no sample order to "
                         "replay. Iterate the pipeline count times instead (each iter(pipe) is an epoch)")


def shard_rank(index, count, even) -> tuple:
    """``(index, count, even)`` of ``shard()``: given, or read from the environment (then ``even="auto"`` drops)."""
    from_environment = index is None and count is None
    if from_environment:
        index, count = rank_from_environment()
    elif index is None or count is None:
        raise ValueError("shard() takes both index and count, or neither (to read them from the environment)")
    if isinstance(even, str) and even == "auto":
        even = "drop" if from_environment else None
    return index, count, even


def check_cache(source, steps) -> None:
    """``cache()`` here would store something that changes every epoch: refused, with where to cache instead."""
    if isinstance(source, OrderedSource):
        raise ValueError("cache() after fl.mix(), fl.concatenate() or repeat(): their order and draws change every "
                         "epoch; cache each input before combining them, e.g. fl.mix([a.cache(path_a), b.cache(path_b)])")
    for step in steps:
        conflict = step.cache_conflict()
        if conflict:
            raise ValueError(conflict)
