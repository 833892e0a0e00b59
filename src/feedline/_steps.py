"""The steps a pipeline is made of: plain, immutable records.

A step only describes work; `feedline._plan` turns a list of steps into
what workers run. Validation of user arguments happens here, when the step
is created, so a mistake is reported on the line that made it, before any
worker starts.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Batch", "Filter", "Map", "MapBatch", "Prefetch", "Shard", "Shuffle", "BACKENDS", "takes_rng", "fn_name"]

BACKENDS = ("serial", "thread", "process", "ray")
ON_ERROR = ("raise", "skip")


def fn_name(fn) -> str:
    """A short readable name for a user function (for reports and errors)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__name__
    return name.replace(".<locals>", "")


def takes_rng(fn) -> bool:
    """True if ``fn`` should be called as ``fn(sample, rng)``.

    That is when it declares a parameter named ``rng``, or requires a
    second positional argument (one without a default: ``def load(path,
    size=224)`` is called with the sample alone). Functions without an
    inspectable signature (some builtins) are called with the sample alone.
    """
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.name == "rng" for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in positional if p.default is p.empty]
    return len(required) >= 2 or (len(positional) == 1 and any(p.kind == p.VAR_POSITIONAL for p in params))


def _check_callable(fn, method: str) -> None:
    if not callable(fn):
        raise TypeError(f"{method}() needs a function; got {type(fn).__name__} {fn!r:.60}")


def _check_count(value, what: str, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{what} must be an integer >= {minimum}, got {value!r}")


# Options passed to each Ray actor of backend="ray"; feedline sets the rest
# (max_concurrency=1, max_restarts=0: it redoes lost work itself, exactly once).
RAY_OPTIONS = ("accelerator_type", "memory", "num_cpus", "num_gpus", "resources", "runtime_env", "scheduling_strategy")


def _check_ray(backend, address, options) -> None:
    if backend != "ray" and (address is not None or options is not None):
        raise ValueError(f"map(ray_address=..., ray_options=...) apply to backend='ray' only; got backend={backend!r}")
    if address is not None and not isinstance(address, str):
        raise TypeError(f"map(ray_address=...) must be a string such as 'auto' or 'head-node:6379', got {address!r}")
    if options is None:
        return
    if not isinstance(options, dict):
        raise TypeError(f"map(ray_options=...) must be a dict such as {{'num_cpus': 1}}, got {type(options).__name__}")
    unknown = sorted(set(options) - set(RAY_OPTIONS))
    if unknown:
        raise ValueError(f"map(ray_options=...): unknown option(s) {unknown}; feedline passes only {list(RAY_OPTIONS)} to its Ray actors")
    for key in ("num_cpus", "num_gpus"):
        value = options.get(key, 0)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value < 0:
            raise ValueError(f"map(ray_options={{'{key}': {value!r}}}): must be a number >= 0")
    memory = options.get("memory", 1)
    if isinstance(memory, bool) or not isinstance(memory, numbers.Integral) or memory < 1:
        raise ValueError(f"map(ray_options={{'memory': {memory!r}}}): bytes of memory reserved per actor, an integer >= 1")
    if not isinstance(options.get("resources", {}), dict):
        raise TypeError("map(ray_options={'resources': ...}) must be a dict of custom resource name -> amount")


@dataclass(frozen=True)
class Shuffle:
    """Permute the sample indices of each epoch, from ``(seed, epoch)``."""

    seed: int

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"shuffle(seed=...) must be a non-negative integer or None, got {self.seed!r}")


@dataclass(frozen=True)
class Shard:
    """Keep every ``count``-th index starting at ``index`` (data-parallel rank)."""

    index: int
    count: int
    even: str | None = None  # None: exact partition; "drop" / "pad": equal share on every rank

    def __post_init__(self):
        if self.even not in (None, "drop", "pad"):
            raise ValueError(f"shard(even={self.even!r}): use None (exact partition), 'drop' or 'pad'")
        _check_count(self.count, "shard(count=...)", 1)
        _check_count(self.index, "shard(index=...)", 0)
        if self.index >= self.count:
            raise ValueError(f"shard(index={self.index}, count={self.count}): index must be < count")


@dataclass(frozen=True)
class Map:
    """Apply ``fn(sample)`` or ``fn(sample, rng)`` to every sample, in workers."""

    fn: Callable
    workers: int | None = None
    backend: str | None = None
    on_error: Any = "raise"
    ordered: bool = True
    name: str = field(default="")
    rng: bool = False
    ray_address: str | None = None  # backend="ray": cluster to connect to (see feedline.backends._ray)
    ray_options: dict | None = None  # backend="ray": resources of each actor

    def __post_init__(self):
        _check_callable(self.fn, "map")
        if self.backend is not None and self.backend not in BACKENDS:
            raise ValueError(f"map(backend={self.backend!r}): choose one of {', '.join(BACKENDS)}, or None to let feedline pick")
        _check_ray(self.backend, self.ray_address, self.ray_options)
        _check_count(self.workers, f"map(workers=...) with backend={self.backend!r}", 0 if self.backend in (None, "serial") else 1)
        if not callable(self.on_error) and self.on_error not in ON_ERROR:
            raise ValueError(f"map(on_error={self.on_error!r}): use 'raise', 'skip', or a function (index, error) -> replacement sample")
        object.__setattr__(self, "name", self.name or fn_name(self.fn))
        object.__setattr__(self, "rng", takes_rng(self.fn))


@dataclass(frozen=True)
class Filter:
    """Keep the samples for which ``pred(sample)`` is true."""

    pred: Callable
    name: str = ""

    def __post_init__(self):
        _check_callable(self.pred, "filter")
        object.__setattr__(self, "name", self.name or fn_name(self.pred))


@dataclass(frozen=True)
class Batch:
    """Group samples into batches of ``size``."""

    size: int
    drop_remainder: bool = False
    collate: Callable | None = None

    def __post_init__(self):
        if self.size is None:
            raise ValueError("batch(size=...) must be an integer >= 1, got None; leave out batch() for single samples")
        _check_count(self.size, "batch(size=...)", 1)
        if self.collate is not None:
            _check_callable(self.collate, "batch(collate=...)")


@dataclass(frozen=True)
class MapBatch:
    """Apply ``fn(batch)`` to whole batches (vectorised work)."""

    fn: Callable
    name: str = ""

    def __post_init__(self):
        _check_callable(self.fn, "map_batch")
        object.__setattr__(self, "name", self.name or fn_name(self.fn))


@dataclass(frozen=True)
class Prefetch:
    """How many batches may be in flight ahead of the consumer."""

    depth: int | None = None

    def __post_init__(self):
        _check_count(self.depth, "prefetch(depth=...)", 1)
