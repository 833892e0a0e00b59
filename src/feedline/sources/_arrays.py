"""`from_arrays`: rows of NumPy arrays (in memory or memory-mapped)."""

from __future__ import annotations

import numpy as np

from .._fingerprint import digest
from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["ArraySource", "from_arrays"]


class ArraySource(Source):
    """Sample ``i`` is row ``i`` of each array: an array, a tuple or a dict.

    Batches without per-sample steps are gathered in bulk with one
    ``np.take`` per array, straight into the destination (shared memory in a
    process worker). Memory-mapped arrays are reopened by each worker and
    large in-memory arrays reach workers once through shared memory (see
    `feedline.transport._transfer`).
    """

    def __init__(self, arrays, keys=None, single=False):
        self.arrays = list(arrays)
        self.keys = keys
        self.single = single
        self.length = len(self.arrays[0])

    def identity(self) -> str:
        return digest([self.keys, self.single, self.arrays])  # arrays past 64 MiB: evenly spaced rows

    def __len__(self) -> int:
        return self.length

    def _pack(self, parts):
        if self.single:
            return parts[0]
        if self.keys is not None:
            return dict(zip(self.keys, parts))
        return tuple(parts)

    def read(self, index: int):
        return self._pack([a[index] for a in self.arrays])

    def gather(self, indices, alloc):
        indices = np.asarray(indices, dtype=np.intp)
        outs = alloc([((len(indices),) + a.shape[1:], a.dtype) for a in self.arrays])
        for a, out in zip(self.arrays, outs):
            # mode="clip" skips the buffered copy numpy makes for mode="raise" with
            # out= (2-3x slower); indices come from the epoch order, always in range.
            np.take(a, indices, axis=0, out=out, mode="clip")
        return self._pack(outs)

    def describe(self) -> str:
        shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in self.arrays)
        return f"from_arrays({shapes})"


def from_arrays(*arrays, **named) -> Pipeline:
    """A pipeline over the rows of one or more arrays of equal length.

    ``from_arrays(x)`` yields rows of ``x``; ``from_arrays(x, y)`` yields
    ``(x[i], y[i])``; ``from_arrays({"x": x, "y": y})`` (or keywords) yields
    dicts. Anything ``np.asarray`` accepts works; ``np.memmap`` and
    ``np.load(..., mmap_mode="r")`` arrays are never read whole.

    Raises:
        ValueError: no arrays, 0-d arrays, or arrays of different lengths.

    >>> import numpy as np, feedline as fl
    >>> x, y = np.arange(6).reshape(3, 2), np.array([0, 1, 0])
    >>> [b[1].tolist() for b in fl.from_arrays(x, y).batch(2)]
    [[0, 1], [0]]
    """
    keys = None
    if len(arrays) == 1 and isinstance(arrays[0], dict) and not named:
        named = arrays[0]
        arrays = ()
    if arrays and named:
        raise ValueError("from_arrays() takes arrays positionally or by name, not both")
    if named:
        keys, arrays = list(named), tuple(named.values())
    if not arrays:
        raise ValueError("from_arrays() needs at least one array, e.g. from_arrays(x, y)")
    converted = []
    for position, a in enumerate(arrays):
        name = keys[position] if keys else f"argument {position}"
        if not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.ndim == 0:
            raise ValueError(f"from_arrays(): {name} is a 0-d array; samples are its rows, so it needs at least 1 dimension")
        converted.append(a)
    lengths = {len(a) for a in converted}
    if len(lengths) > 1:
        listing = ", ".join(
            f"{keys[i] if keys else f'argument {i}'}: {len(a)}" for i, a in enumerate(converted)
        )
        raise ValueError(f"from_arrays() needs arrays of equal length (rows are samples); got {listing}")
    return Pipeline(ArraySource(converted, keys=keys, single=len(converted) == 1 and keys is None))
