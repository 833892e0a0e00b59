"""`from_sequence`: anything with ``len()`` and ``obj[i]``."""

from __future__ import annotations

from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["SequenceSource", "from_sequence"]


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
    from ..engine._runtime import start_early  # start-up cost, as in Pipeline.map: obj[i] is user code, as a map is

    start_early(None)
    return Pipeline(SequenceSource(obj))
