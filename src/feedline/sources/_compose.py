"""``fl.concatenate`` and ``fl.mix``: pipelines made of pipelines (see `feedline.sources._composed`)."""

from __future__ import annotations

import numbers

import numpy as np

from ..pipeline._pipeline import Pipeline
from ..pipeline._plan import new_seed
from ..pipeline._steps import Batch, Filter, Map, MapBatch
from ._composed import STOP, ComposedSource

__all__ = ["concatenate", "mix"]


def _check_child(pipe, where: str, fix: str):
    """A child pipeline: indexed, and every sample it reads comes out (no batch, filter or skip)."""
    if not isinstance(pipe, Pipeline):
        raise TypeError(f"{where} must be a feedline pipeline (e.g. fl.from_arrays(x)), got {type(pipe).__name__} {pipe!r:.60}")
    if pipe.source.streaming:
        raise ValueError(f"{where} reads a generator source; {fix} needs random-access sources (a generator's "
                         "samples have no index to draw from)")
    if isinstance(pipe.source, ComposedSource) and pipe.source.endless:
        raise ValueError(f"{where} repeats without end; {fix} needs inputs that end. To cycle an input, use "
                         "fl.mix(..., stop='never'), or give repeat() a count")
    for step in pipe.steps:
        if isinstance(step, (Batch, MapBatch)):
            raise ValueError(f"{where} has {step.describe()}; {fix} combines samples, so put batch() after it")
        if isinstance(step, Filter) or (isinstance(step, Map) and step.skips):
            raise ValueError(f"{where} has {step.describe()}, which can drop samples; {fix} must know every input's "
                             "length in advance, so put it after (a filter gives the same result there)")
        if isinstance(step, Map) and (step.backend is not None or step.workers is not None):
            raise ValueError(f"{where} has {step.describe()}; all per-sample work runs in one stage, so give "
                             f"backend= or workers= on a map() after {fix}")
    return pipe


def _pipelines(pipes, name: str) -> list:
    if isinstance(pipes, Pipeline) or not isinstance(pipes, (list, tuple)):
        raise TypeError(f"{name}(pipes) takes a list of pipelines, e.g. fl.{name}([a, b]); got {type(pipes).__name__}")
    if not pipes:
        raise ValueError(f"{name}(pipes) needs at least one pipeline, got an empty list")
    return [_check_child(p, f"{name}(pipes[{k}])", f"{name}()") for k, p in enumerate(pipes)]


def concatenate(pipes) -> Pipeline:
    """One epoch of each pipeline, one after the other (tf.data ``concatenate``).

    Each input keeps its own order (its own ``shuffle``) and its own
    per-sample steps; put ``shuffle()`` after it to mix the inputs' samples.

    Raises:
        TypeError, ValueError: ``pipes`` is not a list of pipelines, or one of
            them batches, filters or reads a generator (see docs/vocabulary.md).

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.concatenate([fl.from_arrays(np.arange(3)), fl.from_arrays(np.arange(10, 12))])
    >>> [int(x) for x in pipe]
    [0, 1, 2, 10, 11]
    """
    return Pipeline(ComposedSource("concatenate", _pipelines(pipes, "concatenate")))


def mix(pipes, weights=None, *, seed: int | None = None, stop: str = "first") -> Pipeline:
    """Samples drawn from several pipelines at random, in proportion to ``weights``.

    The draws are a function of ``(seed, epoch)``, so every backend and
    worker count gives the same epoch and ``resume`` continues it exactly.
    Each input contributes its samples in its own order (its own
    ``shuffle``), with its own per-sample steps.

    Args:
        pipes: pipelines without ``batch()`` (batch after mixing).
        weights: relative share of each input (default: equal); positive numbers.
        seed: seeds the draws (None: a random seed, shown by ``print(pipe)``).
        stop: what happens when an input runs out. ``"first"``: the epoch
            ends there (every input in proportion, none repeated);
            ``"all"``: it drops out and the others go on until every sample
            of every input was read once (proportions hold until the first
            runs out); ``"never"``: it starts over in a new order, and the
            epoch ends once every input was read through at least once.

    Raises:
        TypeError, ValueError: naming the argument that is wrong.

    >>> import numpy as np, feedline as fl
    >>> a, b = fl.from_arrays(np.zeros(60, int)), fl.from_arrays(np.ones(20, int))
    >>> values = [int(x) for x in fl.mix([a, b], weights=[3, 1], seed=0)]
    >>> len(values), values.count(1)
    (80, 20)
    """
    children = _pipelines(pipes, "mix")
    if stop not in STOP:
        raise ValueError(f"mix(stop={stop!r}): use 'first' (end the epoch when an input runs out), 'all' "
                         "(go on with the others) or 'never' (start the input over)")
    if weights is None:
        weights = [1.0] * len(children)
    if isinstance(weights, (str, bytes)) or not hasattr(weights, "__len__") or len(weights) != len(children):
        raise ValueError(f"mix(weights={weights!r:.60}) needs one weight per pipeline ({len(children)})")
    for k, w in enumerate(weights):
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not np.isfinite(w) or w <= 0:
            raise ValueError(f"mix(weights=...): weights[{k}] is {w!r}; each weight must be a positive number "
                             "(leave an input out rather than giving it weight 0)")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise ValueError(f"mix(seed={seed!r}) must be a non-negative integer or None")
    return Pipeline(ComposedSource("mix", children, weights=weights, seed=new_seed() if seed is None else int(seed), stop=stop))
