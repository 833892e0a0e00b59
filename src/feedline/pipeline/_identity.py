"""What identifies a pipeline to the states it saves: its fingerprint, and the labelled parts behind it.

A saved ``it.state()`` resumes only on a pipeline with the same fingerprint;
the parts let a refusal name what differs (the source, a mix input, a step).
"""

from __future__ import annotations

import hashlib

from ..sources._composed import ComposedSource
from ._plan import OrderedSource

__all__ = ["fingerprint", "fingerprint_length", "parts"]


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def fingerprint_length(source) -> int:
    """The source's length, or its shard count (a generator source), or -1: the size a state must match."""
    try:
        return len(source)
    except TypeError:
        return getattr(source, "num_shards", -1)


def fingerprint(source, steps) -> str:
    """What a saved ``it.state()`` must match to resume here: the source's size and the steps that order data."""
    pieces = [type(source).__name__, str(fingerprint_length(source))]
    if isinstance(source, OrderedSource):
        pieces.append(source.order_fingerprint())
    pieces += [p for p in (step.fingerprint() for step in steps) if p is not None]
    return _digest("|".join(pieces))


def parts(source, steps) -> list:
    """``[label, digest]`` of each thing `fingerprint` covers, in a state so that resume can name what differs."""
    described = [type(source).__name__, str(fingerprint_length(source))]
    inputs = []
    if isinstance(source, ComposedSource):
        described.append(source.settings())
        kind = source.kind
        inputs = [[f"{kind}() input {k}", h] for k, h in enumerate(source.input_identities())]
    labelled = [[f"step {k + 1}: {step.describe()}", _digest(fp)]
                for k, (step, fp) in enumerate((step, step.fingerprint()) for step in steps) if fp is not None]
    return [["source", _digest("|".join(described))]] + inputs + labelled
