"""Shipping a pipeline to worker processes: cloudpickle, minus the big arrays.

A pipeline description (source, user functions, closures) is pickled once
per runtime with cloudpickle, so lambdas, closures and functions defined in
``__main__`` or a notebook travel by value. Two kinds of arrays are never
copied into the pickle:

- memory-mapped arrays (``np.memmap``, ``np.load(mmap_mode=...)``, and views
  of them) travel as *file name + offset + layout* and are reopened by each
  worker, so a 100 GB array is never read whole;
- in-memory arrays of at least `SHARE_THRESHOLD` bytes are copied once into
  a shared-memory segment owned by the consumer's runtime; workers map it
  read-only. N workers cost one copy, not N.

Functions pickled by value keep the name of the file they were defined in
(`code_with_its_file`), so a worker's traceback shows the user's file and
line.

Ownership: the consumer's `SharedArrays` creates the segments and unlinks
their names when the runtime closes. Workers record which names they
mapped and unlink them too if they see the consumer die, so a killed
consumer leaks nothing.
"""

from __future__ import annotations

import io
import itertools
import os
import types

import cloudpickle
import numpy as np

from ._shm import Segment, segment_prefix, unlink, warn_spilled

__all__ = ["SHARE_THRESHOLD", "SharedArrays", "attached_names", "check_picklable", "code_with_its_file", "dumps_for_workers"]

SHARE_THRESHOLD = 1 << 20  # 1 MiB: below this, pickling a copy is cheaper than a segment.

_serial = itertools.count()
_attached: dict[str, Segment] = {}  # worker side: segments this process mapped


def attached_names() -> list[str]:
    """Names of the shared arrays this (worker) process has mapped."""
    return list(_attached)


class SharedArrays:
    """Consumer-side registry of arrays placed in shared memory for workers."""

    def __init__(self):
        self._by_id: dict[int, tuple[str, np.ndarray]] = {}

    def share(self, array: np.ndarray) -> str:
        key = id(array)
        if key in self._by_id:
            return self._by_id[key][0]
        seg = Segment.create(f"{segment_prefix()}a{next(_serial)}", array.nbytes, what="an array of the source, for the workers,")
        warn_spilled(seg)
        view = np.ndarray(array.shape, array.dtype, buffer=seg.buf)
        view[...] = array
        # Keep the source array alive so id() stays unique while shared.
        self._by_id[key] = (seg.name, array)  # the name says where it is (a memory file's: its owner's descriptor)
        return seg.name

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self._by_id.values()]

    def close(self) -> None:
        for name, _ in self._by_id.values():
            unlink(name)
        self._by_id.clear()


def _memmap_root(array: np.ndarray):
    root = array
    while isinstance(root.base, np.ndarray):
        root = root.base
    if isinstance(root, np.memmap) and getattr(root, "filename", None):
        return root
    return None


def memmap_reduction(obj: np.ndarray):
    """How a view of a memory-mapped file travels: its file, offset and view, reopened by the receiver.

    None when ``obj`` is not backed by a file (the caller pickles it otherwise).
    """
    root = _memmap_root(obj)
    if root is None:
        return None
    delta = obj.__array_interface__["data"][0] - root.__array_interface__["data"][0]
    order = "F" if root.flags.f_contiguous and not root.flags.c_contiguous else "C"
    return _reopen_memmap, (
        os.fspath(root.filename), root.dtype.str, root.shape, order,
        int(root.offset), int(delta), obj.shape, obj.dtype.str, obj.strides,
    )


def _reopen_memmap(filename, dtype, shape, order, offset, delta, view_shape, view_dtype, strides):
    root = np.memmap(filename, dtype=dtype, mode="r", shape=shape, order=order, offset=offset)
    return np.ndarray(view_shape, view_dtype, buffer=root, offset=delta, strides=strides)


def _attach_array(name: str, shape, dtype):
    seg = _attached.get(name)
    if seg is None:
        seg = _attached[name] = Segment.attach(name, readonly=True)
    return np.ndarray(shape, dtype, buffer=seg.buf)


_DYNAMIC_FILE = "<dynamic-code>"  # what cloudpickle (3.1.3 and later) writes as the file of code it pickles by value
_code_reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)  # private: absent, code pickles as cloudpickle does


def code_with_its_file(code: types.CodeType):
    """cloudpickle's reduction of a code object, with the file it was defined in kept (None: leave it to cloudpickle).

    cloudpickle 3.1.3 names the file of every function it pickles by value
    (lambdas, closures, ``__main__`` and notebook functions) ``<dynamic-code>``
    so that pickles do not depend on where a function was defined; a
    worker's traceback of the user's function then showed neither the file
    nor the failing line. feedline pickles a pipeline once per run, so it
    keeps the name (a path or ``<stdin>``: nothing is read from it here).
    """
    if _code_reduce is None:
        return None
    constructor, args = _code_reduce(code)
    return constructor, tuple(code.co_filename if isinstance(a, str) and a == _DYNAMIC_FILE else a for a in args)


def _drop(buffer) -> None:
    """A dry run's buffer callback: the buffer is not needed."""


class _WorkerPickler(cloudpickle.Pickler):
    def __init__(self, file, shared: SharedArrays | None, out_of_band: bool = False):
        if out_of_band:  # (a dry run: protocol 5 hands each buffer to the callback instead of writing it)
            super().__init__(file, protocol=5, buffer_callback=_drop)
        else:
            super().__init__(file)
        self._shared = shared

    def reducer_override(self, obj):
        if type(obj) is types.CodeType:
            reduced = code_with_its_file(obj)
            if reduced is not None:
                return reduced
        if isinstance(obj, np.ndarray) and obj.dtype != object:
            reopen = memmap_reduction(obj)
            if reopen is not None:
                return reopen
            if obj.nbytes >= SHARE_THRESHOLD:
                if self._shared is None:  # a dry run (see check_picklable): no copy
                    return _attach_array, ("", obj.shape, obj.dtype.str)
                data = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
                return _attach_array, (self._shared.share(data), obj.shape, obj.dtype.str)
        return super().reducer_override(obj)


class _Discard:
    """A file that keeps nothing: a dry run needs the pickler's checks, not its bytes."""

    def write(self, data) -> int:
        return len(data)


def check_picklable(obj) -> None:
    """Pickle ``obj`` as `dumps_for_workers` would, without copying large arrays.

    Cheap enough to run before any worker starts, so an unpicklable
    function is reported first; raises what the pickler raises. Nothing
    is kept: the bytes go to a sink, and array buffers of any size (and
    bytearrays) go out of band to a callback that drops them, so a source
    of many small arrays is not copied either.
    """
    _WorkerPickler(_Discard(), None, out_of_band=True).dump(obj)


def dumps_for_workers(obj, shared: SharedArrays) -> bytes:
    """Pickle ``obj`` for worker processes (see the module docstring)."""
    buf = io.BytesIO()
    _WorkerPickler(buf, shared).dump(obj)
    return buf.getvalue()
