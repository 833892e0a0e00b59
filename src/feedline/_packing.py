"""``pack(max_length)``, the worker's half: a task's samples as one ragged piece.

`RaggedCollate` checks every sample (each field an array whose first axis
is the sample's length, the same trailing shape and dtype as the task's
first sample), cuts a sample longer than ``max_length`` into pieces if asked,
and concatenates each field over the task: ``{"fields": <the sample's
structure, each field concatenated>, "lengths": item lengths, "sample": each
item's row in the task}``. The consumer (`feedline.engine._packer`) places
the items into rows. Errors carry ``row`` so that the kernel names the sample.
"""

from __future__ import annotations

import hashlib
import numbers

import numpy as np

from ._errors import SampleError
from ._padding import _fields, _name, _rebuild

__all__ = ["PackingError", "RaggedCollate", "Sizes", "as_sizes", "sample_fields"]


class Sizes:
    """``sizes=`` of ``pack()`` / ``batch_by_budget()``: each source sample's length, known before the map.

    Fairseq's ``dataset.sizes``: one integer >= 0 per source index, the
    length the mapped sample will have (what ``pack()`` packs, or what
    ``batch_by_budget()`` counts). Read-only; equal tables compare equal, so
    a step record holding one stays comparable and its fingerprint short.
    """

    def __init__(self, values, what: str):
        if isinstance(values, (str, bytes, dict)) or not hasattr(values, "__len__"):
            raise ValueError(f"{what}(sizes={values!r:.60}) must be a sequence of integers, one length per source sample "
                             "(e.g. a NumPy array, or a store's length column)")
        array = np.asarray(values)
        if array.ndim != 1 or (len(array) and array.dtype.kind not in "iu"):
            raise ValueError(f"{what}(sizes=...) must be one integer per source sample (a 1-D integer array), got "
                             f"{array.dtype} of shape {array.shape}")
        if len(array) and array.min() < 0:
            at = int(np.argmin(array))
            raise ValueError(f"{what}(sizes=...): sample {at} has length {int(array[at])}; lengths are >= 0")
        self.array = array.astype(np.int64)
        self.array.flags.writeable = False
        self.digest = hashlib.sha1(self.array.tobytes()).hexdigest()[:16]

    def __len__(self) -> int:
        return len(self.array)

    def __eq__(self, other) -> bool:
        return isinstance(other, Sizes) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"<{len(self.array)} lengths>"


def as_sizes(values, what: str) -> Sizes | None:
    """``sizes=`` as a `Sizes` (None stays None)."""
    if values is None or isinstance(values, Sizes):
        return values
    if isinstance(values, numbers.Number):
        raise ValueError(f"{what}(sizes={values!r}) must be one length per source sample (a sequence), not one number")
    return Sizes(values, what)


class PackingError(SampleError):
    """A sample that cannot be packed; ``row`` is its position in the task (the kernel names the sample)."""

    def __init__(self, message: str, row: int):
        super().__init__(message, stage="pack")
        self.row = row


def sample_fields(sample, row: int, what: str) -> tuple[str, list, list]:
    """``(kind, keys, arrays)`` of a sample: every field as an array of at least one axis, first axes equal."""
    kind, keys = _fields(sample)
    arrays = []
    for key in keys:
        value = sample if key is None else sample[key]
        array = np.asarray(value)
        if array.dtype == object or array.ndim == 0:
            raise PackingError(f"{what}: field {_name(key)} is {type(value).__name__} {value!r:.60}, not an array or a list of "
                               "numbers; every field is packed along its first axis, so drop it (or make it one value "
                               "per item) in map()", row)
        arrays.append(array)
    length = len(arrays[0])
    for key, array in zip(keys[1:], arrays[1:]):
        if len(array) != length:
            raise PackingError(f"{what}: field {_name(key)} has {len(array)} items along its first axis, but field "
                               f"{_name(keys[0])} has {length}; the fields of a sample are packed together (tokens and "
                               "their targets stay aligned), so they must have the same length: crop or pad them in map(), "
                               "or drop the field", row)
    return kind, keys, arrays


class RaggedCollate:
    """The worker's collate of ``pack()``: a task's samples into one ragged piece (see the module docstring)."""

    def __init__(self, max_length: int, split: bool):
        self.max_length, self.split = max_length, split

    def __call__(self, samples: list):
        kind, keys, first = sample_fields(samples[0], 0, "pack()")
        spec = [(a.dtype, a.ndim, a.shape[1:]) for a in first]
        columns = [[] for _ in keys]
        lengths, rows = [], []
        limit = self.max_length
        for row, sample in enumerate(samples):
            arrays = first if row == 0 else (_alike(sample, kind, keys, spec) or self._checked(sample, row, keys, first))
            n = len(arrays[0])
            if n > limit and not self.split:
                raise PackingError(f"pack(max_length={limit}): the sample has {n} items along its first axis, more than "
                                   f"a row holds; pass too_long='split' to cut it into pieces of at most {limit} (each its "
                                   "own segment), crop it in map(), or filter it out", row)
            if 0 < n <= limit:
                lengths.append(n)
                rows.append(row)
            elif n > limit:
                for start in range(0, n, limit):
                    lengths.append(min(limit, n - start))
                    rows.append(row)  # an empty sample adds nothing: it has no items to place
            for column, array in zip(columns, arrays):
                column.append(array)
        fields = {key: np.concatenate(column) for key, column in zip(keys, columns)}
        return {"fields": _rebuild(kind, keys, fields), "lengths": np.asarray(lengths, dtype=np.int64),
                "sample": np.asarray(rows, dtype=np.int64)}

    @staticmethod
    def _checked(sample, row: int, keys: list, first: list) -> list:
        """The sample's fields, checked one by one against the task's first sample (errors name the field)."""
        arrays = sample_fields(sample, row, "pack()")[2]
        if len(arrays) != len(first):
            raise PackingError(f"pack(): the sample has {len(arrays)} fields where the task's first sample has "
                               f"{len(first)}; every sample needs the same fields", row)
        for key, array, head in zip(keys, arrays, first):
            if array.shape[1:] != head.shape[1:] or array.dtype != head.dtype:
                raise PackingError(f"pack(): field {_name(key)} is {array.dtype}{list(array.shape)} where the first "
                                   f"sample has {head.dtype}{list(head.shape)}; packed rows need one dtype and the same "
                                   "shape past the first axis (cast or reshape in map())", row)
        return arrays


def _alike(sample, kind: str, keys: list, spec: list) -> list | None:
    """The sample's fields when all are arrays shaped like the first sample's, of one length; else None (check slowly)."""
    if kind == "single":
        values = [sample]
    elif kind == "dict":
        if type(sample) is not dict or len(sample) != len(keys):
            return None
        values = [sample.get(key) for key in keys]
    else:
        if type(sample) is not tuple or len(sample) != len(keys):
            return None
        values = list(sample)
    n = None
    for value, (dtype, ndim, trailing) in zip(values, spec):
        if type(value) is not np.ndarray or value.dtype != dtype or value.ndim != ndim or value.shape[1:] != trailing:
            return None
        if n is None:
            n = len(value)
        elif len(value) != n:
            return None
    return values
