"""Fields: what one leaf of a sample is, and how it maps to Arrow columns.

`FieldSpec` is the manifest entry of a field (see `feedline.store._format`
for the table of kinds). This module does both directions:

- writing: `infer` decides a field's spec from the first values written,
  `normalize` turns each later batch's column into one canonical form
  (checked against the spec), and `to_arrow` builds the Arrow column(s);
- reading: `Column` wraps one field of one record batch as NumPy arrays
  over the Arrow buffers (no copy for fixed-shape and ragged arrays and
  scalars), with ``value(row)`` for one sample and ``array`` for gathers.
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass

import numpy as np

from ._deps import pyarrow
from ._errors import StoreError
from ._format import SHAPE_SUFFIX, group_of, parse_encoding
from ._images import EncodedImage, check_image, decode_image, encode_image

__all__ = ["Column", "FieldSpec", "infer", "normalize", "to_arrow"]

_PYTYPES = {"int": int, "float": float, "bool": bool}


@dataclass
class FieldSpec:
    """One field of a store, as recorded in the manifest.

    Attributes:
        name: the field name (see `feedline.store._structure`).
        kind: ``array``, ``ragged``, ``scalar``, ``bytes`` or ``str``.
        dtype: NumPy dtype string (little-endian) for array/ragged/scalar.
        shape: per-sample shape of an ``array`` field.
        ndim: number of dimensions of a ``ragged`` field.
        encoding: ``raw``, ``zstd``, ``lz4``, ``jpeg:Q`` or ``png``.
        pytype: ``int``/``float``/``bool`` when written as Python numbers
            (read back as such), else None (NumPy scalars).
        channels: channels of an image-encoded field (last axis; 1 for 2-D).
    """

    name: str
    kind: str
    dtype: str | None = None
    shape: list | None = None
    ndim: int | None = None
    encoding: str = "raw"
    pytype: str | None = None
    channels: int | None = None

    @property
    def group(self) -> str:
        return group_of(self.encoding)

    @property
    def image(self) -> bool:
        """True when the field is stored as JPEG/PNG bytes and decoded on read."""
        return parse_encoding(self.encoding, self.name)[0] in ("jpeg", "png")

    @property
    def columns(self) -> list[str]:
        """The Arrow column names of this field."""
        if self.kind == "ragged" and not self.image:
            return [self.name, self.name + SHAPE_SUFFIX]
        return [self.name]

    def describe(self) -> str:
        """``uint8 array (224, 224, 3), raw`` and the like."""
        if self.kind == "array":
            what = f"{np.dtype(self.dtype).name} array {tuple(self.shape)}"
        elif self.kind == "ragged":
            what = f"{np.dtype(self.dtype).name} array of {self.ndim} dims, variable shape"
        elif self.kind == "scalar":
            what = f"{self.pytype or np.dtype(self.dtype).name} scalar"
        else:
            what = self.kind
        return f"{what}, {self.encoding}"

    def to_json(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, entry: dict) -> "FieldSpec":
        return cls(**{k: entry.get(k) for k in ("name", "kind", "dtype", "shape", "ndim", "pytype", "channels")},
                   encoding=entry.get("encoding", "raw"))


# ----------------------------------------------------------------- writing
def _little(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype


def _storable_dtype(dtype: np.dtype, field: str) -> np.dtype:
    if dtype.kind not in "biuf" and dtype != np.bool_:
        raise StoreError(
            f"field {field!r} holds {dtype} arrays; a store holds bool, integer and floating arrays "
            "(strings as str, encoded data as bytes). Convert the values in map() first."
        )
    return _little(dtype)


def _first_kind(value, field: str) -> str:
    if isinstance(value, EncodedImage):
        return "image"
    if isinstance(value, np.ndarray) and value.dtype != object:
        return "array" if value.ndim else "scalar"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, str):
        return "str"
    if isinstance(value, (bool, np.bool_, numbers.Integral, numbers.Real)) and not isinstance(value, complex):
        return "scalar"
    raise StoreError(
        f"field {field!r} holds a {type(value).__name__} ({value!r:.60}); a store holds NumPy arrays, "
        "numbers, str and bytes. Convert it in map() (e.g. np.asarray(...), str(...), pickle.dumps(...))."
    )


def _as_list(column, rows: int, field: str) -> list:
    if isinstance(column, np.ndarray):
        if column.dtype.kind in "US" or column.dtype == object:
            return column.tolist()
        return list(column)
    if isinstance(column, (list, tuple)):
        if len(column) != rows:
            raise StoreError(f"field {field!r} has {len(column)} values where the batch has {rows} rows; every field needs one value per row")
        return list(column)
    raise StoreError(f"field {field!r} of a batch is a {type(column).__name__}; give an array with one row per sample, or a list")


def infer(name: str, column, rows: int, encoding: str, variable: bool) -> FieldSpec:
    """The `FieldSpec` of a field from its first batch column (an array with a row axis, or a list)."""
    kind_name, _ = parse_encoding(encoding, name)
    if isinstance(column, np.ndarray) and column.dtype.kind not in "USO":
        values = None
        spec = _infer_from_block(name, column, encoding, variable)
        image = False
    else:
        values = _as_list(column, rows, name)
        if not values:
            raise StoreError(f"field {name!r}: cannot infer its type from an empty batch")
        kind = _first_kind(values[0], name)
        spec = _INFER_FROM_VALUES.get(kind, _infer_plain)(name, kind, values, encoding, variable)
        image = kind == "image"
    if image or kind_name in ("jpeg", "png"):
        _check_image_field(spec, name, kind_name, column, values)
    return spec


def _infer_from_block(name: str, column: np.ndarray, encoding: str, variable: bool) -> FieldSpec:
    """The spec of a field given as one numeric array with a row axis."""
    if column.ndim == 0:
        raise StoreError(f"field {name!r} of the batch is a 0-d array; batch columns need a row axis")
    dtype = _storable_dtype(column.dtype, name)
    if column.ndim == 1:
        return FieldSpec(name, "scalar", dtype.str, encoding=encoding)
    return FieldSpec(name, "ragged" if variable else "array", dtype.str, list(column.shape[1:]) if not variable else None,
                     column.ndim - 1 if variable else None, encoding=encoding)


def _infer_encoded_images(name: str, kind: str, values: list, encoding: str, variable: bool) -> FieldSpec:
    """The spec of a field of already-encoded images: fixed-shape when every image has one shape."""
    first = values[0]
    shapes = {v.shape for v in values if isinstance(v, EncodedImage)}
    fixed = len(shapes) == 1 and not variable
    return FieldSpec(name, "array" if fixed else "ragged", first.dtype, list(first.shape) if fixed else None,
                     None if fixed else len(first.shape), encoding=first.encoding)


def _infer_arrays(name: str, kind: str, values: list, encoding: str, variable: bool) -> FieldSpec:
    """The spec of a field of per-row arrays: fixed-shape when every row has the first row's shape."""
    first = values[0]
    dtype = _storable_dtype(first.dtype, name)
    fixed = not variable and all(isinstance(v, np.ndarray) and v.shape == first.shape for v in values)
    return FieldSpec(name, "array" if fixed else "ragged", dtype.str, list(first.shape) if fixed else None,
                     None if fixed else first.ndim, encoding=encoding)


