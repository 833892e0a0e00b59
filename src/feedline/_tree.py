"""Nested samples and batches: flattening, rebuilding, and default collation.

A sample or batch is a tree of tuples, lists and dicts whose leaves are
arrays, numbers, strings or other objects. Transport moves array leaves
through shared memory and everything else (the skeleton) inline, so the
tree is split into ``(skeleton, arrays)`` and rebuilt on the other side.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ._batch_memory import new_arrays
from ._errors import SampleError

__all__ = ["BatchGroup", "Leaf", "collate_into", "concat_pieces", "flatten", "flatten_all", "slice_rows", "unflatten"]


@dataclass
class BatchGroup:
    """The payload of a task that holds several whole batches (see `feedline.pipeline._plan.Plan.groups_batches`), in order.

    Each batch is collated on its own, exactly as a task of one batch would
    collate it (dtypes, shapes and errors per batch), so grouping tasks
    never changes a batch; it only spares a message per batch.
    """

    batches: list


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


_NUMBER_TYPES = (int, float, complex, np.number, np.bool_)  # concrete types: an ABC check is slower, and it runs per leaf


def _is_numeric(x) -> bool:
    return isinstance(x, _NUMBER_TYPES) or (isinstance(x, numbers.Number) and not isinstance(x, (str, bytes)))


def _is_foreign_tensor(x) -> bool:
    """A framework tensor (torch, TensorFlow, JAX) that NumPy can view: it has ``__array__`` and ``__dlpack__``."""
    return not isinstance(x, np.ndarray) and hasattr(x, "__dlpack__") and hasattr(x, "__array__")


Allocator = Callable[[list], list]


def _refuse_arrays_among_numbers(col: list, indices: Sequence) -> None:
    """Raise `SampleError` for the first array in a column that starts with a number (shape ())."""
    for leaf, index in zip(col, indices):
        if (isinstance(leaf, np.ndarray) and leaf.dtype != object) or _is_foreign_tensor(leaf):
            raise SampleError(
                f"cannot batch sample {index}: an array of shape {np.shape(leaf)} where sample {indices[0]} has a "
                f"number ({type(col[0]).__name__}, shape ()); return the same kind of value from map() for every "
                "sample, or pass collate= to batch()",
                index=index,
                stage="batch",
            )


def _field(skeleton, number: int, path: str = "") -> str | None:
    """Where leaf ``number`` of a `flatten_all` skeleton sits, as ``['meta']['x']`` (``""`` for the sample itself)."""
    if isinstance(skeleton, Leaf):
        return path if skeleton.i == number else None
    if isinstance(skeleton, dict):
        items = ((f"[{k!r}]", v) for k, v in skeleton.items())
    elif isinstance(skeleton, (tuple, list)):
        items = ((f"[{i}]", v) for i, v in enumerate(skeleton))
    else:
        return None
    for step, child in items:
        found = _field(child, number, path + step)
        if found is not None:
            return found
    return None


def _stacked(x) -> bool:
    """A leaf the default collate stacks into an array: a number, an array of numbers, a framework tensor."""
    return _is_numeric(x) or (isinstance(x, np.ndarray) and x.dtype != object) or _is_foreign_tensor(x)


def _refuse_none_among_stacked(col: list, indices: Sequence, skeleton, number: int) -> None:
    """Raise `SampleError` if the column mixes None (a null, a missing value) with values that stack; else nothing.

    The rule does not depend on the order of the rows: a column whose other
    values are all numbers or arrays is refused, wherever its None is; any
    other column (strings, bytes, a mix, None alone) stays a list with its
    None in place.
    """
    if not any(leaf is None for leaf in col):
        return
    values = [leaf for leaf in col if leaf is not None]
    if not values or not all(_stacked(v) for v in values):
        return
    value = values[0]
    index = next(i for leaf, i in zip(col, indices) if leaf is None)
    other = next(i for leaf, i in zip(col, indices) if leaf is not None)
    field = _field(skeleton, number)
    where = f"field {field}" if field else "the sample"
    kind = f"an array of shape {np.shape(value)}" if not _is_numeric(value) else f"a number ({type(value).__name__})"
    raise SampleError(
        f"cannot batch sample {index}: {where} is None (a null or missing value) where sample {other} has {kind}; "
        "a batch stacks numbers and arrays, which hold no None: fill it in map() (e.g. a fill value, plus a mask "
        "field if the model must know), filter() such samples out, or pass collate= to batch()",
        index=index,
        stage="batch",
    )


def collate_into(samples: Sequence, indices: Sequence, alloc: Allocator = new_arrays):
    """Stack a list of samples into one batch, writing arrays where ``alloc`` says.

    Array leaves are stacked along a new first axis; numbers become 1-D
    arrays; anything else (strings, objects) becomes a list. ``None`` (a
    null) stays in a list of objects, and is refused among numbers or
    arrays wherever it is in the batch. ``alloc`` gets
    the ``(shape, dtype)`` of every stacked leaf at once and returns the
    destination arrays, so a process worker can stack straight into shared
    memory with no intermediate copy.

    Raises:
        SampleError: samples disagree in structure, shape or dtype, or a
            None sits among numbers or arrays; the message names the two
            samples (and the field) and their shapes.
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
                if leaf is None:
                    _refuse_none_among_stacked(col, indices, skeleton, number)
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
            _refuse_none_among_stacked(col, indices, skeleton, number)
            if _is_numeric(head):  # a number, then an array: a shape change, not a column of objects (found by fuzzing)
                _refuse_arrays_among_numbers(col, indices)
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


