"""The structure of a sample (dict, tuple, single value) and its field names.

A sample is stored as one column per *field*: a leaf of its structure.
Dicts and tuples (nested to any depth) are structure; everything else is
a leaf. Field names are the dict keys, ``"0"``, ``"1"``, ... for tuple
positions, joined with ``"/"`` when nested; a sample that is a single
value (an array, bytes, a number) has one field named ``"value"``.

The structure is kept in the manifest as JSON, e.g.
``{"dict": {"image": {"field": "image"}, "label": {"field": "label"}}}``
or ``{"tuple": [{"field": "0"}, {"field": "1"}]}``, and turned back into a
`feedline._tree` skeleton so a sample is rebuilt with one `unflatten`.

>>> structure, leaves = split({"x": 1, "y": (2, 3)})
>>> [name for name, _ in leaves]
['x', 'y/0', 'y/1']
>>> rebuild(skeleton_of(structure), [10, 20, 30])
{'x': 10, 'y': (20, 30)}
"""

from __future__ import annotations

from .._tree import Leaf, unflatten
from ._errors import StoreError

__all__ = ["SINGLE", "describe", "field_names", "rebuild", "skeleton_of", "split"]

SINGLE = "value"


def _walk(node, path: str, leaves: list):
    if isinstance(node, dict):
        items = {}
        for key, value in node.items():
            if not isinstance(key, str) or not key or "/" in key:
                raise StoreError(
                    f"cannot store a dict with key {key!r}{f' (in {path!r})' if path else ''}: field names must be "
                    "non-empty strings without '/'; rename the key"
                )
            items[key] = _walk(value, f"{path}/{key}" if path else key, leaves)
        return {"dict": items}
    if isinstance(node, tuple):
        return {"tuple": [_walk(value, f"{path}/{i}" if path else str(i), leaves) for i, value in enumerate(node)]}
    name = path or SINGLE
    leaves.append((name, node))
    return {"field": name}


def split(sample) -> tuple[dict, list]:
    """``(structure JSON, [(field name, leaf value), ...])`` of a sample or batch."""
    leaves: list = []
    structure = _walk(sample, "", leaves)
    if not leaves:
        raise StoreError(f"cannot store an empty structure {sample!r}: a sample needs at least one value")
    return structure, leaves


def field_names(structure: dict) -> list[str]:
    """The field names of ``structure``, in storage order."""
    if "field" in structure:
        return [structure["field"]]
    children = structure["dict"].values() if "dict" in structure else structure["tuple"]
    return [name for child in children for name in field_names(child)]


def skeleton_of(structure: dict, counter: list | None = None):
    """A `feedline._tree` skeleton for ``structure`` (fields become `Leaf` in order)."""
    counter = [0] if counter is None else counter
    if "field" in structure:
        counter[0] += 1
        return Leaf(counter[0] - 1)
    if "dict" in structure:
        return {key: skeleton_of(child, counter) for key, child in structure["dict"].items()}
    return tuple(skeleton_of(child, counter) for child in structure["tuple"])


def rebuild(skeleton, values: list):
    """The sample (or batch) with ``values`` in the fields of ``skeleton``."""
    if isinstance(skeleton, Leaf):  # a single value: skip the tree walk
        return values[0]
    return unflatten(skeleton, values)


def describe(structure: dict) -> str:
    """``{image, label}``, ``(0, 1)``, ``{x, y: (y/0, y/1)}`` or ``value``: for messages and ``inspect``.

    >>> describe(split({"x": 1, "y": (2, 3)})[0]), describe(split((1, 2))[0]), describe(split(1)[0])
    ('{x, y: (y/0, y/1)}', '(0, 1)', 'value')
    """
    if "field" in structure:
        return structure["field"]
    if "dict" in structure:
        return "{" + ", ".join(k if "field" in v else f"{k}: {describe(v)}" for k, v in structure["dict"].items()) + "}"
    inner = ", ".join(describe(v) for v in structure["tuple"])
    return f"({inner}{',' if len(structure['tuple']) == 1 else ''})"