def _infer_scalars(name: str, kind: str, values: list, encoding: str, variable: bool) -> FieldSpec:
    """The spec of a field of numbers: NumPy scalars keep their dtype, Python numbers their type."""
    first = values[0]
    if isinstance(first, np.generic):
        return FieldSpec(name, "scalar", _storable_dtype(np.asarray(first).dtype, name).str, encoding=encoding)
    pytype = "bool" if isinstance(first, bool) else ("int" if isinstance(first, numbers.Integral) else "float")
    dtype = {"bool": "|b1", "int": "<i8", "float": "<f8"}[pytype]
    return FieldSpec(name, "scalar", dtype, encoding=encoding, pytype=pytype)


def _infer_plain(name: str, kind: str, values: list, encoding: str, variable: bool) -> FieldSpec:
    """The spec of a ``str`` or ``bytes`` field."""
    return FieldSpec(name, kind, encoding=encoding)


# first row's kind (see `_first_kind`) -> how to infer the spec of a list column; others are str/bytes.
_INFER_FROM_VALUES = {
    "image": _infer_encoded_images,
    "array": _infer_arrays,
    "scalar": _infer_scalars,
}


def _check_image_field(spec: FieldSpec, name: str, kind_name: str, column, values: list | None) -> None:
    """Refuse an image encoding of non-array values; check the image shape and set ``spec.channels``.

    A variable-shape field is checked on its first row (``column[0]`` of an
    array column, else ``values[0]``).
    """
    if spec.kind not in ("array", "ragged"):
        raise StoreError(f"field {name!r} holds {spec.kind} values; the {kind_name} encoding is for image arrays. "
                         "Store already-encoded files with encoding 'raw' (or 'zstd').")
    shape = spec.shape if spec.kind == "array" else None
    if shape is None:
        shape = (column[0] if isinstance(column, np.ndarray) else values[0]).shape
    check_image(tuple(shape), spec.dtype, parse_encoding(spec.encoding, name)[0], name)
    spec.channels = 1 if len(shape) == 2 else shape[2]


