"""The Ray side of the Ray backend: the actor class and how the pipeline reaches it.

`RayWorker` is a plain class; `feedline.backends.ray._executor` turns it into a Ray
actor with the user's resource options. One actor holds the unpickled
`WorkerPart` for its whole life, so a task costs one actor call (the part,
with its functions and arrays, is not unpickled per batch).

Shipping the part (`dumps_part` / `loads_part`): the pipeline is pickled with
cloudpickle (lambdas and closures travel by value), protocol 5, with

- arrays of at least `SHARE_THRESHOLD` bytes passed out of band: the consumer
  puts them in Ray's object store once, and every actor on a node maps the
  same read-only copy (Ray moves it to other nodes once per node);
- memory-mapped arrays passed as file name and layout, reopened by each
  actor (on a cluster the file must exist at the same path on every node);
- Ray object references (the blocks of `fl.from_ray_dataset`) passed
  beside the pickle, inside the object the consumer puts, so Ray counts
  them and frees the blocks only after the last actor is gone;
- the consumer's ``sys.path``: entries that exist on the actor's node and
  are missing from its path are appended, so functions imported from the
  user's own modules are found as in process workers (on other nodes, ship
  them with ``ray_options={"runtime_env": {"py_modules": [...]}}``).

This module imports Ray only inside the actor's methods, never at import.
"""

from __future__ import annotations

import io
import os
import pickle
import socket
import sys
import time
import traceback
import types

import cloudpickle
import numpy as np

from ...transport._transfer import SHARE_THRESHOLD, code_with_its_file, memmap_reduction
from ...worker import Cancelled, Result, Task, TaskError, run_task
from .._base import loading_pipeline, mark_worker

__all__ = ["CONTROL", "RayWorker", "dumps_part", "loads_part"]

CONTROL = "control"  # the actor's concurrency group for `RayWorker.cancel`, one thread beside the tasks' one


class _PartPickler(cloudpickle.Pickler):
    """cloudpickle with large buffers and Ray references kept out of the byte string."""

    def __init__(self, file, ref_type):
        self.buffers: list = []
        self.refs: list = []
        self._ref_type = ref_type
        super().__init__(file, protocol=5, buffer_callback=self._buffer)

    def _buffer(self, buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < SHARE_THRESHOLD:
            return True  # small: in the pickle itself
        self.buffers.append(np.frombuffer(buffer.raw(), dtype=np.uint8))
        return False

    def reducer_override(self, obj):
        if type(obj) is types.CodeType:
            reduced = code_with_its_file(obj)
            if reduced is not None:
                return reduced
        if isinstance(obj, np.ndarray) and obj.dtype != object:
            reopen = memmap_reduction(obj)
            if reopen is not None:
                return reopen
        return super().reducer_override(obj)

    def persistent_id(self, obj):
        if self._ref_type is not None and isinstance(obj, self._ref_type):
            self.refs.append(obj)
            return ("ray_ref", len(self.refs) - 1)
        return None


class _PartUnpickler(pickle.Unpickler):
    def __init__(self, data: bytes, buffers, refs):
        super().__init__(io.BytesIO(data), buffers=buffers)
        self._refs = refs

    def persistent_load(self, pid):
        kind, position = pid
        if kind != "ray_ref":
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r} in a feedline pipeline")
        return self._refs[position]


def dumps_part(part, ref_type=None) -> tuple[bytes, list, list, list]:
    """``(pickle, large buffers, Ray references, sys.path)`` of ``part``; see the module docstring."""
    buf = io.BytesIO()
    pickler = _PartPickler(buf, ref_type)
    pickler.dump(part)
    return buf.getvalue(), pickler.buffers, pickler.refs, list(sys.path)


def loads_part(data: bytes, buffers, refs):
    """The inverse of `dumps_part` (buffers may be read-only object-store views)."""
    return _PartUnpickler(data, buffers, refs).load()


class RayWorker:
    """One Ray actor: runs `run_task` on the tasks the consumer sends it, in order.

    Actor calls from one caller run one at a time in submission order
    (``max_concurrency=1``), which the consumer relies on to tell which task
    was running when the actor died; only `cancel` runs beside them, in a
    concurrency group of its own (`CONTROL`).
    """

    def __init__(self, shipped: tuple):
        # ``shipped`` arrives resolved from the object store; the arrays in it
        # are read-only views of the node's shared copy.
        self.part, self.error = None, None
        mark_worker()  # as in process workers: describing a pipeline here starts no fork server
        data, buffers, refs, paths = shipped
        sys.path.extend(p for p in paths if p and p not in sys.path and os.path.exists(p))
        try:
            with loading_pipeline():  # as in process workers (`check_not_loading`)
                self.part = loads_part(data, buffers, refs)
        except BaseException:  # reported by ready(), so the consumer can stop with the reason
            self.error = traceback.format_exc()
        self.streams: dict = {}
        self.cancelled_through = -1  # the newest generation the consumer cancelled (`cancel`)

    def cancel(self, generation: int) -> None:
        """Nobody reads tasks of ``generation`` or older any more: the one running stops at its next sample.

        Called in the actor's `CONTROL` concurrency group, beside the
        running task (tasks keep to one at a time, in order, in the default
        group): Ray's own ``ray.cancel`` missed calls already queued at the
        actor.
        """
        self.cancelled_through = max(self.cancelled_through, generation)

    def ready(self) -> tuple:
        """``("ready", pid, host, node id, wall - perf_counter)`` or ``("part_error", traceback)``."""
        if self.error is not None:
            return ("part_error", self.error)
        import ray

        node = ray.get_runtime_context().get_node_id()
        return ("ready", os.getpid(), socket.gethostname(), node, time.time() - time.perf_counter())

    def run(self, task: Task, generation: int = -1, worker: tuple = (0, 1)) -> Result:
        """Run one task of ``generation``; its batch goes back through the object store.

        It stops before its next sample once `cancel` named its generation
        (an empty `Result`, which the consumer drops).
        """
        def unless_cancelled(index) -> None:
            if self.cancelled_through >= generation:
                raise Cancelled

        try:
            return run_task(self.part, task, None, unless_cancelled, self.streams, own_process=True, worker=(*worker, "ray"))
        except Cancelled:
            return Result()
        except BaseException as exc:  # reported to the consumer, never swallowed
            return Result(error=TaskError.from_exception(exc))

    def probe(self, task: Task, position: int) -> None:
        """Run sample ``position`` of ``task`` alone, output discarded.

        Used only for the last attempt of a task that already killed its
        worker: the consumer sends one probe per sample before the task, so
        if one kills this actor, that call names the sample.
        """
        run_task(self.part, Task(task.epoch, task.number, indices=task.indices[position : position + 1]), own_process=True)