# ------------------------------------------------------------ re-cutting batches
# After filter() or on_error="skip" a task can come back short, and the
# consumer re-cuts rows into full batches (`feedline.engine._recut`). A batch
# is read as the default collate builds it: dicts and plain tuples are
# structure; an array with a first axis is a column of rows; a list is either
# structure (the sample held a list: every item is a column of ``rows`` rows or
# a nested node) or a column of per-row objects (strings, None, object arrays,
# anything `collate_into` could not stack). A column list never holds a
# stackable array, list, tuple or dict as an item (collate_into stacks or
# recurses into those), so the two cannot be confused; the row count of each
# piece settles what a custom collate could make ambiguous.


class _Mismatch(Exception):
    """Pieces disagree at one place of the batch; `concat_pieces` turns it into a `SampleError`."""

    def __init__(self, piece: int, path: str, detail: str, about_samples: bool = True):
        super().__init__(detail)
        self.piece, self.path, self.detail, self.about_samples = piece, path, detail, about_samples


def _is_subtree(x) -> bool:
    """What a list of columns holds: a stacked column (array or list) or a nested node, never a per-row object."""
    return (isinstance(x, np.ndarray) and x.dtype != object and x.ndim >= 1) or isinstance(x, (list, dict)) or _is_plain_tuple(x)


def _column_rows(x):
    """Rows of a column (None for a nested node, whose columns are checked on their own)."""
    if isinstance(x, np.ndarray):
        return x.shape[0] if x.ndim else -1
    if isinstance(x, list):
        return len(x)
    return None


def _lists_of_columns(nodes: list, rows: list) -> bool:
    """Whether the lists at one place of every piece are structure (lists of columns), not columns of objects."""
    if not all(isinstance(n, list) and not isinstance(n, _Rows) for n in nodes) or len({len(n) for n in nodes}) != 1:
        return False
    for node, count in zip(nodes, rows):
        for item in node:
            if not _is_subtree(item) or (count is not None and _column_rows(item) not in (None, count)):
                return False
    return True


def _infer_rows(batch):
    """Rows of a batch made by the default collate: an array's first axis, else a column list's length."""
    stack = [batch]
    while stack:  # arrays reached through dicts and tuples only: never ambiguous
        node = stack.pop(0)
        if isinstance(node, np.ndarray) and node.ndim:
            return node.shape[0]
        if isinstance(node, dict):
            stack.extend(node.values())
        elif _is_plain_tuple(node):
            stack.extend(node)
    if isinstance(batch, dict):
        children = list(batch.values())
    elif _is_plain_tuple(batch):
        children = list(batch)
    elif isinstance(batch, list):
        if isinstance(batch, _Rows) or not (batch and all(_is_subtree(v) for v in batch)):
            return len(batch)
        children = batch
    else:
        return None
    for child in children:
        count = _infer_rows(child)
        if count is not None:
            return count
    return None


def _kind(node) -> str:
    if isinstance(node, np.ndarray):
        return f"an array of {node.shape[0]} rows of shape {node.shape[1:]}" if node.ndim else "a 0-d array"
    if isinstance(node, dict):
        return f"a dict with keys {list(node)}"
    if _is_plain_tuple(node):
        return f"a tuple of {len(node)}"
    if isinstance(node, list):
        return f"a list of {len(node)}"
    return f"a value of type {type(node).__name__}"


