"""The seeds of a pipeline: its first shuffle's (or mix's) seed, and what seeds process workers' generators."""

from __future__ import annotations

from ._plan import OrderedSource, new_seed
from ._steps import Shuffle

__all__ = ["first_seed", "generator_seed", "has_seed"]


def first_seed(source, steps) -> int:
    """The first shuffle's seed (0 without one): it also seeds the ``rng`` of ``map`` functions."""
    own = source.seed if isinstance(source, OrderedSource) else 0  # mix's seed, or the repeated pipeline's
    return next((step.seed for step in steps if isinstance(step, Shuffle)), own)


def has_seed(source, steps) -> bool:
    """Whether `first_seed` is a ``shuffle()`` or ``mix()`` seed (else the 0 of a pipeline without one)."""
    own = isinstance(source, OrderedSource) and source.seeded
    return own or any(isinstance(step, Shuffle) for step in steps)


def generator_seed(source, steps) -> int:
    """What seeds the global generators of process workers: `first_seed` where the pipeline has one, else a fresh draw.

    A pipeline with a ``shuffle()`` or ``mix()`` seed repeats its workers'
    draws run after run; one without gets a random seed per pipeline
    object (as DataLoader draws a base seed per run), so two runs differ
    but workers and epochs still never repeat each other.
    """
    return first_seed(source, steps) if has_seed(source, steps) else new_seed()