def _row_error(spec: FieldSpec, row: int, got: str, hint: str = "") -> StoreError:
    return StoreError(f"field {spec.name!r}, row {row} of the batch: {got}; the store's field is {spec.describe()}{hint}")


def normalize(spec: FieldSpec, column, rows: int, offset: int = 0):
    """A batch column in the canonical buffered form of ``spec`` (checked).

    Forms: ``array`` -> ndarray ``(rows, *shape)``; image fields -> list of
    bytes (encoded here unless given as `EncodedImage`); ``ragged`` -> list
    of arrays; ``scalar`` -> 1-D ndarray; ``bytes``/``str`` -> list.
    ``offset`` is the row number of the batch's first row, for messages.
    """
    if spec.image:
        return _normalize_image(spec, column, rows, offset)
    return _NORMALIZERS.get(spec.kind, _normalize_blobs)(spec, column, rows, offset)


_VARYING_IMAGES = "; pass variable_shape=[name] to StoreWriter for images of varying size"
_VARYING_ARRAYS = "; pass variable_shape=[name] to StoreWriter for arrays of varying shape"


def _image_fits(spec: FieldSpec, shape) -> bool:
    """Whether an image of ``shape`` fits an image field (its fixed shape, or its dims and channels)."""
    if spec.kind == "array":
        return tuple(shape) == tuple(spec.shape)
    if spec.kind == "ragged":
        return len(shape) == spec.ndim and (1 if len(shape) == 2 else shape[2]) == spec.channels
    return True


def _normalize_image(spec: FieldSpec, column, rows: int, offset: int) -> list:
    """Image rows as encoded bytes: `EncodedImage` data kept as given, arrays encoded here."""
    out = []
    values = list(column) if isinstance(column, np.ndarray) else _as_list(column, rows, spec.name)
    for i, v in enumerate(values):
        if isinstance(v, EncodedImage):
            if v.encoding != spec.encoding:
                raise _row_error(spec, offset + i, f"an image encoded as {v.encoding}")
            shape = v.shape
            data = v.data
        elif isinstance(v, np.ndarray):
            shape = v.shape
            data = None
        else:
            raise _row_error(spec, offset + i, f"a {type(v).__name__}")
        if not _image_fits(spec, shape):
            raise _row_error(spec, offset + i, f"an image of shape {tuple(shape)}", _VARYING_IMAGES)
        out.append(data if data is not None else encode_image(v, spec.encoding, spec.name))
    return out


def _normalize_array(spec: FieldSpec, column, rows: int, offset: int) -> np.ndarray:
    """A fixed-shape field as one ``(rows, *shape)`` array."""
    if isinstance(column, np.ndarray) and column.dtype != object:
        if column.shape[1:] != tuple(spec.shape):
            raise _row_error(spec, offset, f"arrays of shape {column.shape[1:]}", _VARYING_ARRAYS)
        return _cast(spec, column, offset)
    values = _as_list(column, rows, spec.name)
    for i, v in enumerate(values):
        if not isinstance(v, np.ndarray) or v.shape != tuple(spec.shape):
            got = f"an array of shape {v.shape}" if isinstance(v, np.ndarray) else f"a {type(v).__name__}"
            raise _row_error(spec, offset + i, got, _VARYING_ARRAYS)
    arr = np.stack(values) if values else np.empty((0, *spec.shape), spec.dtype)
    return _cast(spec, arr, offset)


def _normalize_ragged(spec: FieldSpec, column, rows: int, offset: int) -> list:
    """A variable-shape field as a list of arrays, each of the field's dims and dtype."""
    values = list(column) if isinstance(column, np.ndarray) else _as_list(column, rows, spec.name)
    out = []
    for i, v in enumerate(values):
        if not isinstance(v, np.ndarray) or v.ndim != spec.ndim:
            got = f"an array of {v.ndim} dims" if isinstance(v, np.ndarray) else f"a {type(v).__name__}"
            raise _row_error(spec, offset + i, got)
        out.append(_cast(spec, v, offset + i))
    return out