def _join(nodes: list, rows: list, path: str):
    first = nodes[0]
    if isinstance(first, dict):
        for p, node in enumerate(nodes):
            if not isinstance(node, dict) or list(node) != list(first):
                raise _Mismatch(p, path, f"{_kind(node)} where {{first}}'s batch has {_kind(first)}")
        return {k: _join([n[k] for n in nodes], rows, f"{path}[{k!r}]") for k in first}
    if _is_plain_tuple(first):
        for p, node in enumerate(nodes):
            if not _is_plain_tuple(node) or len(node) != len(first):
                raise _Mismatch(p, path, f"{_kind(node)} where {{first}}'s batch has {_kind(first)}")
        return tuple(_join([n[i] for n in nodes], rows, f"{path}[{i}]") for i in range(len(first)))
    if isinstance(first, list) and all(_lists_of_columns([n], [r]) for n, r in zip(nodes, rows)):
        for p, node in enumerate(nodes):  # every piece holds a list of columns: the samples held lists
            if len(node) != len(first):
                raise _Mismatch(p, path, f"a list of {len(node)} columns where {{first}}'s batch has {len(first)}")
        return [_join([n[i] for n in nodes], rows, f"{path}[{i}]") for i in range(len(first))]
    return _join_column(nodes, rows, path)


def _join_column(parts: list, rows: list, path: str):
    """One column of a batch from its pieces: arrays concatenated, lists chained, mixed pieces as `_Rows`."""
    _check_column_rows(parts, rows, path)
    if all(isinstance(part, np.ndarray) for part in parts):
        _check_array_pieces(parts, path)
        if all(part.dtype == parts[0].dtype for part in parts):
            return np.concatenate(parts, axis=0)
    elif all(type(part) is list for part in parts):
        return [v for part in parts for v in part]
    # The pieces hold this column differently (a list in one and an array in
    # another, e.g. numbers with a string among them in one piece; or arrays of
    # different dtypes): keep one item per row and collate the rows of each
    # batch cut from them again, so a batch is what collating its samples gives.
    return _Rows(v for part in parts for v in part)


def _check_column_rows(parts: list, rows: list, path: str) -> None:
    """Refuse a piece that is not a column, or whose rows differ from its batch's sample count (when known)."""
    for p, (part, count) in enumerate(zip(parts, rows)):
        got = _column_rows(part) if isinstance(part, (np.ndarray, list)) else None
        if got is None or (count is not None and got != count):
            what = _kind(part) if got is None or got < 0 else f"{_kind(part)} in a batch of {count} samples"
            raise _Mismatch(p, path, what, about_samples=False)


def _check_array_pieces(parts: list, path: str) -> None:
    """Refuse array pieces whose rows differ in shape from the first piece's, or whose dtypes do not combine."""
    head = parts[0]
    for p, part in enumerate(parts):
        if part.shape[1:] != head.shape[1:]:
            raise _Mismatch(p, path, f"an array of shape {part.shape[1:]} where {{first}} has shape {head.shape[1:]}")
        try:
            np.result_type(head.dtype, part.dtype)
        except TypeError:
            raise _Mismatch(p, path, f"an array of dtype {part.dtype} where {{first}} has dtype {head.dtype}") from None


class _Rows(list):
    """A joined column of per-row items, collated again (`_collate_rows`) when `slice_rows` cuts a batch."""


def _collate_rows(items: list):
    """The column `collate_into` makes of these items: stacked arrays, an array of numbers, or a list."""
    if not items:
        return []
    head = items[0]
    if isinstance(head, np.ndarray) and head.dtype != object:
        if all(isinstance(v, np.ndarray) and v.dtype != object and v.shape == head.shape for v in items):
            return np.stack(items)
        return list(items)
    if all(_is_numeric(v) for v in items):
        return np.asarray(items)
    return list(items)


def _slice(node, count, start: int, stop: int, path: str):
    if isinstance(node, dict):
        return {k: _slice(v, count, start, stop, f"{path}[{k!r}]") for k, v in node.items()}
    if _is_plain_tuple(node):
        return tuple(_slice(v, count, start, stop, f"{path}[{i}]") for i, v in enumerate(node))
    if isinstance(node, list) and _lists_of_columns([node], [count]):
        return [_slice(v, count, start, stop, f"{path}[{i}]") for i, v in enumerate(node)]
    got = _column_rows(node) if isinstance(node, (np.ndarray, list)) else None
    if got is None or got < 0 or (count is not None and got != count):
        raise _Mismatch(0, path, _kind(node) if got is None or got < 0 else f"{_kind(node)} in a batch of {count} samples", about_samples=False)
    return _collate_rows(node[start:stop]) if isinstance(node, _Rows) else node[start:stop]


