"""Colour-coded segmentation masks: colours to class indices, indices to one-hot.

`colour_mask_to_index` packs each pixel's R, G, B into one 24-bit key and
looks every key up at once in a table indexed by key (16 MiB, built once
per palette and cached, 4 palettes at most): two vectorised passes over
the mask, no loop over classes (faster than a ``searchsorted`` over the
palette, and far faster than a per-class ``np.all(mask == colour, -1)``
loop: benchmarks/RESULTS.md, "Where the defaults come from").
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = ["colour_mask_to_index", "one_hot"]


def _palette_items(palette) -> tuple:
    """``((r, g, b), class)`` pairs from a list of colours (class = position) or a dict."""
    items = palette.items() if isinstance(palette, dict) else enumerate(palette)
    pairs = []
    for a, b in items:
        colour, cls = (a, b) if isinstance(palette, dict) else (b, a)
        rgb = tuple(int(v) for v in np.asarray(colour).reshape(-1))
        if len(rgb) != 3 or not all(0 <= v <= 255 for v in rgb):
            raise ValueError(f"colour_mask_to_index: palette colour {colour!r} is not an (R, G, B) triple of 0-255")
        if isinstance(cls, bool) or not isinstance(cls, (int, np.integer)) or cls < 0:
            raise ValueError(f"colour_mask_to_index: class {cls!r} for colour {rgb} must be an integer >= 0")
        pairs.append((rgb, int(cls)))
    if not pairs:
        raise ValueError("colour_mask_to_index: the palette is empty")
    seen = {}
    for rgb, cls in pairs:
        if rgb in seen and seen[rgb] != cls:
            raise ValueError(f"colour_mask_to_index: colour {rgb} is given two classes, {seen[rgb]} and {cls}")
        seen[rgb] = cls
    return tuple(sorted(seen.items()))


@functools.lru_cache(maxsize=4)
def _table(items: tuple):
    """(position table indexed by 24-bit key, class of each position; position 0 = not in palette)."""
    dtype = np.uint8 if len(items) < 255 else np.uint16
    table = np.zeros(1 << 24, dtype)
    keys = np.array([(r << 16) | (g << 8) | b for (r, g, b), _ in items], np.int64)
    table[keys] = np.arange(1, len(items) + 1)
    classes = np.array([0] + [cls for _, cls in items], np.int64)
    table.flags.writeable = False
    return table, classes


def colour_mask_to_index(mask: np.ndarray, palette, *, unknown: int | None = None) -> np.ndarray:
    """Map each pixel's colour to its class index.

    Args:
        mask: ``uint8`` ``(..., 3)`` RGB mask (one ``(H, W, 3)`` mask or a
            batch ``(N, H, W, 3)``), e.g. ``decode(path)`` of a colour PNG.
        palette: the colours, a list whose position is the class
            (``[(0, 0, 0), (128, 0, 0), ...]``), or a dict
            ``{(r, g, b): class}``.
        unknown: the class for colours not in the palette (e.g. 255, an
            "ignore" label). None (default): such a colour is an error.

    Returns:
        ``mask.shape[:-1]`` array of class indices: ``uint8`` when every
        class and ``unknown`` is below 256, ``int32`` otherwise.

    Raises:
        ValueError: a colour not in the palette (with ``unknown=None``); the
            message gives the colour, how many pixels have it, and a
            position.

    >>> import numpy as np, feedline.vision as fv
    >>> mask = np.array([[[0, 0, 0], [128, 0, 0]]], np.uint8)
    >>> fv.colour_mask_to_index(mask, [(0, 0, 0), (128, 0, 0)])
    array([[0, 1]], dtype=uint8)
    """
    if not isinstance(mask, np.ndarray) or mask.dtype != np.uint8 or mask.ndim < 2 or mask.shape[-1] != 3:
        got = f"{mask.dtype} array of shape {mask.shape}" if isinstance(mask, np.ndarray) else type(mask).__name__
        raise ValueError(
            f"colour_mask_to_index() takes a uint8 RGB mask (..., 3); got a {got}. Decode colour masks with "
            "decode(path) (mode 'RGB'); a palette PNG's indices are already classes: decode(path, 'unchanged')"
        )
    items = _palette_items(palette)
    table, classes = _table(items)
    key = mask[..., 0].astype(np.uint32)
    key <<= 8
    key |= mask[..., 1]
    key <<= 8
    key |= mask[..., 2]
    position = table[key]
    biggest = max(int(classes.max()), unknown if unknown is not None else 0)
    dtype = np.uint8 if biggest < 256 else np.int32
    missing = position == 0
    if missing.any():
        if unknown is None:
            where = tuple(int(v[0]) for v in np.nonzero(missing))
            colour = tuple(int(v) for v in mask[where])
            count = int(np.count_nonzero(np.all(mask == np.array(colour, np.uint8), axis=-1)))
            raise ValueError(
                f"colour_mask_to_index: colour {colour} ({count} pixels, first at {where}) is not in the palette; "
                f"add it, or map unknown colours to a class with unknown=... (e.g. 255 to ignore them)"
            )
        classes = classes.copy()
        classes[0] = unknown
    return classes.astype(dtype)[position]


def one_hot(index: np.ndarray, num_classes: int, *, dtype=np.float32, ignore_index: int | None = None) -> np.ndarray:
    """One-hot encode class indices along a new last axis.

    Args:
        index: integer array of class indices, any shape (``(H, W)`` or ``(N, H, W)``).
        num_classes: length of the new axis.
        dtype: output dtype (float32 by default, what losses take).
        ignore_index: a value (e.g. 255) whose pixels get all zeros.

    Returns:
        ``index.shape + (num_classes,)`` array of 0 and 1.

    Raises:
        ValueError: an index outside ``0..num_classes-1`` (other than
            ``ignore_index``).

    >>> import numpy as np, feedline.vision as fv
    >>> fv.one_hot(np.array([0, 2, 255]), 3, dtype=np.uint8, ignore_index=255)
    array([[1, 0, 0],
           [0, 0, 1],
           [0, 0, 0]], dtype=uint8)
    """
    index = np.asarray(index)
    if index.dtype.kind not in "iu":
        raise TypeError(f"one_hot() takes integer class indices; got {index.dtype}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or num_classes < 1:
        raise ValueError(f"one_hot(num_classes={num_classes!r}): need an integer >= 1")
    flat = index.reshape(-1)
    keep = slice(None) if ignore_index is None else flat != ignore_index
    chosen = flat[keep]
    if chosen.size and (int(chosen.min()) < 0 or int(chosen.max()) >= num_classes):
        bad = int(chosen.max()) if int(chosen.max()) >= num_classes else int(chosen.min())
        hint = "" if ignore_index is not None else "; pass ignore_index= for a label to leave all-zero"
        raise ValueError(f"one_hot: class index {bad} is outside 0..{num_classes - 1}{hint}")
    out = np.zeros((flat.size, num_classes), dtype)
    rows = np.arange(flat.size) if ignore_index is None else np.flatnonzero(keep)
    out[rows, chosen] = 1
    return out.reshape(index.shape + (num_classes,))
