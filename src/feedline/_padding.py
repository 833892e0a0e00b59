"""Padded batches and length buckets: samples of different lengths (audio clips, token lists) in one batch.

`Padder` holds what ``padded_batch`` and ``bucket_by_length`` ask for and
does the work in three places (see docs/variable_length.md):
- in the worker, `Padder.collate` pads a task's samples into one batch
  (``aligned``: the final batch), or into a *piece*: ``{"batch": tree,
  "lengths": {field: lengths}}`` (plus ``"bucket"``: each row's bucket)
  padded to the piece's longest sample;
- in the consumer's re-cut (after ``filter``/``on_error="skip"``, for a
  generator, always for buckets), `join` pads pieces to a common length
  before joining them and `cut` slices rows;
- `finish` turns a piece into the batch the user sees: each padded field
  fitted to its length (the longest, ``pad_to``, a multiple, a bucket's
  boundary), with lengths and masks added as asked.
"""

from __future__ import annotations

import bisect
import numbers
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ._errors import SampleError
from ._tree import collate_into, concat_pieces, slice_rows

__all__ = ["BudgetCollate", "Padder", "PaddingError"]


class PaddingError(SampleError):
    """A sample that cannot be padded; ``row`` is its position in the batch (the kernel names the sample)."""

    def __init__(self, message: str, row: int):
        super().__init__(message, stage="batch")
        self.row = row


def _is_number(value) -> bool:
    return isinstance(value, (numbers.Number, np.number)) and not isinstance(value, (bool, np.bool_))


