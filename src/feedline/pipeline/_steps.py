"""The steps a pipeline is made of: immutable records that know themselves.

Each step validates its arguments when it is made (so a mistake is
reported on the line that wrote it), and knows how to take its place in a
plan (`place`), describe itself for ``print(pipe)`` (`describe`), and what
it contributes to the resume fingerprint (`fingerprint`) and to a cache's
identity (`cache_identity`). Adding a step touches this file and
`feedline.pipeline._pipeline`, nothing else. Per-sample steps (`Map`,
`Filter`) also carry the small interface the worker kernel calls:
``name``, ``rng`` and ``apply(sample, index, rng) -> (sample, keep)``.
"""

from __future__ import annotations

import inspect
import numbers
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._fingerprint import code_digest
from ._settings import BACKENDS, Ray

__all__ = ["Batch", "BudgetBatch", "Filter", "Map", "MapBatch", "Pack", "PaddedBatch", "Prefetch", "Shard", "Shuffle", "Skip", "Step", "Take", "fn_name",
           "takes_rng"]

ON_ERROR = ("raise", "skip")


def fn_name(fn) -> str:
    """A short readable name for a user function (for reports and errors)."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        name = type(fn).__name__
    return name.replace(".<locals>", "")


def function_fingerprint(fn, name: str) -> str:
    """What a saved state records of a step's function: its name, and for a lambda (all named alike) its code too.

    A named function is known by its name, so a state resumes after its
    body was edited (a fix to an augmentation); one lambda replaced by
    another is refused.
    """
    if isinstance(fn, types.FunctionType) and fn.__name__ == "<lambda>":
        return f"{name}:{code_digest(fn)}"
    return name


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


def _check_timeout(value) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0 < value < float("inf")):
        raise ValueError(f"map(timeout={value!r}): give the seconds one sample may take (a number > 0), or None for no limit")


class Step:
    """What every step knows about itself (the defaults suit a step that changes no data)."""

    def place(self, plan) -> None:
        """Take its place in a plan being compiled (`feedline.pipeline._plan.PlanBuilder`); ValueError if misplaced."""
        raise NotImplementedError

    def describe(self) -> str:
        """The step as written, for ``print(pipe)``."""
        raise NotImplementedError

    def fingerprint(self) -> str | None:
        """What must match for a saved ``it.state()`` to resume (None: nothing)."""
        return None

    def cache_identity(self) -> tuple:
        """What the step contributes to data cached after it (not how it runs)."""
        return (type(self).__name__,)

    def work_identity(self) -> tuple:
        """What the step does in the workers, for the automatic choice's memory (`feedline.engine._remembered`)."""
        return self.cache_identity()

    def cache_conflict(self) -> str | None:
        """Why ``.cache()`` may not come after this step, or None."""
        return None


def _index_fingerprint(step, seed=None, index=None, count=None, size=None, drop_remainder=None, even=None) -> str:
    # The format of checkpoints written so far: kept so that they still resume.
    return repr((type(step).__name__, seed, index, count, size, drop_remainder, even))


def _order_conflict(name: str) -> str:
    return (f"cache() after {name}(): the cache holds every sample in source order; "
            f"put {name}() after .cache() (each epoch's order is then drawn from the cache)")


@dataclass(frozen=True)
class Shuffle(Step):
    """Permute the sample indices of each epoch, from ``(seed, epoch)``; with ``window``, also a stream's rows."""

    seed: int
    window: int | None = None  # rows held by the stream shuffle (`feedline.engine._window`); None: indices only

    def __post_init__(self):
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"shuffle(seed=...) must be a non-negative integer or None, got {self.seed!r}")
        if self.window is not None:
            if isinstance(self.window, bool) or not isinstance(self.window, numbers.Integral) or self.window < 1:
                raise ValueError(f"shuffle(window=...) must be an integer >= 1 (rows held in the shuffle buffer) "
                                 f"or None, got {self.window!r}")

    def place(self, plan) -> None:
        plan.add_index_step(self, "shuffle")
        if self.window is not None:
            plan.add_window(self)

    def reorder(self, order: np.ndarray, epoch: int) -> np.ndarray:
        """This epoch's permutation of ``order``."""
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(epoch,))))
        return order[rng.permutation(len(order))]

    def describe(self) -> str:
        return f"shuffle(seed={self.seed}{'' if self.window is None else f', window={self.window}'})"

    def fingerprint(self) -> str:
        if self.window is None:
            return _index_fingerprint(self, seed=self.seed)
        return repr((_index_fingerprint(self, seed=self.seed), "window", self.window))

    def cache_conflict(self) -> str:
        return _order_conflict("shuffle")


