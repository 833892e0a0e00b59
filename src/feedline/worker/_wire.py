"""The process backend's messages as bytes: `encode` on one side of the pipe, `decode` on the other.

The pipe carries one message per task each way, so at small batches its
cost is the consumer's cost per batch (issue 14: on a tiny map, most of it
went to pickling dataclasses and NumPy index arrays). The
three messages of the steady state travel as `marshal` of plain tuples
(far cheaper than pickle): `RunTask` with a 1-D integer index array, `Done`
whose batch lies in shared memory (or that has no rows), and `Release`.
Anything else, or any value marshal cannot write (a NumPy scalar, a
namedtuple in a batch's skeleton, an error record, unbatched samples),
goes as a pickle (cloudpickle where the standard pickler cannot: a
lambda, a class of ``__main__``), so every message still arrives whole. Both ends run the same interpreter
(the fork server's children or ``sys.executable``), which is what marshal
requires.

The first byte names the form:
``P`` cloudpickle, ``T`` a task, ``D`` a finished task, ``R`` a release.
"""

from __future__ import annotations

import marshal
import pickle
from dataclasses import fields as dataclass_fields

import cloudpickle
import numpy as np

from .._tree import Leaf, _is_plain_tuple
from ._protocol import Done, Release, Result, RunTask, Task

__all__ = ["decode", "encode"]

_RESULT_FIELDS = tuple(f.name for f in dataclass_fields(Result) if f.name not in ("payload", "error"))
_PICKLED, _TASK, _DONE, _RELEASE = b"P", b"T", b"D", b"R"


class _Unfit(Exception):
    """The message has a part the fast forms do not carry: it goes as cloudpickle."""


def encode(message) -> bytes:
    """``message`` as bytes for `decode` (the fast form where it fits, else cloudpickle)."""
    try:
        if type(message) is RunTask:
            return _TASK + marshal.dumps(_task_to_wire(message))
        if type(message) is Done:
            return _DONE + marshal.dumps(_done_to_wire(message))
        if type(message) is Release:
            _check_plain(message.slots)
            return _RELEASE + marshal.dumps(message.slots)
    except (_Unfit, ValueError, TypeError):  # marshal raises ValueError on a type it cannot write
        pass
    try:  # the standard pickler: cloudpickle's per-object hook makes long lists of samples much slower to send
        return _PICKLED + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # a lambda, a local class, an object of __main__: what cloudpickle is for
        return _PICKLED + cloudpickle.dumps(message)


def decode(data: bytes):
    """The message `encode` made ``data`` from."""
    form, body = data[:1], memoryview(data)[1:]
    if form == _PICKLED:
        return pickle.loads(body)  # also reads cloudpickle's output
    if form == _TASK:
        return _task_from_wire(marshal.loads(body))
    if form == _DONE:
        return _done_from_wire(marshal.loads(body))
    if form == _RELEASE:
        return Release(marshal.loads(body))
    raise ValueError(f"not a feedline message (first byte {bytes(form)!r}): the pipe is out of step")


# ------------------------------------------------------------------ tasks
def _task_to_wire(message: RunTask):
    task = message.task
    indices = task.indices
    if (task.shard is not None or task.start is not None or task.timed_out or type(indices) is not np.ndarray
            or indices.ndim != 1 or indices.dtype.kind not in "iu"):
        raise _Unfit
    _check_plain((message.key, task.epoch, task.number, message.release, message.worker))
    return (message.key, task.epoch, task.number, indices.dtype.str, np.ascontiguousarray(indices).tobytes(),
            message.release, message.worker)


def _task_from_wire(wire) -> RunTask:
    key, epoch, number, dtype, raw, release, worker = wire
    return RunTask(key, Task(epoch=epoch, number=number, indices=np.frombuffer(raw, dtype=dtype)), release, worker)


# ------------------------------------------------------------------- done
def _done_to_wire(message: Done):
    result = message.result
    if result.payload is not None or result.error is not None:
        raise _Unfit
    values = tuple(getattr(result, name) for name in _RESULT_FIELDS)
    fields = message.fields
    if fields is not None:
        fields = ({"group": [_fields_to_wire(one) for one in fields["group"]]} if "group" in fields
                  else _fields_to_wire(fields))
    _check_plain((message.key, values, fields))
    return message.key, values, fields


_PLAIN = (type(None), bool, int, float, str, bytes)


def _check_plain(value) -> None:
    """Raise `_Unfit` unless ``value`` is built of exactly the types marshal writes back as themselves.

    marshal also writes any object with a buffer (a NumPy scalar or array)
    as bytes, and a subclass (``np.float64``) as its base type: both would
    arrive changed, so they take the pickled form instead.
    """
    kind = type(value)
    if kind in _PLAIN:
        return
    if kind is tuple or kind is list:
        for item in value:
            _check_plain(item)
        return
    if kind is dict:
        for key, item in value.items():
            _check_plain(key)
            _check_plain(item)
        return
    raise _Unfit


def _done_from_wire(wire) -> Done:
    key, values, fields = wire
    result = Result(**dict(zip(_RESULT_FIELDS, values)))
    for one in (() if fields is None else fields["group"] if "group" in fields else (fields,)):
        one["skeleton"] = _skeleton_from_wire(one["skeleton"])
    return Done(key, result, fields)


def _fields_to_wire(fields: dict) -> dict:
    """One batch's slot fields (`SlotWriter.publish`) with its skeleton as tagged tuples."""
    return dict(fields, skeleton=_skeleton_to_wire(fields["skeleton"]))


def _skeleton_to_wire(node):
    """A batch skeleton as tagged tuples: arrays' places (`Leaf`), plain tuples, lists, dicts, plain values."""
    if type(node) is Leaf:
        return ("a", node.i)
    if _is_plain_tuple(node):
        return ("t", [_skeleton_to_wire(v) for v in node])
    if type(node) is list:
        return ("l", [_skeleton_to_wire(v) for v in node])
    if type(node) is dict:
        return ("d", list(node), [_skeleton_to_wire(v) for v in node.values()])
    if type(node) in _PLAIN:
        return ("v", node)
    raise _Unfit  # a namedtuple, a dataclass, an object: cloudpickle keeps its type


def _skeleton_from_wire(wire):
    tag = wire[0]
    if tag == "a":
        return Leaf(wire[1])
    if tag == "t":
        return tuple(_skeleton_from_wire(v) for v in wire[1])
    if tag == "l":
        return [_skeleton_from_wire(v) for v in wire[1]]
    if tag == "d":
        return dict(zip(wire[1], (_skeleton_from_wire(v) for v in wire[2])))
    return wire[1]