def _at(path: str) -> str:
    return f"at batch{path}," if path else "as a whole,"


def _not_rows_error(exc: _Mismatch) -> SampleError:
    return SampleError(
        f"cannot re-cut batches: {_at(exc.path)} a batch holds {exc.detail}, not one row per sample; when "
        "filter() or on_error='skip' is used, a custom collate must return arrays or lists with one row per sample "
        "as the first axis "
        "(wrap a per-batch value in a list per row, or compute it in map_batch())",
        stage="batch",
    )


def concat_pieces(pieces: list, rows: Sequence | None = None, indices: Sequence | None = None, where: Callable | None = None):
    """Join partial batches (same structure) along the first axis.

    Used when filtering or skipping leaves batches short: the consumer
    re-cuts the stream of rows into full batches. Arrays are concatenated
    (their shapes past the first axis must agree); columns of objects (the
    lists the default collate makes of strings, None, objects) are joined
    into one list; dicts, tuples and lists of columns keep their structure.
    A column that pieces hold differently (an array in one, a list in
    another) is joined as rows that `slice_rows` collates again, so cut
    the result with `slice_rows` before handing it out.

    Args:
        pieces: partial batches, in order.
        rows: each piece's row count (inferred from the pieces when None).
        indices: each piece's sample indices (a list per piece), to name
            the sample whose rows do not fit the rows before them.
        where: ``where(index)``, the file of a sample, for that message.

    Raises:
        SampleError: pieces whose shapes, dtypes or structure differ (naming
            the first sample of the piece that differs, and its file), or a
            custom collate's batch that has no rows to cut.

    >>> a = {"x": np.zeros((2, 3)), "path": ["a.png", "b.png"]}
    >>> b = {"x": np.ones((1, 3)), "path": ["c.png"]}
    >>> joined = concat_pieces([a, b])
    >>> joined["x"].shape, joined["path"]
    ((3, 3), ['a.png', 'b.png', 'c.png'])
    """
    if len(pieces) == 1:
        return pieces[0]
    counts = list(rows) if rows is not None else [_infer_rows(p) for p in pieces]
    try:
        return _join(list(pieces), counts, "")
    except _Mismatch as exc:
        if not exc.about_samples:
            raise _not_rows_error(exc) from None
        raise _between_batches_error(exc, indices, where) from None


def _between_batches_error(exc: _Mismatch, indices, where) -> SampleError:
    def first_of(piece):
        ids = indices[piece] if indices is not None and piece < len(indices) else None
        return ids[0] if ids is not None and len(ids) else None

    def place(index):
        if where is None or index is None or isinstance(index, tuple):
            return None
        try:
            return where(index)
        except Exception:  # a description is best effort; the index is still named
            return None

    def named(index):
        return f"sample {index}" + (f" ({place(index)})" if place(index) else "")

    index, first = first_of(exc.piece), first_of(0)
    subject = named(index) if index is not None else "a sample of a later batch"
    detail = exc.detail.replace("{first}", named(first) if first is not None else "an earlier sample")
    return SampleError(
        f"cannot batch {subject} with the samples before it: {_at(exc.path)} {detail}. "
        "Batches here are re-cut from the rows of several tasks (after filter() or on_error='skip', across a "
        "generator's shards, or through a shuffle window), which must agree; resize or crop in map() so every "
        "sample has the same shape, "
        "or pass collate= to batch()",
        index=index,
        where=place(index),
        stage="batch",
    )


def slice_rows(batch, start: int, stop: int, rows: int | None = None):
    """Rows ``start:stop`` of every column of a batch (see `concat_pieces` for what a column is).

    >>> slice_rows((np.arange(4), ["a", "b", "c", "d"]), 1, 3)
    (array([1, 2]), ['b', 'c'])
    """
    count = rows if rows is not None else _infer_rows(batch)
    try:
        return _slice(batch, count, start, stop, "")
    except _Mismatch as exc:
        raise _not_rows_error(exc) from None