@dataclass(frozen=True)
class Shard(Step):
    """Keep every ``count``-th index starting at ``index`` (data-parallel rank)."""

    index: int
    count: int
    even: str | None = None  # None: exact partition; "drop" / "pad": equal share on every rank

    def __post_init__(self):
        if self.even is not None and not (isinstance(self.even, str) and self.even in ("drop", "pad")):  # an array: no `in`
            raise ValueError(f"shard(even={self.even!r}): use None (exact partition), 'drop' or 'pad'")
        _check_count(self.count, "shard(count=...)", 1)
        _check_count(self.index, "shard(index=...)", 0)
        if self.index >= self.count:
            raise ValueError(f"shard(index={self.index}, count={self.count}): index must be < count")

    def place(self, plan) -> None:
        plan.add_index_step(self, "shard")

    def reorder(self, order: np.ndarray, epoch: int) -> np.ndarray:
        """This rank's positions: every ``count``-th, after evening out the length if asked.

        ``even="drop"`` cuts the order to a multiple of ``count`` (at most
        ``count - 1`` samples of the epoch are left out, different ones each
        shuffled epoch); ``"pad"`` repeats the first samples to fill it (those
        are seen twice). Either way every rank gets the same number of samples,
        so the same number of batches, and no rank waits forever at a collective.
        """
        if self.even == "drop":
            order = order[: len(order) // self.count * self.count]
        elif self.even == "pad" and len(order) % self.count:
            missing = self.count - len(order) % self.count
            order = np.concatenate([order, np.resize(order, missing)])
        return order[self.index :: self.count]

    def describe(self) -> str:
        return f"shard(index={self.index}, count={self.count}{f', even={self.even!r}' if self.even else ''})"

    def fingerprint(self) -> str:
        return _index_fingerprint(self, index=self.index, count=self.count, even=self.even)

    def cache_conflict(self) -> str:
        return _order_conflict("shard")


@dataclass(frozen=True)
class Map(Step):
    """Apply ``fn(sample)`` or ``fn(sample, rng)`` to every sample, in workers.

    ``backend`` is the backend's name; Ray's settings, if any, are in ``ray``.
    """

    fn: Callable
    workers: int | None = None
    backend: str | None = None
    on_error: Any = "raise"
    ordered: bool = True
    ray: Ray | None = None
    name: str = field(default="")
    rng: bool = False
    timeout: float | None = None  # seconds one sample's read and maps may take (process workers only)

    def __post_init__(self):
        _check_callable(self.fn, "map")
        _check_timeout(self.timeout)
        if isinstance(self.backend, Ray):
            object.__setattr__(self, "ray", self.backend)
            object.__setattr__(self, "backend", "ray")
        if self.backend is not None and not (isinstance(self.backend, str) and self.backend in BACKENDS):  # an array: no `in`
            raise ValueError(f"map(backend={self.backend!r}): choose one of {', '.join(BACKENDS)}, fl.Ray(...), or None to let feedline pick")
        if self.ray is not None and self.backend != "ray":
            raise ValueError(f"map(ray_address=..., ray_options=...) apply to backend='ray' only; got backend={self.backend!r}")
        if self.backend == "ray" and self.ray is None:
            object.__setattr__(self, "ray", Ray())
        _check_count(self.workers, f"map(workers=...) with backend={self.backend!r}", 0 if self.backend in (None, "serial") else 1)
        if not callable(self.on_error) and not (isinstance(self.on_error, str) and self.on_error in ON_ERROR):
            raise ValueError(f"map(on_error={self.on_error!r}): use 'raise', 'skip', or a function (index, error) -> replacement sample")
        object.__setattr__(self, "name", self.name or fn_name(self.fn))
        object.__setattr__(self, "rng", takes_rng(self.fn))

    @property
    def function(self) -> Callable:
        """The user's function (what must travel to workers)."""
        return self.fn

    @property
    def skips(self) -> bool:
        """True when a failing sample is dropped (``on_error="skip"``)."""
        return self.on_error == "skip"

    def apply(self, sample, index, rng):
        """Run on one sample; a replacement from a callable ``on_error`` stands in for a failure."""
        try:
            return (self.fn(sample, rng) if self.rng else self.fn(sample)), True
        except Exception as exc:
            return self.recover(index, exc), True

    def recover(self, index, error: Exception):
        """What sample ``index`` becomes after ``error``: a callable ``on_error``'s replacement, else ``error`` raised."""
        if not callable(self.on_error):
            raise error
        return self.on_error(index, error)

    def place(self, plan) -> None:
        plan.add_map(self)

    def describe(self) -> str:
        extras = [f"{k}={v!r}" for k, v in (("workers", self.workers),) if v is not None]
        if self.backend == "ray" and self.ray != Ray():
            extras.append(f"backend=fl.{self.ray.describe()}")
        elif self.backend is not None:
            extras.append(f"backend={self.backend!r}")
        if self.on_error != "raise":
            extras.append(f"on_error={getattr(self.on_error, '__name__', self.on_error)!r}")
        if not self.ordered:
            extras.append("ordered=False")
        if self.timeout is not None:
            extras.append(f"timeout={self.timeout!r}")
        return f"map({', '.join([self.name + (' (rng)' if self.rng else '')] + extras)})"

    def fingerprint(self) -> str:
        return f"Map:{function_fingerprint(self.fn, self.name)}"

    def cache_identity(self) -> tuple:
        return ("map", self.fn, self.on_error if callable(self.on_error) else "policy")


@dataclass(frozen=True)
class Filter(Step):
    """Keep the samples for which ``pred(sample)`` is true."""

    pred: Callable
    name: str = ""
    rng = False  # the kernel's interface: a predicate takes no rng
    skips = None  # failures follow the first map's on_error (see `WorkerPart.skips`)

    def __post_init__(self):
        _check_callable(self.pred, "filter")
        object.__setattr__(self, "name", self.name or fn_name(self.pred))

    @property
    def function(self) -> Callable:
        """The user's predicate (what must travel to workers)."""
        return self.pred

    def apply(self, sample, index, rng):
        return sample, bool(self.pred(sample))

    def place(self, plan) -> None:
        plan.add_filter(self)

    def describe(self) -> str:
        return f"filter({self.name})"

    def fingerprint(self) -> str:
        return f"Filter:{function_fingerprint(self.pred, self.name)}"

    def cache_identity(self) -> tuple:
        return ("filter", self.pred)


@dataclass(frozen=True)
class Batch(Step):
    """Group samples into batches of ``size``."""

    size: int
    drop_remainder: bool = False
    collate: Callable | None = None

    def __post_init__(self):
        if self.size is None:
            raise ValueError("batch(size=...) must be an integer >= 1, got None; leave out batch() for single samples")
        _check_count(self.size, "batch(size=...)", 1)
        if not isinstance(self.drop_remainder, (bool, np.bool_)):  # "no" or [0] is truthy: it would drop batches
            raise TypeError(f"batch(drop_remainder=...) must be True or False, got {self.drop_remainder!r:.80}")
        if self.collate is not None:
            _check_callable(self.collate, "batch(collate=...)")

    def place(self, plan) -> None:
        if plan.batch is not None:
            raise ValueError("batch() appears twice; a pipeline batches once (use map_batch() to regroup)")
        plan.batch = self

    def describe(self) -> str:
        return (f"batch({self.size}{', drop_remainder=True' if self.drop_remainder else ''}"
                f"{', collate=' + getattr(self.collate, '__name__', 'custom') if self.collate else ''})")

    def fingerprint(self) -> str:
        return _index_fingerprint(self, size=self.size, drop_remainder=self.drop_remainder)

    def cache_conflict(self) -> str:
        return "cache() after batch(): the cache stores samples; put batch() (and map_batch()) after .cache()"

    @property
    def padder(self):
        """How samples of different lengths are padded and bucketed (`feedline._padding.Padder`); None: stacked."""
        return None

    @property
    def budget(self) -> int | None:
        """Items a batch may hold, padding counted (``batch_by_budget``); None: a batch is ``size`` samples."""
        return None


@dataclass(frozen=True)
class PaddedBatch(Batch):
    """``padded_batch`` / ``bucket_by_length``: a batch whose variable-length fields are padded (and bucketed)."""

    padding: Any = None  # a feedline._padding.Padder

    @property
    def padder(self):
        return self.padding

    def describe(self) -> str:
        pad = self.padding
        extras = ", ".join(filter(None, [pad.describe(), "drop_remainder=True" if self.drop_remainder else ""]))
        if pad.buckets is None:
            return f"padded_batch({self.size}{', ' + extras if extras else ''})"
        return (f"bucket_by_length({fn_name(pad.length_fn)}, boundaries={list(pad.boundaries)}, "
                f"batch_sizes={list(pad.batch_sizes)}{', ' + extras if extras else ''})")

    def fingerprint(self) -> str:
        return repr((_index_fingerprint(self, size=self.size, drop_remainder=self.drop_remainder), self.padding.identity()))


PACK_FITS = ("first", "best")
TOO_LONG = ("raise", "split")


@dataclass(frozen=True)
class Pack(Step):
    """``pack(max_length)``: whole samples concatenated into rows of at most ``max_length`` (see `engine._packer`)."""

    max_length: int
    fit: str = "best"
    buffer: int = 32
    too_long: str = "raise"
    pad_value: Any = 0
    sizes: Any = None  # a feedline._packing.Sizes: lengths known before the map, to plan the rows (engine/_deal.py)

    def __post_init__(self):
        _check_count(self.max_length, "pack(max_length=...)", 1)
        if self.max_length is None:
            raise ValueError("pack(max_length=...) must be an integer >= 1 (the length of a packed row), got None")
        _check_count(self.buffer, "pack(buffer=...) (rows held open at once)", 1)
        if self.buffer is None:
            raise ValueError("pack(buffer=...) must be an integer >= 1 (rows held open at once), got None")
        if not (isinstance(self.fit, str) and self.fit in PACK_FITS):
            raise ValueError(f"pack(fit={self.fit!r}): use 'first' (the first open row with room) or 'best' (the row it "
                             "leaves least room in)")
        if not (isinstance(self.too_long, str) and self.too_long in TOO_LONG):
            raise ValueError(f"pack(too_long={self.too_long!r}): use 'raise' (a sample longer than max_length is an error "
                             "naming it) or 'split' (cut into pieces of at most max_length, each its own segment)")
        if isinstance(self.pad_value, (bool, np.bool_)) or not isinstance(self.pad_value, (numbers.Number, np.number)):
            raise ValueError(f"pack(pad_value={self.pad_value!r}) must be a number (what fills a row past its last sample)")

    def place(self, plan) -> None:
        plan.add_pack(self)

    def describe(self) -> str:
        extras = [f"{name}={getattr(self, name)!r}" for name, default in (("fit", "best"), ("buffer", 32), ("too_long", "raise"),
                                                                           ("pad_value", 0)) if getattr(self, name) != default]
        if self.sizes is not None:
            extras.append(f"sizes={self.sizes!r}")
        return f"pack({', '.join([str(self.max_length)] + extras)})"

    def fingerprint(self) -> str:
        return repr(("Pack", self.max_length, self.fit, self.buffer, self.too_long, self.pad_value)
                    + ((self.sizes.digest,) if self.sizes is not None else ()))

    def cache_conflict(self) -> str:
        return "cache() after pack(): the cache stores samples; put pack() (and batch()) after .cache()"


@dataclass(frozen=True)
class BudgetBatch(PaddedBatch):
    """``batch_by_budget``: as many samples a batch as keep rows x longest within ``max_tokens``, padded.

    ``size`` is the samples per task the workers pad (the batches are cut by the consumer, `engine._budget`).
    """

    max_tokens: int = 1
    length_fn: Callable | None = None
    sizes: Any = None  # a feedline._packing.Sizes: lengths known before the map, to plan the batches (engine/_deal.py)

    def __post_init__(self):
        super().__post_init__()
        if self.max_tokens is None:
            raise ValueError("batch_by_budget(max_tokens=...) must be an integer >= 1, got None")
        _check_count(self.max_tokens, "batch_by_budget(max_tokens=...)", 1)
        if self.length_fn is not None:
            _check_callable(self.length_fn, "batch_by_budget(length_fn=...)")

    @property
    def budget(self) -> int:
        return self.max_tokens

    def describe(self) -> str:
        extras = ", ".join(filter(None, [f"length_fn={fn_name(self.length_fn)}" if self.length_fn else "",
                                         f"sizes={self.sizes!r}" if self.sizes is not None else "",
                                         self.padding.describe()]))
        return f"batch_by_budget({self.max_tokens}{', ' + extras if extras else ''})"

    def fingerprint(self) -> str:
        return repr(("BudgetBatch", self.max_tokens, self.length_fn is not None, self.padding.identity())
                    + ((self.sizes.digest,) if self.sizes is not None else ()))


@dataclass(frozen=True)
class MapBatch(Step):
    """Apply ``fn(batch)`` to whole batches (vectorised work)."""

    fn: Callable
    name: str = ""

    def __post_init__(self):
        _check_callable(self.fn, "map_batch")
        object.__setattr__(self, "name", self.name or fn_name(self.fn))

    def place(self, plan) -> None:
        if plan.batch is None:
            raise ValueError("map_batch() needs a batch() before it")
        plan.batch_ops.append(self)

    def describe(self) -> str:
        return f"map_batch({self.name})"

    def work_identity(self) -> tuple:
        return ("map_batch", self.fn)

    def fingerprint(self) -> str:
        return f"MapBatch:{function_fingerprint(self.fn, self.name)}"

    def cache_conflict(self) -> str:
        return Batch.cache_conflict(self)


@dataclass(frozen=True)
class Prefetch(Step):
    """How many batches may be in flight ahead of the consumer."""

    depth: int | None = None

    def __post_init__(self):
        _check_count(self.depth, "prefetch(depth=...)", 1)

    def place(self, plan) -> None:
        if self.depth is not None:
            plan.depth = self.depth

    def describe(self) -> str:
        return f"prefetch({self.depth if self.depth is not None else ''})"


@dataclass(frozen=True)
class Take(Step):
    """Keep the first ``count`` positions of each epoch's order (batches, when placed after ``batch``)."""

    count: int
    unit: int = 1  # samples per counted item: 1, or the batch size once placed after batch()

    verb = "take"

    def __post_init__(self):
        if self.count is None:  # _check_count lets None through (an optional count); n is required here
            raise ValueError(f"{self.verb}(n) must be an integer >= 0, got None")
        _check_count(self.count, f"{self.verb}(n)", 0)

    def place(self, plan) -> None:
        plan.add_positions(self, self.verb)

    def per_sample(self, size: int) -> "Take":
        """The same step counting samples, for a step placed after ``batch(size)``."""
        return type(self)(self.count, size)

    def reorder(self, order: np.ndarray, epoch: int) -> np.ndarray:
        return order[: self.count * self.unit]

    def describe(self) -> str:
        return f"{self.verb}({self.count})"

    def fingerprint(self) -> str:
        return repr((type(self).__name__, self.count))

    def cache_conflict(self) -> str:
        return _order_conflict(self.verb)


@dataclass(frozen=True)
class Skip(Take):
    """Leave out the first ``count`` positions of each epoch's order (batches, when placed after ``batch``)."""

    verb = "skip"

    def reorder(self, order: np.ndarray, epoch: int) -> np.ndarray:
        return order[self.count * self.unit :]