def _check_length(value, what: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class Padder:
    """How variable-length fields are padded, and (with ``boundaries``) how samples are bucketed by length.

    Args:
        value: the pad value for every field that is an array or a list
            (a number), or ``{field: value}``: only those fields are padded
            (dict keys, or positions of a tuple sample).
        to: a fixed length for padded fields (an int, or ``{field: int}``);
            None pads to the longest sample of the batch.
        multiple: round the padded length up to a multiple of this.
        axis: the axis of each sample that varies (0: the first).
        lengths, mask: add each padded field's lengths (int64, one per row)
            and/or mask (bool, True on real items) to the batch.
        length_fn, boundaries, batch_sizes: bucketing (see
            ``Pipeline.bucket_by_length``); None for ``padded_batch``.
        pad_to_boundary: pad bucket ``b`` to ``boundaries[b] - 1``.
    """

    value: Any = 0
    to: Any = None
    multiple: int | None = None
    axis: int = 0
    lengths: bool = False
    mask: bool = False
    length_fn: Callable | None = None
    boundaries: tuple | None = None
    batch_sizes: tuple | None = None
    pad_to_boundary: bool = False

    def __post_init__(self):
        values = self.value.values() if isinstance(self.value, dict) else [self.value]
        if not values or not all(_is_number(v) for v in values):
            raise ValueError(f"pad_value must be a number, or a dict {{field: number}} naming the fields to pad, got {self.value!r}")
        tos = self.to.values() if isinstance(self.to, dict) else ([] if self.to is None else [self.to])
        for to in tos:
            _check_length(to, "pad_to", 1)
        if isinstance(self.to, dict) and isinstance(self.value, dict) and set(self.to) - set(self.value):
            raise ValueError(f"pad_to names fields {sorted(map(str, set(self.to) - set(self.value)))} that pad_value does not pad")
        if self.multiple is not None:
            _check_length(self.multiple, "pad_multiple", 1)
        if isinstance(self.axis, bool) or not isinstance(self.axis, numbers.Integral):
            raise ValueError(f"axis must be an integer (the axis of each sample that varies), got {self.axis!r}")
        for name in ("lengths", "mask", "pad_to_boundary"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.boundaries is not None:
            self._check_buckets()

    def _check_buckets(self) -> None:
        if not callable(self.length_fn):
            raise TypeError(f"bucket_by_length() needs a function length_fn(sample) -> int; got {type(self.length_fn).__name__}")
        bounds, sizes = self.boundaries, self.batch_sizes
        if not bounds or any(isinstance(b, bool) or not isinstance(b, numbers.Integral) or b < 1 for b in bounds):
            raise ValueError(f"bucket_by_length(boundaries=...) must be a non-empty list of integers >= 1, got {list(bounds)!r}")
        if any(b >= c for b, c in zip(bounds, bounds[1:])):
            raise ValueError(f"bucket_by_length(boundaries=...) must increase strictly, got {list(bounds)!r}")
        if len(sizes) != len(bounds) + 1:
            raise ValueError(
                f"bucket_by_length(): {len(bounds)} boundaries make {len(bounds) + 1} buckets (below the first, between "
                f"each pair, from the last up), so batch_sizes needs {len(bounds) + 1} sizes, got {len(sizes)}: {list(sizes)!r}")
        for size in sizes:
            _check_length(size, "bucket_by_length(batch_sizes=...) item", 1)

    # ------------------------------------------------------------ describing
    @property
    def buckets(self) -> tuple | None:
        """Batch size of each bucket (None: no bucketing)."""
        return self.batch_sizes

    def describe(self) -> str:
        parts = [] if self.value == 0 else [f"pad_value={self.value!r}"]
        parts += [f"{name}={getattr(self, attr)!r}" for name, attr in (("pad_to", "to"), ("pad_multiple", "multiple"))
                  if getattr(self, attr) is not None]
        parts += [f"{name}=True" for name in ("lengths", "mask", "pad_to_boundary") if getattr(self, name)]
        if self.axis:
            parts.append(f"axis={self.axis}")
        return ", ".join(parts)

    def identity(self) -> tuple:
        """What changes the batches (for the resume fingerprint)."""
        value = sorted(self.value.items(), key=repr) if isinstance(self.value, dict) else self.value
        to = sorted(self.to.items(), key=repr) if isinstance(self.to, dict) else self.to
        return (value, to, self.multiple, self.axis, self.lengths, self.mask, self.boundaries, self.batch_sizes, self.pad_to_boundary)

    # ------------------------------------------------------------ the worker
    def collate(self, aligned: bool) -> Callable:
        """The worker's collate: final batches when ``aligned``, else pieces for the re-cut."""
        return _FinalCollate(self) if aligned else _PieceCollate(self)

    def piece(self, samples: list, final: bool = False):
        """Pad ``samples`` into a piece (``final``: straight to the target length).

        With buckets, the rows are sorted by bucket (stably), so that each
        bucket's rows of a task are one slice for the consumer; ``"row"``
        keeps each row's place in the task, which decides the batches' order.
        """
        if self.boundaries is None:
            return self._pad(samples, final, None)
        bucket = np.array([self._bucket_of(s, row) for row, s in enumerate(samples)], dtype=np.int64)
        order = np.argsort(bucket, kind="stable")
        try:
            piece = self._pad([samples[i] for i in order], final, bucket[order])
        except PaddingError as exc:
            exc.row = int(order[exc.row])  # the row in the task's order, which the kernel maps to a sample
            raise
        piece["row"] = order
        return piece

    def _pad(self, samples: list, final: bool, bucket):
        kind, keys = _fields(samples[0])
        padded = self._padded_keys(samples[0], kind, keys)
        columns = {key: [_field(s, kind, key, row) for row, s in enumerate(samples)] for key in keys}
        out, lengths = {}, {}
        for key in keys:
            if key in padded:
                arrays = [_sequence(v, key, row) for row, v in enumerate(columns[key])]
                lens = self._lengths(arrays, key)
                width = int(lens.max()) if len(lens) else 0
                if final or self.to is not None or self.pad_to_boundary:
                    self._check_fits(lens, key, bucket)
                if final:
                    width = self._target(key, lens, None if bucket is None else int(bucket[0]))
                out[key] = self._stack(arrays, lens, width, key)
                lengths[key] = lens
            else:
                out[key] = self._batched(columns[key], key)
        piece = {"batch": _rebuild(kind, keys, out), "lengths": lengths}
        if bucket is not None:
            piece["bucket"] = bucket
        return piece

    @staticmethod
    def _batched(column: list, key):
        """A field that is not padded, batched as ``batch()`` does (rows are named by position, for the kernel)."""
        try:
            return collate_into(column, list(range(len(column))))
        except SampleError as exc:
            row = exc.index if isinstance(exc.index, int) else 0
            raise PaddingError(f"cannot batch field {_name(key)}, which is not padded: {_kind(column[row])} where the "
                               f"batch's first sample has {_kind(column[0])}; name it in pad_value to pad it, or make it "
                               "the same in every sample", row) from None

    def _padded_keys(self, sample, kind: str, keys: list) -> list:
        if isinstance(self.value, dict):
            missing = [k for k in self.value if k not in keys]
            if missing:
                raise PaddingError(f"pad_value names field {missing[0]!r}, but the sample has fields {keys!r}", 0)
            return [k for k in keys if k in self.value]
        return [k for k in keys if _is_sequence(_field(sample, kind, k, 0))]

    def _bucket_of(self, sample, row: int) -> int:
        length = self.length_fn(sample)
        if isinstance(length, bool) or not isinstance(length, (numbers.Integral, np.integer)) or length < 0:
            raise PaddingError(f"bucket_by_length(): length_fn returned {length!r}; it must return an integer >= 0", row)
        return bisect.bisect_right(self.boundaries, int(length))

    def _lengths(self, arrays: list, key) -> np.ndarray:
        head = arrays[0]
        axis = self._axis(head, key, 0)
        for row, a in enumerate(arrays):
            if a.ndim != head.ndim or a.shape[:axis] + a.shape[axis + 1:] != head.shape[:axis] + head.shape[axis + 1:]:
                raise PaddingError(
                    f"cannot pad field {_name(key)}: shape {a.shape} where the batch's first sample has {head.shape}; "
                    f"only axis {self.axis} may differ between samples (pass axis= to pad another one)", row)
        return np.array([a.shape[axis] for a in arrays], dtype=np.int64)

    def _axis(self, array, key, row: int) -> int:
        if not -array.ndim <= self.axis < array.ndim:
            raise PaddingError(f"cannot pad field {_name(key)} along axis {self.axis}: it has shape {array.shape}", row)
        return self.axis % array.ndim

    def _check_fits(self, lens: np.ndarray, key, bucket) -> None:
        for row, n in enumerate(lens):
            fixed = self._fixed(key, None if bucket is None else int(bucket[row]))
            if fixed is not None and n > fixed:
                why = "pad_to" if self._pad_to(key) is not None else f"its bucket's boundary ({fixed + 1})"
                raise PaddingError(
                    f"cannot pad field {_name(key)} to {fixed}: the sample has {n} items along axis {self.axis}, more "
                    f"than {why} allows; raise it, or crop in map()", row)

    def _stack(self, arrays: list, lens: np.ndarray, width: int, key) -> np.ndarray:
        head = arrays[0]
        axis = self._axis(head, key, 0)
        # An empty list becomes a float array: it must not turn a batch of token ids into floats.
        dtype = np.result_type(*({a.dtype for a in arrays if a.size} or {a.dtype for a in arrays}))
        value = self._value(key, dtype)
        shape = list(head.shape)
        shape[axis] = width
        out = np.full((len(arrays), *shape), value, dtype=dtype)
        for row, (a, n) in enumerate(zip(arrays, lens)):
            out[(row,) + (slice(None),) * axis + (slice(0, int(n)),)] = a
        return out

    def _value(self, key, dtype):
        """The pad value as ``dtype``: exact for integers and booleans, rounded into range for floats (as tf.data)."""
        value = self.value[key] if isinstance(self.value, dict) else self.value
        try:
            with np.errstate(over="ignore", invalid="ignore"):
                cast = np.array(value).astype(dtype)
        except OverflowError:  # a Python integer beyond any float
            cast = None
        if cast is not None and np.dtype(dtype).kind in "fc":
            fits = bool(np.isfinite(cast).all()) or not _finite(value)  # 0.1 pads float32 fields with float32(0.1)
        else:
            fits = cast is not None and np.array_equal(cast, np.array(value), equal_nan=True)
        if not fits:
            why = "beyond its range" if np.dtype(dtype).kind in "fc" else "not one of its values"
            example = "pad_value=0" if key is None else f"pad_value={{{key!r}: 0}}"
            raise PaddingError(f"pad value {value!r} does not fit field {_name(key)} of dtype {dtype} ({why}); give "
                               f"pad_value a value of that type, e.g. {example}", 0)
        return cast

    # ----------------------------------------------------------- the target
    def _pad_to(self, key):
        return self.to.get(key) if isinstance(self.to, dict) else self.to

    def _fixed(self, key, bucket):
        """A length every row must fit in: ``pad_to``, or the bucket's boundary - 1 with ``pad_to_boundary``."""
        if self._pad_to(key) is not None:
            return self._pad_to(key)
        if self.pad_to_boundary and bucket is not None and bucket < len(self.boundaries):
            return self.boundaries[bucket] - 1
        return None

    def _target(self, key, lens: np.ndarray, bucket) -> int:
        fixed = self._fixed(key, bucket)
        width = fixed if fixed is not None else (int(lens.max()) if len(lens) else 0)
        if self.multiple:
            width = -(-width // self.multiple) * self.multiple
        return width

    # ------------------------------------------------------------ the re-cut
    def join(self, pieces: list, rows=None, indices=None, where=None):
        """Pieces padded to a common width, joined (see `feedline._tree.concat_pieces` for the rest)."""
        first = pieces[0]
        for key in first["lengths"]:
            width = max(_field_of(p["batch"], key).shape[self._batch_axis(key, p)] for p in pieces)
            pieces = [_with_field(p, key, self._widen(_field_of(p["batch"], key), width, key, p)) for p in pieces]
        return concat_pieces(pieces, rows=rows, indices=indices, where=where)

    def cut(self, piece, start: int, stop: int, rows=None):
        """Rows ``start:stop`` of a piece (padded fields are fitted later, by `finish`)."""
        return slice_rows(piece, start, stop, rows=rows)

    def _batch_axis(self, key, piece) -> int:
        return 1 + self.axis % (_field_of(piece["batch"], key).ndim - 1)

    def _widen(self, array: np.ndarray, width: int, key, piece) -> np.ndarray:
        axis = self._batch_axis(key, piece)
        if array.shape[axis] == width:
            return array
        if array.shape[axis] > width:
            return array[(slice(None),) * axis + (slice(0, width),)]
        shape = list(array.shape)
        shape[axis] = width
        out = np.full(shape, self._value(key, array.dtype), dtype=array.dtype)
        out[(slice(None),) * axis + (slice(0, array.shape[axis]),)] = array
        return out

    def finish(self, piece):
        """The batch the user sees: padded fields fitted to their target, lengths and masks added."""
        batch, lengths = piece["batch"], piece["lengths"]
        bucket = int(piece["bucket"][0]) if "bucket" in piece and len(piece["bucket"]) else None
        kind, keys = _fields(batch)
        out = {key: _field_of(batch, key) for key in keys}
        for key, lens in lengths.items():
            out[key] = self._widen(out[key], self._target(key, lens, bucket), key, piece)
        return self._with_extras(kind, keys, out, lengths)

    def _with_extras(self, kind: str, keys: list, out: dict, lengths: dict):
        extras = []  # every field's lengths, then every field's mask
        if self.lengths:
            extras += [(f"{key}_lengths", np.asarray(lens, dtype=np.int64)) for key, lens in lengths.items()]
        if self.mask:
            for key, lens in lengths.items():
                width = out[key].shape[1 + self.axis % (out[key].ndim - 1)]
                extras.append((f"{key}_mask", np.arange(width)[None, :] < np.asarray(lens)[:, None]))
        if kind == "dict":
            for name, value in extras:
                if name in out:
                    raise SampleError(f"padded batch: the sample already has a field {name!r}, which lengths=/mask= add; rename it",
                                      stage="batch")
                out[name] = value
            return out
        batch = _rebuild(kind, keys, out)
        if not extras:
            return batch
        values = tuple(v for _, v in extras)
        return batch + values if kind == "tuple" else (batch, *values)


class _FinalCollate:
    """``collate`` for aligned plans: samples to the batch the user sees, in the worker."""

    def __init__(self, padder: Padder):
        self.padder = padder

    def __call__(self, samples: list):
        return self.padder.finish(self.padder.piece(samples, final=True))


class _PieceCollate:
    """``collate`` for re-cut plans: samples to a piece, finished by the consumer."""

    def __init__(self, padder: Padder):
        self.padder = padder

    def __call__(self, samples: list):
        return self.padder.piece(samples)


class BudgetCollate:
    """``collate`` of ``batch_by_budget``: a piece for the consumer's cut, with each row's length under ``"budget"``.

    The length is ``length_fn(sample)``, or without one the length of the
    first padded field (what the padded batch's width is made of).
    """

    def __init__(self, padder: Padder, length_fn: Callable | None):
        self.padder, self.length_fn = padder, length_fn

    def __call__(self, samples: list):
        piece = self.padder.piece(samples)
        if self.length_fn is None:
            if not piece["lengths"]:
                raise PaddingError("batch_by_budget(): the sample has no field to pad, so no length to count; give "
                                   "length_fn=", 0)
            piece["budget"] = np.asarray(next(iter(piece["lengths"].values())), dtype=np.int64)
            return piece
        budget = np.empty(len(samples), dtype=np.int64)
        for row, sample in enumerate(samples):
            n = self.length_fn(sample)
            if isinstance(n, bool) or not isinstance(n, (numbers.Integral, np.integer)) or n < 0:
                raise PaddingError(f"batch_by_budget(): length_fn returned {n!r}; it must return an integer >= 0", row)
            budget[row] = n
        piece["budget"] = budget
        return piece


class Finish:
    """The consumer's batch step that turns a re-cut piece into the user's batch (shown as "pad" in stats)."""

    name = "pad"

    def __init__(self, padder: Padder):
        self.fn = padder.finish


# ------------------------------------------------------------ sample fields
def _fields(sample) -> tuple[str, list]:
    """How a sample splits into fields: a dict's keys, a tuple's positions, or one field (None)."""
    if isinstance(sample, dict):
        return "dict", list(sample)
    if isinstance(sample, tuple) and not hasattr(sample, "_fields"):
        return "tuple", list(range(len(sample)))
    return "single", [None]


def _field(sample, kind: str, key, row: int):
    if kind == "single":
        if isinstance(sample, (dict, tuple)):
            raise PaddingError(f"cannot pad a batch mixing a {type(sample).__name__} sample with the first sample's kind", row)
        return sample
    try:
        return sample[key]
    except (KeyError, IndexError, TypeError):
        raise PaddingError(f"the sample has no field {key!r}, which the batch's first sample has; every sample "
                           "needs the same fields", row) from None


def _field_of(batch, key):
    return batch if key is None else batch[key]


def _with_field(piece: dict, key, value) -> dict:
    batch = piece["batch"]
    if key is None:
        batch = value
    elif isinstance(batch, dict):
        batch = {**batch, key: value}
    else:
        batch = tuple(value if k == key else v for k, v in enumerate(batch))
    return {**piece, "batch": batch}


def _rebuild(kind: str, keys: list, out: dict):
    if kind == "dict":
        return {k: out[k] for k in keys}
    if kind == "tuple":
        return tuple(out[k] for k in keys)
    return out[None]


def _is_sequence(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.dtype != object and value.ndim >= 1
    return isinstance(value, list) or (hasattr(value, "__array__") and not _is_number(value) and not isinstance(value, str))


def _sequence(value, key, row: int) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype == object or array.ndim == 0:
        raise PaddingError(f"cannot pad field {_name(key)}: {type(value).__name__} {value!r:.60} is not an array or a list "
                           "of numbers", row)
    return array


def _kind(value) -> str:
    return f"an array of shape {value.shape}" if isinstance(value, np.ndarray) else f"a {type(value).__name__}"


def _name(key) -> str:
    return "(the sample)" if key is None else repr(key)


def _finite(value) -> bool:
    """Whether the number ``value`` is finite (a float field takes an infinite or NaN pad value as given)."""
    try:
        return bool(np.isfinite(np.asarray(value, dtype=np.complex128)).all())
    except OverflowError:  # an integer too large for a float is finite
        return True
