"""Nested samples and batches: flattening, rebuilding, and default collation.

A sample or batch is a tree of tuples, lists and dicts whose leaves are
arrays, numbers, strings or other objects. Transport moves array leaves
through shared memory and everything else (the skeleton) inline, so the
tree is split into ``(skeleton, arrays)`` and rebuilt on the other side.
"""

from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

import numpy as np

from ._errors import SampleError

__all__ = ["Leaf", "collate_into", "concat_pieces", "flatten", "flatten_all", "slice_rows", "unflatten"]


class Leaf:
    """Placeholder for the ``i``-th array leaf inside a skeleton."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i

    def __reduce__(self):
        return (Leaf, (self.i,))

    def __repr__(self) -> str:
        return f"Leaf({self.i})"


def _is_array_leaf(x) -> bool:
    return isinstance(x, np.ndarray) and x.dtype != object


def _is_plain_tuple(node) -> bool:
    return isinstance(node, tuple) and not hasattr(node, "_fields")


def _flatten_into(node, arrays: list):
    if _is_array_leaf(node):
        arrays.append(node)
        return Leaf(len(arrays) - 1)
    if _is_plain_tuple(node):
        return tuple(_flatten_into(v, arrays) for v in node)
    if isinstance(node, list):
        return [_flatten_into(v, arrays) for v in node]
    if isinstance(node, dict):
        return {k: _flatten_into(v, arrays) for k, v in node.items()}
    return node


def flatten(tree) -> tuple[Any, list[np.ndarray]]:
    """Split ``tree`` into a skeleton (arrays replaced by `Leaf`) and its arrays."""
    arrays: list[np.ndarray] = []
    return _flatten_into(tree, arrays), arrays


def unflatten(skeleton, arrays: Sequence[np.ndarray]):
    """Inverse of `flatten`.

    Written without a self-referencing closure on purpose: a closure cycle
    would keep ``arrays`` (zero-copy views of a shared-memory slot) alive
    until the cyclic garbage collector runs, delaying the slot's release.
    """
    if isinstance(skeleton, Leaf):
        return arrays[skeleton.i]
    if _is_plain_tuple(skeleton):
        return tuple(unflatten(v, arrays) for v in skeleton)
    if isinstance(skeleton, list):
        return [unflatten(v, arrays) for v in skeleton]
    if isinstance(skeleton, dict):
        return {k: unflatten(v, arrays) for k, v in skeleton.items()}
    return skeleton


def _structure(tree):
    """A hashable description of a sample's nesting, to check samples agree."""
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return ("t", tuple(_structure(v) for v in tree))
    if isinstance(tree, list):
        return ("l", tuple(_structure(v) for v in tree))
    if isinstance(tree, dict):
        return ("d", tuple((k, _structure(v)) for k, v in tree.items()))
    return None


def _mismatch(sample, index, first, first_index) -> SampleError:
    return SampleError(
        f"cannot batch sample {index}: its structure {_describe(sample)} differs "
        f"from sample {first_index}'s {_describe(first)}; make map() return the "
        "same structure for every sample, or pass collate= to batch()",
        index=index,
        stage="batch",
    )


def _columns(samples: Sequence, indices: Sequence):
    """Transpose a list of samples into (skeleton of sample 0, leaf columns)."""
    first = samples[0]
    skeleton, _ = flatten_all(first)
    if isinstance(first, np.ndarray):  # fast path: samples are arrays
        for sample, index in zip(samples, indices):
            if not isinstance(sample, np.ndarray):
                raise _mismatch(sample, index, first, indices[0])
        return skeleton, [list(samples)]
    if type(first) is tuple and not any(isinstance(v, (tuple, list, dict)) for v in first):
        width = len(first)  # fast path: flat tuples such as (image, label)
        for sample, index in zip(samples, indices):
            if type(sample) is not tuple or len(sample) != width or any(isinstance(v, (tuple, list, dict)) for v in sample):
                raise _mismatch(sample, index, first, indices[0])
        return skeleton, [list(column) for column in zip(*samples)]
    shape0 = _structure(first)
    columns: list[list] = [[] for _ in range(_count_leaves(first))]
    for sample, index in zip(samples, indices):
        if _structure(sample) != shape0:
            raise _mismatch(sample, index, first, indices[0])
        for col, leaf in zip(columns, _leaves(sample)):
            col.append(leaf)
    return skeleton, columns


def _leaves(tree) -> list:
    if isinstance(tree, tuple) and not hasattr(tree, "_fields"):
        return [leaf for v in tree for leaf in _leaves(v)]
    if isinstance(tree, list):
        return [leaf for v in tree for leaf in _leaves(v)]
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v)]
    return [tree]


def _count_leaves(tree) -> int:
    return len(_leaves(tree))


