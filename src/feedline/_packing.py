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

import numpy as np

from ._errors import SampleError
from ._padding import _fields, _name, _rebuild

__all__ = ["PackingError", "RaggedCollate", "sample_fields"]


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
        columns = [[] for _ in keys]
        lengths, rows = [], []
        limit = self.max_length
        for row, sample in enumerate(samples):
            arrays = first if row == 0 else sample_fields(sample, row, "pack()")[2]
            if row and len(arrays) != len(first):
                raise PackingError(f"pack(): the sample has {len(arrays)} fields where the task's first sample has "
                                   f"{len(first)}; every sample needs the same fields", row)
            for key, array, head in zip(keys, arrays, first):
                if array.shape[1:] != head.shape[1:] or array.dtype != head.dtype:
                    raise PackingError(f"pack(): field {_name(key)} is {array.dtype}{list(array.shape)} where the first "
                                       f"sample has {head.dtype}{list(head.shape)}; packed rows need one dtype and the same "
                                       "shape past the first axis (cast or reshape in map())", row)
            n = len(arrays[0])
            if n > limit and not self.split:
                raise PackingError(f"pack(max_length={limit}): the sample has {n} items along its first axis, more than "
                                   f"a row holds; pass too_long='split' to cut it into pieces of at most {limit} (each its "
                                   "own segment), crop it in map(), or filter it out", row)
            for start in range(0, n, limit):  # an empty sample adds nothing: it has no items to place
                lengths.append(min(limit, n - start))
                rows.append(row)
            for column, array in zip(columns, arrays):
                column.append(array)
        fields = {key: np.concatenate(column) for key, column in zip(keys, columns)}
        return {"fields": _rebuild(kind, keys, fields), "lengths": np.asarray(lengths, dtype=np.int64),
                "sample": np.asarray(rows, dtype=np.int64)}
