"""`from_sequence`: anything with ``len()`` and ``obj[i]``."""

from __future__ import annotations

import numpy as np

from .. import _startup
from .._fingerprint import digest
from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["SequenceSource", "from_sequence"]

IDENTITY_ITEMS = 1024  # items of a list that identify it in a checkpoint: bounded cost for lists of millions


class SequenceSource(Source):
    """Samples are ``obj[i]`` for ``i`` in ``range(len(obj))``."""

    user_code = True  # obj[i] is user code

    def __init__(self, obj):
        self.obj = obj

    def __len__(self) -> int:
        return len(self.obj)

    def read(self, index: int):
        return self.obj[index]

    def work_identity(self) -> tuple:
        return ("sequence", type(self.obj).__getitem__)

    def identity(self) -> str | None:
        """Lists, tuples, ranges and arrays by up to `IDENTITY_ITEMS` evenly spaced items; other objects: None.

        Reading an item of any other object runs the user's code, which an
        identity must not.
        """
        if not isinstance(self.obj, (list, tuple, range, np.ndarray)):
            return None
        picks = np.unique(np.linspace(0, len(self.obj) - 1, IDENTITY_ITEMS).astype(np.int64)) if len(self.obj) else []
        return digest([type(self.obj).__name__, len(self.obj), [self.obj[int(i)] for i in picks]])

    def describe(self) -> str:
        return f"from_sequence({type(self.obj).__name__}, len={len(self)})"


def from_sequence(obj) -> Pipeline:
    """A pipeline over ``obj[0] ... obj[len(obj) - 1]``.

    ``obj`` is pickled once (with cloudpickle) and sent to each process
    worker; keep large data in arrays or files, not in Python lists.

    Raises:
        TypeError: ``obj`` has no ``len()`` or no ``__getitem__``.

    >>> import feedline as fl
    >>> [int(b[0]) for b in fl.from_sequence([10, 20, 30]).batch(2)]
    [10, 30]
    """
    missing = [name for name in ("__len__", "__getitem__") if not hasattr(obj, name)]
    if missing:
        raise TypeError(
            f"from_sequence() needs an object with len() and obj[i]; {type(obj).__name__} "
            f"has no {' or '.join(missing)}. For an iterator or generator, use "
            "fl.from_generator(factory, num_shards) instead."
        )
    _startup.described(None)  # obj[i] is user code, as a map is
    return Pipeline(SequenceSource(obj))