def _number_leaves(node, counter: list):
    if _is_plain_tuple(node):
        return tuple(_number_leaves(v, counter) for v in node)
    if isinstance(node, list):
        return [_number_leaves(v, counter) for v in node]
    if isinstance(node, dict):
        return {k: _number_leaves(v, counter) for k, v in node.items()}
    counter[0] += 1
    return Leaf(counter[0] - 1)


def flatten_all(tree):
    """Like `flatten`, but every leaf (not only arrays) becomes a `Leaf`."""
    return _number_leaves(tree, [0]), None


def _describe(tree) -> str:
    if isinstance(tree, np.ndarray):
        return f"array{tree.shape}:{tree.dtype}"
    if isinstance(tree, tuple):
        return "(" + ", ".join(_describe(v) for v in tree) + ")"
    if isinstance(tree, list):
        return "[" + ", ".join(_describe(v) for v in tree) + "]"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in tree.items()) + "}"
    return type(tree).__name__


_NUMBER_TYPES = (int, float, complex, np.number, np.bool_)  # concrete types: an ABC check costs ~1 us per leaf


def _is_numeric(x) -> bool:
    return isinstance(x, _NUMBER_TYPES) or (isinstance(x, numbers.Number) and not isinstance(x, (str, bytes)))


def _is_foreign_tensor(x) -> bool:
    """A framework tensor (torch, TensorFlow, JAX) that NumPy can view: it has ``__array__`` and ``__dlpack__``."""
    return not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and hasattr(x, "__array__")


Allocator = Callable[[list], list]


def _numpy_alloc(specs: list) -> list:
    return [np.empty(shape, dtype) for shape, dtype in specs]


def collate_into(samples: Sequence, indices: Sequence, alloc: Allocator = _numpy_alloc):
    """Stack a list of samples into one batch, writing arrays where ``alloc`` says.

    Array leaves are stacked along a new first axis; numbers become 1-D
    arrays; anything else (strings, objects) becomes a list. ``alloc`` gets
    the ``(shape, dtype)`` of every stacked leaf at once and returns the
    destination arrays, so a process worker can stack straight into shared
    memory with no intermediate copy.

    Raises:
        SampleError: samples disagree in structure, shape or dtype; the
            message names the two samples and their shapes.
    """
    skeleton, columns = _columns(samples, indices)
    specs, kinds = [], []
    for number, col in enumerate(columns):
        head = col[0]
        if _is_foreign_tensor(head):  # a CPU torch/TF/JAX tensor: stacked like the array it views
            col = columns[number] = [np.asarray(leaf) if _is_foreign_tensor(leaf) else leaf for leaf in col]
            head = col[0]
        if isinstance(head, np.ndarray) and head.dtype != object:
            for leaf, index in zip(col, indices):
                if not isinstance(leaf, np.ndarray) or leaf.shape != head.shape:
                    got = leaf.shape if isinstance(leaf, np.ndarray) else type(leaf).__name__
                    raise SampleError(
                        f"cannot batch sample {index}: an array of shape {got} where sample "
                        f"{indices[0]} has shape {head.shape}; resize or crop in map() so "
                        "every sample has the same shape, or pass collate= to batch()",
                        index=index,
                        stage="batch",
                    )
            dtype = np.result_type(*{leaf.dtype for leaf in col})
            specs.append(((len(col),) + head.shape, dtype))
            kinds.append("array")
        elif _is_numeric(head) and all(_is_numeric(v) for v in col):
            specs.append(((len(col),), np.asarray(col).dtype))
            kinds.append("number")
        else:
            kinds.append("list")
    outs = iter(alloc(specs))
    leaves = []
    for col, kind in zip(columns, kinds):
        if kind == "array":
            out = next(outs)
            np.stack(col, out=out)
            leaves.append(out)
        elif kind == "number":
            out = next(outs)
            out[...] = col
            leaves.append(out)
        else:
            leaves.append(list(col))
    return unflatten(skeleton, leaves)


def concat_pieces(pieces: list):
    """Join partial batches (same structure) along the first axis.

    Used when filtering or skipping leaves batches short: the consumer
    re-cuts the stream of rows into full batches. Lists are concatenated.
    """
    if len(pieces) == 1:
        return pieces[0]
    skeleton, _ = flatten_all(pieces[0])
    columns = [_leaves(p) for p in pieces]
    leaves = []
    for parts in zip(*columns):
        if isinstance(parts[0], np.ndarray):
            leaves.append(np.concatenate(parts, axis=0))
        elif isinstance(parts[0], list):
            leaves.append([v for part in parts for v in part])
        else:
            raise SampleError(
                f"cannot join partial batches holding {type(parts[0]).__name__}; a custom "
                "collate must return arrays or lists with the batch as the first axis when "
                "filter() or on_error='skip' is used"
            )
    return unflatten(skeleton, leaves)


def slice_rows(batch, start: int, stop: int):
    """Rows ``start:stop`` of every leaf of a batch."""
    skeleton, _ = flatten_all(batch)
    return unflatten(skeleton, [leaf[start:stop] for leaf in _leaves(batch)])
