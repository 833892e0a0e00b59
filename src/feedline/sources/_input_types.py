"""The dtypes of a composite's inputs: ``fl.concatenate([ints, floats])`` is refused, not silently upcast.

tf.data refuses to concatenate datasets whose element types differ; NumPy
would stack an int64 row and a float64 row into float64 without a word.
`InputTypes` records the dtype of every numeric field of the first sample
each input gives in this process, and refuses an input whose field has
another dtype than the same field of an input seen before. One look per
input and process; a worker that reads only one input's samples cannot
compare, so the refusal comes from the first process that reads both.
"""

from __future__ import annotations

import numpy as np

__all__ = ["InputTypes", "numeric_dtypes"]


def numeric_dtypes(sample, path: str = "") -> dict:
    """``{field path: dtype}`` of every numeric leaf of ``sample`` (arrays, NumPy and Python numbers).

    >>> numeric_dtypes({"x": np.zeros(2, np.float32), "y": (1, "a")})
    {"['x']": dtype('float32'), "['y'][0]": dtype('int64')}
    """
    if isinstance(sample, dict):
        out = {}
        for key, value in sample.items():
            out.update(numeric_dtypes(value, f"{path}[{key!r}]"))
        return out
    if isinstance(sample, (tuple, list)):
        out = {}
        for k, value in enumerate(sample):
            out.update(numeric_dtypes(value, f"{path}[{k}]"))
        return out
    if isinstance(sample, (np.ndarray, np.generic)):
        return {path: sample.dtype} if sample.dtype.kind in "biufc" else {}
    if isinstance(sample, (bool, int, float, complex)):
        dtype = np.asarray(sample).dtype
        return {path: dtype} if dtype.kind in "biufc" else {}  # an int beyond int64 is an object: left alone
    return {}


class InputTypes:
    """Per input of one composite, the numeric dtypes of its first sample read in this process."""

    def __init__(self, kind: str):
        self.kind = kind
        self.seen: dict[int, dict] = {}

    def check(self, k: int, sample) -> None:
        """Record input ``k``'s dtypes, or raise `TypeError` if a field's differs from another input's."""
        if k in self.seen:
            return
        mine = numeric_dtypes(sample)
        for other, theirs in self.seen.items():
            for path, dtype in mine.items():
                if path in theirs and theirs[path] != dtype:
                    field = f"field {path}" if path else "the sample"
                    fix = (f"e.g. pipes[{k}].map(lambda x: np.asarray(x, np.{theirs[path]}))" if not path
                           else f"casting {field} in a map() on one of the inputs")
                    raise TypeError(
                        f"{self.kind}() input {other} and input {k} differ in {field}: {theirs[path]} in input {other}, "
                        f"{dtype} in input {k}; batches mixing them would silently become "
                        f"{np.result_type(theirs[path], dtype)}. Give both the same dtype, {fix}")
        self.seen[k] = mine