def _normalize_scalar(spec: FieldSpec, column, rows: int, offset: int) -> np.ndarray:
    """A scalar field as a 1-D array."""
    if isinstance(column, np.ndarray) and column.dtype.kind not in "USO":
        if column.ndim != 1:
            raise _row_error(spec, offset, f"arrays of shape {column.shape[1:]}")
        return _cast(spec, column, offset)
    values = _as_list(column, rows, spec.name)
    for i, v in enumerate(values):
        if _first_kind(v, spec.name) != "scalar":
            raise _row_error(spec, offset + i, f"a {type(v).__name__}")
    return _cast(spec, np.asarray(values), offset)


def _normalize_blobs(spec: FieldSpec, column, rows: int, offset: int) -> list:
    """A ``str`` field as a list of str, a ``bytes`` field as a list of bytes."""
    values = _as_list(column, rows, spec.name)
    wanted = str if spec.kind == "str" else (bytes, bytearray, memoryview)
    for i, v in enumerate(values):
        if not isinstance(v, wanted):
            raise _row_error(spec, offset + i, f"a {type(v).__name__}")
    return values if spec.kind == "str" else [bytes(v) for v in values]


# kind -> the normalizer of its (non-image) batch columns; other kinds are str/bytes.
_NORMALIZERS = {
    "array": _normalize_array,
    "ragged": _normalize_ragged,
    "scalar": _normalize_scalar,
}


def _cast(spec: FieldSpec, arr: np.ndarray, row: int) -> np.ndarray:
    dtype = np.dtype(spec.dtype)
    if arr.dtype != dtype:
        if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
            raise _row_error(spec, row, f"{arr.dtype} values")
        arr = arr.astype(dtype)
    return np.ascontiguousarray(arr)


def buffered_bytes(spec: FieldSpec, chunk) -> int:
    """Bytes a buffered chunk will take in the file (before compression)."""
    if isinstance(chunk, np.ndarray):
        return chunk.nbytes
    if spec.kind == "ragged" and not spec.image:
        return sum(v.nbytes for v in chunk)
    return sum(len(v) for v in chunk) if spec.kind != "str" else sum(len(v) for v in chunk) + 8 * len(chunk)


def _numeric(dtype: np.dtype):
    pa = pyarrow()
    if dtype == np.bool_:
        return pa.uint8()
    return pa.from_numpy_dtype(dtype)


def arrow_fields(spec: FieldSpec) -> list:
    """The Arrow schema fields of ``spec`` (field metadata repeats the shape and dtype)."""
    pa = pyarrow()
    meta = {b"feedline.kind": spec.kind.encode(), b"feedline.encoding": spec.encoding.encode()}
    if spec.dtype:
        meta[b"feedline.dtype"] = spec.dtype.encode()
    if spec.shape is not None:
        meta[b"feedline.shape"] = ",".join(map(str, spec.shape)).encode()
    if spec.image:
        return [pa.field(spec.name, pa.large_binary(), nullable=False, metadata=meta)]
    dtype = np.dtype(spec.dtype) if spec.dtype else None
    if spec.kind == "array":
        size = int(np.prod(spec.shape, dtype=np.int64))
        return [pa.field(spec.name, pa.list_(pa.field("item", _numeric(dtype), nullable=False), size), nullable=False, metadata=meta)]
    if spec.kind == "ragged":
        return [
            pa.field(spec.name, pa.large_list(pa.field("item", _numeric(dtype), nullable=False)), nullable=False, metadata=meta),
            pa.field(spec.name + SHAPE_SUFFIX, pa.list_(pa.field("item", pa.int64(), nullable=False), spec.ndim), nullable=False),
        ]
    if spec.kind == "scalar":
        typ = pa.bool_() if dtype == np.bool_ else pa.from_numpy_dtype(dtype)
        return [pa.field(spec.name, typ, nullable=False, metadata=meta)]
    return [pa.field(spec.name, pa.large_binary() if spec.kind == "bytes" else pa.large_string(), nullable=False, metadata=meta)]


