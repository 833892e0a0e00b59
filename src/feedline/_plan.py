"""From a pipeline description to the work a worker does.

`compile_plan` checks the order of steps and splits them into:
- index steps (shuffle, shard), run by the consumer to make each epoch's
  list of indices: cheap, and the reason every guarantee holds;
- the `WorkerPart`: source, per-sample steps, collation and (when batches
  line up with tasks) batch steps, run in a worker for one task at a time
  by `run_task`, identically on every backend.

A task is a run of consecutive positions of the epoch's index list (one
batch's worth). When no step can drop a sample, a task's output is exactly
one batch ("aligned"), which the worker finishes completely. With
``filter`` or ``on_error="skip"`` a task may come back short; the consumer
then re-cuts rows into full batches and runs the batch steps itself.
"""

from __future__ import annotations

import os
import secrets
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ._steps import Batch, Filter, Map, MapBatch, Prefetch, Shard, Shuffle
from ._tree import collate_into

__all__ = ["Plan", "Result", "Task", "WorkerPart", "compile_plan", "run_task", "sample_rng"]

_CHUNK_UNBATCHED = 64  # samples per task when the pipeline does not batch


def sample_rng(seed: int, epoch: int, index, step: int) -> np.random.Generator:
    """The generator a ``fn(sample, rng)`` sees: a function of its arguments only."""
    key = (epoch, step) + (tuple(index) if isinstance(index, tuple) else (int(index),))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


@dataclass
class WorkerPart:
    """Everything a worker needs; pickled once per runtime."""

    source: object
    ops: list  # Map and Filter steps, in order
    batch_size: int | None
    collate: object
    batch_ops: list  # MapBatch steps run in the worker (aligned plans only)
    seed: int
    aligned: bool


@dataclass
class Plan:
    """A compiled pipeline: what the consumer and the workers each do."""

    part: WorkerPart
    index_steps: list
    drop_remainder: bool
    consumer_batch_ops: list
    backend: str | None
    workers: int | None
    ordered: bool
    depth: int | None

    @property
    def streaming(self) -> bool:
        return self.part.source.streaming

    @property
    def task_size(self) -> int:
        return self.part.batch_size or _CHUNK_UNBATCHED

    def _ordered(self, count: int, epoch: int) -> np.ndarray:
        """``arange(count)`` permuted by each shuffle and strided by each shard, in step order."""
        order = np.arange(count, dtype=np.int64)
        for step in self.index_steps:
            if isinstance(step, Shuffle):
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(step.seed, spawn_key=(epoch,))))
                order = order[rng.permutation(len(order))]
            else:
                order = _shard(order, step)
        return order

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The epoch's sample indices in delivery order (indexed sources)."""
        return self._ordered(len(self.part.source), epoch)

    def epoch_shards(self, epoch: int) -> list[int]:
        """The epoch's generator shards in delivery order (streaming sources)."""
        return [int(s) for s in self._ordered(self.part.source.num_shards, epoch)]

    def num_batches(self) -> int:
        """Batches per epoch; TypeError when it cannot be known in advance."""
        if self.streaming:
            raise TypeError("len() is unknown for a generator source: the number of samples is not known in advance")
        if any(isinstance(op, Filter) for op in self.part.ops):
            raise TypeError("len() is unknown after filter(): the number of samples kept is not known in advance")
        n = len(self.epoch_indices(0))
        size = self.part.batch_size
        if size is None:
            return n
        return n // size if self.drop_remainder else -(-n // size)


