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
            # out= (much slower); indices come from the epoch order, always in range.
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
        ValueError: no arrays, 0-d arrays, arrays of different lengths, or the arrays in one tuple or list
            (``from_arrays((x, y))``: pass them as separate arguments).

    >>> import numpy as np, feedline as fl
    >>> x, y = np.arange(6).reshape(3, 2), np.array([0, 1, 0])
    >>> [b[1].tolist() for b in fl.from_arrays(x, y).batch(2)]
    [[0, 1], [0]]
    """
    keys, arrays = _named_or_positional(arrays, named)
    _refuse_one_sequence_of_arrays(arrays)
    converted = _as_sample_arrays(arrays, keys)
    return Pipeline(ArraySource(converted, keys=keys, single=len(converted) == 1 and keys is None))


def _named_or_positional(arrays: tuple, named: dict) -> tuple:
    """``(keys, arrays)``: keys None for positional arrays, the names (in order) for a dict or keywords."""
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
    return keys, arrays


def _refuse_one_sequence_of_arrays(arrays: tuple) -> None:
    """Refuse ``from_arrays((x, y))``, which NumPy would read as one array of samples per array."""
    if len(arrays) == 1 and isinstance(arrays[0], (tuple, list)) and len(arrays[0]) > 1 \
            and all(isinstance(a, np.ndarray) for a in arrays[0]):
        # NumPy would stack equal shapes into one array (its first axis: one sample per array) and refuse others
        kind = type(arrays[0]).__name__
        raise ValueError(f"from_arrays() got one {kind} of {len(arrays[0])} arrays: pass them as separate arguments, "
                         f"from_arrays(x, y), for samples (x[i], y[i]) (tf.data's from_tensor_slices((x, y))); "
                         f"np.stack them first if the {kind} itself is the data")


def _argument_name(keys: list | None, position: int) -> str:
    """How messages name the array at ``position``: its key, or ``argument N``."""
    return keys[position] if keys else f"argument {position}"


def _as_sample_arrays(arrays: tuple, keys: list | None) -> list:
    """The arrays as NumPy arrays of at least one dimension and one length (rows are samples)."""
    converted = []
    for position, a in enumerate(arrays):
        if not isinstance(a, np.ndarray):
            a = np.asarray(a)
        if a.ndim == 0:
            raise ValueError(f"from_arrays(): {_argument_name(keys, position)} is a 0-d array; "
                             "samples are its rows, so it needs at least 1 dimension")
        converted.append(a)
    lengths = {len(a) for a in converted}
    if len(lengths) > 1:
        listing = ", ".join(f"{_argument_name(keys, i)}: {len(a)}" for i, a in enumerate(converted))
        raise ValueError(f"from_arrays() needs arrays of equal length (rows are samples); got {listing}")
    return converted