def to_arrow(spec: FieldSpec, chunks: list) -> list:
    """Arrow arrays for ``spec`` from buffered chunks (in `normalize`'s forms)."""
    pa = pyarrow()
    if spec.image or spec.kind in ("bytes", "str"):
        values = [v for chunk in chunks for v in chunk]
        typ = pa.large_string() if spec.kind == "str" else pa.large_binary()
        return [pa.array(values, type=typ)]
    if spec.kind == "array":
        arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        flat = arr.reshape(-1)
        if flat.dtype == np.bool_:
            flat = flat.view(np.uint8)
        return [pa.FixedSizeListArray.from_arrays(pa.array(flat), int(np.prod(spec.shape, dtype=np.int64)))]
    if spec.kind == "scalar":
        arr = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
        return [pa.array(arr)]
    values = [v for chunk in chunks for v in chunk]  # ragged
    lengths = np.fromiter((v.size for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate([v.reshape(-1) for v in values]) if values else np.empty(0, spec.dtype)
    if flat.dtype == np.bool_:
        flat = flat.view(np.uint8)
    shapes = np.array([v.shape for v in values], dtype=np.int64).reshape(-1)
    return [
        pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat)),
        pa.FixedSizeListArray.from_arrays(pa.array(shapes, type=pa.int64()), spec.ndim),
    ]


# ----------------------------------------------------------------- reading
def _buffer_array(buffer, dtype, start: int, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` from an Arrow buffer, starting at item ``start``: a read-only view."""
    dtype = np.dtype(dtype)
    if buffer is None or count == 0:
        return np.empty(0, dtype)
    return np.frombuffer(buffer, dtype=dtype, count=count, offset=start * dtype.itemsize)


class Column:
    """One field of one record batch, as NumPy over the Arrow buffers.

    ``value(row)`` returns a sample's value (a read-only view for arrays);
    ``array`` is the whole ``(rows, *shape)`` block of an ``array`` field
    (None for other kinds), which a gather indexes in bulk.
    """

    __slots__ = ("_value", "array", "spec", "where")

    def __init__(self, spec: FieldSpec, arrays: list, where: str):
        self.spec, self.where, self.array = spec, where, None
        data = arrays[0]
        rows = len(data)
        if spec.image or spec.kind in ("bytes", "str"):
            offsets = _buffer_array(data.buffers()[1], np.int64, data.offset, rows + 1)
            blob = _buffer_array(data.buffers()[2], np.uint8, 0, int(offsets[-1]) if rows else 0)
            if spec.image:
                shape = spec.shape
                ndim = len(shape) if shape is not None else spec.ndim
                channels, encoding = spec.channels, spec.encoding

                def value(i):
                    image = decode_image(memoryview(blob[offsets[i]:offsets[i + 1]]), encoding, ndim, channels, f"{where}, row {i}")
                    if shape is not None and image.shape != tuple(shape):
                        raise StoreError(f"{where}, row {i}: decoded shape {image.shape}, the store says {tuple(shape)}; the store is damaged")
                    return image
            elif spec.kind == "str":
                def value(i):
                    return blob[offsets[i]:offsets[i + 1]].tobytes().decode("utf-8")
            else:
                def value(i):
                    return blob[offsets[i]:offsets[i + 1]].tobytes()
        elif spec.kind == "array":
            dtype = np.dtype(spec.dtype)
            size = int(np.prod(spec.shape, dtype=np.int64))
            child = data.values
            store_dtype = np.uint8 if dtype == np.bool_ else dtype
            flat = _buffer_array(child.buffers()[1], store_dtype, child.offset + data.offset * size, rows * size)
            self.array = flat.view(dtype).reshape((rows, *spec.shape))
            block = self.array

            def value(i):
                return block[i]
        elif spec.kind == "scalar":
            dtype = np.dtype(spec.dtype)
            if dtype == np.bool_:
                block = data.to_numpy(zero_copy_only=False)
            else:
                block = _buffer_array(data.buffers()[1], dtype, data.offset, rows)
            self.array = block
            cast = _PYTYPES.get(spec.pytype)
            if cast is None:
                def value(i):
                    return block[i]
            else:
                def value(i):
                    return cast(block[i])
        else:  # ragged
            dtype = np.dtype(spec.dtype)
            store_dtype = np.uint8 if dtype == np.bool_ else dtype
            offsets = _buffer_array(data.buffers()[1], np.int64, data.offset, rows + 1)
            child = data.values
            flat = _buffer_array(child.buffers()[1], store_dtype, child.offset, int(offsets[-1]) if rows else 0).view(dtype)
            shape_col = arrays[1]
            shapes = _buffer_array(shape_col.values.buffers()[1], np.int64, shape_col.values.offset + shape_col.offset * spec.ndim,
                                   rows * spec.ndim).reshape(rows, spec.ndim)

            def value(i):
                return flat[offsets[i]:offsets[i + 1]].reshape(tuple(shapes[i]))
        self._value = value

    def value(self, row: int):
        return self._value(row)