def _shard(order: np.ndarray, step: Shard) -> np.ndarray:
    """This rank's positions: every ``count``-th, after evening out the length if asked.

    ``even="drop"`` cuts the order to a multiple of ``count`` (at most
    ``count - 1`` samples of the epoch are left out, different ones each
    shuffled epoch); ``"pad"`` repeats the first samples to fill it (those
    are seen twice). Either way every rank gets the same number of samples,
    so the same number of batches, and no rank waits forever at a collective.
    """
    if step.even == "drop":
        order = order[: len(order) // step.count * step.count]
    elif step.even == "pad" and len(order) % step.count:
        missing = step.count - len(order) % step.count
        order = np.concatenate([order, np.resize(order, missing)])
    return order[step.index :: step.count]


def compile_plan(source, steps, seed: int) -> Plan:
    """Check the order of ``steps`` and split them into a `Plan`.

    Raises:
        ValueError: a step in a place where it cannot run (e.g. ``map``
            after ``batch``), or map steps asking for different backends.
    """
    index_steps, ops, batch_ops = [], [], []
    batch = None
    depth = None
    for step in steps:
        if isinstance(step, (Shuffle, Shard)):
            if batch is not None:
                raise ValueError(f"{type(step).__name__.lower()}() must come before batch(): it works on sample indices")
            index_steps.append(step)
        elif isinstance(step, (Map, Filter)):
            if batch is not None:
                verb = "map" if isinstance(step, Map) else "filter"
                raise ValueError(f"{verb}() after batch() would see whole batches; put it before batch(), or use map_batch() for work on batches")
            ops.append(step)
        elif isinstance(step, Batch):
            if batch is not None:
                raise ValueError("batch() appears twice; a pipeline batches once (use map_batch() to regroup)")
            batch = step
        elif isinstance(step, MapBatch):
            if batch is None:
                raise ValueError("map_batch() needs a batch() before it")
            batch_ops.append(step)
        elif isinstance(step, Prefetch):
            depth = step.depth if step.depth is not None else depth
    maps = [op for op in ops if isinstance(op, Map)]
    backend, workers = _executor_settings(maps)
    ordered = all(m.ordered for m in maps)
    aligned = not any(isinstance(op, Filter) or op.on_error == "skip" for op in ops)
    if source.streaming:
        aligned = True  # a stream task always fills its batch from the same shard
    part = WorkerPart(
        source=source,
        ops=ops,
        batch_size=batch.size if batch else None,
        collate=batch.collate if batch else None,
        batch_ops=batch_ops if aligned else [],
        seed=seed,
        aligned=aligned,
    )
    return Plan(
        part=part,
        index_steps=index_steps,
        drop_remainder=bool(batch and batch.drop_remainder),
        consumer_batch_ops=[] if aligned else batch_ops,
        backend=backend,
        workers=workers,
        ordered=ordered,
        depth=depth,
    )


def _executor_settings(maps):
    backends = {m.backend for m in maps if m.backend is not None}
    if len(backends) > 1:
        raise ValueError(
            f"map() steps ask for different backends ({', '.join(sorted(backends))}); feedline fuses "
            "all per-sample steps into one stage, so give backend= on one map() only"
        )
    counts = {m.workers for m in maps if m.workers is not None}
    if len(counts) > 1:
        raise ValueError(f"map() steps ask for different worker counts ({sorted(counts)}); give workers= on one map() only")
    return (backends.pop() if backends else None), (counts.pop() if counts else None)


def new_seed() -> int:
    """A fresh random seed, for ``shuffle(seed=None)``."""
    return secrets.randbits(63)


@dataclass
class Task:
    """One unit of work: a batch's worth of indices, or the next batch of a shard."""

    epoch: int
    number: int
    indices: np.ndarray | None = None
    shard: int | None = None
    start: int | None = None  # streaming: raw position to (re)start the shard from


@dataclass
class Result:
    """What a worker returns for a task."""

    payload: object = None  # batch tree, piece, or list of samples; None if no rows
    rows: int = 0
    skipped: list = field(default_factory=list)  # [(index, reason)]
    times: dict = field(default_factory=dict)  # stage name -> seconds
    error: dict | None = None  # see _error_info
    exhausted: bool = False  # streaming: the shard has no more samples
    consumed: int = 0  # streaming: raw position after this task
    span: tuple = (0.0, 0.0)  # perf_counter at start and end, in the worker (a system-wide clock)
    worker: int = 0  # which worker ran it (position in the pool)
    transport: float = 0.0  # consumer seconds spent receiving and mapping the batch
    cpu: float = 0.0  # CPU seconds the worker thread used on the task


def _error_info(exc: BaseException, index, where, stage) -> dict:
    import cloudpickle

    try:
        pickled = cloudpickle.dumps(exc)
    except Exception as pickling_error:  # an exception that cannot travel is described instead
        pickled = None
        exc = RuntimeError(f"{type(exc).__name__}: {exc} (not picklable: {pickling_error})")
    return {
        "index": index,
        "where": where,
        "stage": stage,
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "exception": pickled,
    }


class _StreamState:
    """A worker's open iterator over one generator shard (None once exhausted)."""

    def __init__(self, source, shard: int, epoch: int, start: int):
        self.iterator = source.open(shard)
        self.epoch, self.position = epoch, 0
        for _ in range(start):
            if next(self.iterator, _END) is _END:
                self.iterator = None
                break
            self.position += 1


_END = object()


class _ReadFailure:
    """An exception raised by a generator shard, carried to the per-sample handler."""

    __slots__ = ("error",)

    def __init__(self, error: Exception):
        self.error = error


def run_task(part: WorkerPart, task: Task, alloc=None, progress=None, streams=None) -> Result:
    """Run one task (see `_run_task`) and record when it ran, for traces."""
    start, cpu = time.perf_counter(), time.thread_time()
    result = _run_task(part, task, alloc, progress, streams)
    result.span = (start, time.perf_counter())
    result.cpu = time.thread_time() - cpu
    return result


def _run_task(part: WorkerPart, task: Task, alloc=None, progress=None, streams=None) -> Result:
    """Run one task: read, per-sample steps, collate, batch steps.

    Args:
        alloc: where collated arrays are written (see `collate_into`).
        progress: optional ``progress(index)`` called before each sample, so
            a process worker can record which sample it was on if it dies.
        streams: the worker's open generator shards (streaming sources).

    Returns:
        A `Result`; sample errors under ``on_error="raise"`` come back in
        ``Result.error`` rather than as an exception, so the consumer raises
        them in order, at the batch where they happened.
    """
    result = Result()
    times = result.times
    source = part.source
    if part.aligned and not part.ops and source.gather is not None and task.indices is not None and part.collate is None and part.batch_size:
        t0 = time.perf_counter()
        batch = source.gather(task.indices, alloc or _default_alloc)
        times["read"] = time.perf_counter() - t0
        result.rows = len(task.indices)
        result.payload = _batch_steps(part, batch, times)
        return result

    samples, kept = [], []
    if task.indices is not None:
        items = ((int(i), None) for i in task.indices)
    else:
        wanted = part.batch_size or _CHUNK_UNBATCHED
        items = _stream_items(part, task, streams, result, lambda: len(samples) < wanted)
    read_time = 0.0
    op_times = [0.0] * len(part.ops)
    for index, streamed in items:
        if progress is not None:
            progress(index)
        stage = "read"
        t0 = time.perf_counter()
        try:
            sample = streamed if task.indices is None else source.read(index)
            if isinstance(sample, _ReadFailure):
                raise sample.error
            t1 = time.perf_counter()
            read_time += t1 - t0
            keep = True
            for step_no, op in enumerate(part.ops):
                stage = op.name
                t0 = time.perf_counter()
                if isinstance(op, Map):
                    try:
                        if op.rng:
                            sample = op.fn(sample, sample_rng(part.seed, task.epoch, index, step_no))
                        else:
                            sample = op.fn(sample)
                    except Exception as exc:
                        if not callable(op.on_error):
                            raise
                        sample = op.on_error(index, exc)
                else:
                    keep = bool(op.pred(sample))
                op_times[step_no] += time.perf_counter() - t0
                if not keep:
                    break
        except Exception as exc:
            policy = _policy_for(part, stage)
            where = source.where(index)
            if policy == "skip":
                result.skipped.append((index, f"{stage}: {type(exc).__name__}: {exc}"))
                continue
            result.error = _error_info(exc, index, where, stage)
            return result
        if keep:
            samples.append(sample)
            kept.append(index)
    times["read"] = read_time
    for op, spent in zip(part.ops, op_times):
        times[op.name] = times.get(op.name, 0.0) + spent
    result.rows = len(samples)
    if not samples:
        return result
    if part.batch_size is None:
        result.payload = samples
        return result
    t0 = time.perf_counter()
    try:
        if part.collate is not None:
            batch = part.collate(samples)
        else:
            direct = alloc if (alloc is not None and not part.batch_ops) else _default_alloc
            batch = collate_into(samples, kept, direct)
    except Exception as exc:
        index = getattr(exc, "index", kept[0])
        result.error = _error_info(exc, index, source.where(index) if not isinstance(index, tuple) else None, "batch")
        return result
    times["batch"] = time.perf_counter() - t0
    try:
        result.payload = _batch_steps(part, batch, times)
    except Exception as exc:
        result.error = _error_info(exc, kept[0], None, "map_batch")
    return result


def _batch_steps(part: WorkerPart, batch, times):
    for op in part.batch_ops:
        t0 = time.perf_counter()
        batch = op.fn(batch)
        times[op.name] = times.get(op.name, 0.0) + time.perf_counter() - t0
    return batch


def _policy_for(part: WorkerPart, stage: str):
    """The ``on_error`` that governs a failure in ``stage``.

    Source reads and filters follow the first map's policy (decoding usually
    lives in the first map, and a file that cannot be read is the same kind
    of failure as one that cannot be decoded).
    """
    maps = [op for op in part.ops if isinstance(op, Map)]
    for op in maps:
        if op.name == stage:
            return op.on_error if op.on_error == "skip" else "raise"
    return maps[0].on_error if maps and maps[0].on_error == "skip" else "raise"


def _stream_items(part, task, streams, result, need_more):
    """Yield ``((shard, position), sample)`` until the batch is full or the shard ends."""
    state = streams.get(task.shard)
    if state is None or state.epoch != task.epoch or (task.start is not None and task.start != state.position):
        state = streams[task.shard] = _StreamState(part.source, task.shard, task.epoch, task.start or 0)
    while need_more():
        if state.iterator is None:
            result.exhausted = True
            break
        try:
            sample = next(state.iterator)
        except StopIteration:
            state.iterator = None  # later tasks of this shard (sent ahead) come back empty
            result.exhausted = True
            break
        except Exception as exc:  # the shard's own code failed: a read error of this item
            state.iterator = None  # a generator that raised cannot continue
            sample = _ReadFailure(exc)
        position = state.position
        state.position += 1
        result.consumed = state.position
        yield (task.shard, position), sample
    result.consumed = state.position


def _default_alloc(specs):
    return [np.empty(shape, dtype) for shape, dtype in specs]


def default_workers() -> int:
    """Cores this process may use: one worker per core."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
