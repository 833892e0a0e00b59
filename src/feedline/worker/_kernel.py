"""The kernel: run one task anywhere (serial, thread, process or Ray actor), identically.

`run_task(part, task)` reads the task's samples, applies the per-sample
steps with each sample's own `rng` (`sample_rng`), follows ``on_error``,
collates and runs the batch steps the worker owns. It knows the steps
only through their small interface (``name``, ``rng``, ``apply``), so a
new step needs no change here. Sample errors under ``on_error="raise"``
come back in `Result.error`, never as an exception, so the consumer raises
them in order, at the batch where they happened. A worker of its own
(process, Ray actor) passes ``own_process=True``: the process's global
random generators are then seeded before each batch (`_generators`).

A worker in the training process (thread, serial) passes ``spent``, a
list it keeps from task to task: the samples a batch was collated from
stay in it and go one at a time as the next task makes its own. Freed
together, a batch's samples would leave glibc's heap with more free space
at its top than its trim threshold (by default twice the largest block it
saw freed), and it hands that memory back; the kernel then zeroes every
page again for the next batch's samples. Freed one at a time, each sample's
memory is taken again by the next. Process workers instead get glibc's
thresholds through their environment (`feedline._malloc`).
"""

from __future__ import annotations

import enum
import sys
import time

import numpy as np

from .._batch_memory import new_arrays
from .._page_faults import thread_kernel_use
from .._tree import BatchGroup, collate_into
from ._generators import seed_global_generators
from ._info import working_as
from ._protocol import Result, Task, TaskError

__all__ = ["Cancelled", "StopHere", "joins_rows", "run_task", "sample_rng", "splittable"]


class Cancelled(Exception):
    """Raised by a ``progress`` callback: nobody will read this task (its epoch iterator was closed or dropped).

    `run_task` lets it propagate before the next sample, keeping nothing
    (no rows are collated, no slot is taken); the executor answers the
    task with an empty `Result` that the consumer drops.
    """


class StopHere(Exception):
    """Raised by a ``progress`` callback to stop a task before its next sample (the automatic choice takes it back).

    Where the task can be split (`splittable`) and has samples done,
    `run_task` ends it there: the result holds the batch of the rows done,
    and ``Result.stopped`` says how many, so the rest can run elsewhere
    and the two be joined into the batch one task would have made.
    Otherwise it propagates, and the whole task runs again elsewhere.
    """


def joins_rows(part) -> bool:
    """Whether every batch of ``part`` is the batch of its first k rows joined to that of the rest, for any k.

    True for one batch a task, collated by the default collate (a custom
    ``collate`` or a padded batch may depend on every row), with no
    ``map_batch`` in the worker (it would see part of a batch), no bulk
    read, and no step that drops samples (``aligned``). The one rule behind
    both ways a batch is cut: a thread's task given back part-done
    (`splittable`) and the epoch's last batches run as pieces
    (`feedline.engine._tail`).
    """
    return (bool(part.batch_size) and part.aligned and part.collate is None and not part.batch_ops
            and not part.bulk_read)


def splittable(part, task: Task) -> bool:
    """Whether ``task``'s batch can stop after any sample and the rest run elsewhere (`joins_rows`, indexed, one batch)."""
    return joins_rows(part) and task.indices is not None and len(task.indices) <= part.batch_size


def sample_rng(seed: int, epoch: int, index, step: int) -> np.random.Generator:
    """The generator a ``fn(sample, rng)`` sees: a function of its arguments only.

    >>> a, b = sample_rng(1, 0, 5, 0), sample_rng(1, 0, 5, 0)
    >>> bool(a.random() == b.random())
    True
    """
    key = (epoch, step) + (tuple(index) if isinstance(index, tuple) else (int(index),))
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=key)))


def run_task(part, task: Task, alloc=None, progress=None, streams=None, waits=None, own_process: bool = False,
             worker: tuple = (0, 1, "serial"), spent: list | None = None) -> Result:
    """Run one task and record when it ran, the CPU it used (for traces) and how long it waited for one.

    Args:
        part: the compiled `WorkerPart` (source, per-sample steps, batching).
        task: which samples.
        alloc: where collated arrays are written (see `collate_into`);
            process workers pass shared-memory slots.
        progress: optional ``progress(index)`` called before each sample, so
            a process worker can record which sample it was on if it dies;
            it may raise `StopHere` (keep the rows done) or `Cancelled`
            (keep nothing).
        streams: the worker's open generator shards (streaming sources).
        waits: the calling thread's `CpuWaitClock`, if it keeps one (worker
            threads and processes): the task's waits for a CPU go to
            ``result.cpu_wait``.
        own_process: the caller is a process that runs only feedline's
            tasks (a process worker, a Ray actor), whose global random
            generators are seeded per batch; never in the user's process.
        worker: ``(id, num_workers, backend)`` of the worker running it,
            what `feedline.get_worker_info` says while it runs.
        spent: the calling worker's samples of its last batched task, let
            go of one at a time as this task makes its own, and then this
            task's (see the module docstring); None: each task's go at once.
    """
    start, cpu, waited = time.perf_counter(), time.thread_time(), 0.0 if waits is None else waits.read()
    faults, kernel = thread_kernel_use()
    with working_as(part.generator_seed, *worker):
        result = _run(part, task, alloc, progress, streams, part.generator_seed if own_process else None, spent)
    result.span = (start, time.perf_counter())
    result.cpu = time.thread_time() - cpu
    faults_after, kernel_after = thread_kernel_use()
    result.fresh_pages, result.kernel_cpu = faults_after - faults, kernel_after - kernel
    if waits is not None:
        result.cpu_wait = waits.read() - waited
    result.counters = part.source.take_counters()  # e.g. a remote store's downloads and retries, in this process
    return result


def _run(part, task: Task, alloc, progress, streams, reseed: int | None, spent: list | None = None) -> Result:
    """``reseed``: the seed of the process's global generators, reseeded before each batch; None: left alone.

    The per-sample loop stays in this one function, on purpose: it is the
    worker's hot path, so only set-up, tear-down and the rare outcomes (a
    stop, a failure) are helpers.
    """
    result = Result()
    if part.bulk_read and task.indices is not None:
        return _run_bulk(part, task, alloc, result, reseed)
    source = part.source
    size = part.batch_size
    grouped = _groups_batches(part, task)
    indexed = task.indices is not None
    samples, kept = [], []
    items = _task_items(part, task, streams, result, samples)
    read_time = 0.0
    op_times = [0.0] * len(part.ops)
    timed_out = task.timed_out  # empty unless map(timeout=...) stopped a worker on one of these
    every = size or sys.maxsize  # the generators are reseeded at each batch's first sample (each task's, unbatched)
    for position, (index, streamed) in enumerate(_letting_go(items, spent)):
        if reseed is not None and position % every == 0:
            seed_global_generators(reseed, task.epoch, 0, index)
        if progress is not None:
            try:
                progress(index)
            except StopHere:
                if not _stops_with_rows_done(part, task, samples, result):
                    raise
                break
        stage = None  # None: reading the sample; else the position of the failing step
        t0 = time.perf_counter()
        try:
            first = 0
            if index in timed_out:  # it got stuck before: what on_error makes of a TimeoutError, unread
                stage = part.timeout_stage
                sample = part.ops[stage].recover(index, _timed_out(part.timeout))
                first = stage + 1
            else:
                sample = source.read(index) if indexed else streamed
            if isinstance(sample, _ReadFailure):
                raise sample.error
            read_time += time.perf_counter() - t0
            keep = True
            for stage, op in enumerate(part.ops[first:], first):
                t0 = time.perf_counter()
                rng = sample_rng(part.seed, task.epoch, index, stage) if op.rng else None
                sample, keep = op.apply(sample, index, rng)
                op_times[stage] += time.perf_counter() - t0
                if not keep:
                    break
        except Exception as exc:
            outcome = _after_failure(part, exc, index, stage, result, grouped, len(samples))
            if outcome is _Failure.SKIP:
                continue
            if outcome is _Failure.END_TASK:
                return result
            break  # the whole batches before this sample are delivered first, then the error (as one batch a task would)
        if keep:
            samples.append(sample)
            kept.append(index)
    _end_sampling(part, progress, result, read_time, op_times)
    result = _deliver(part, task, samples, kept, alloc, result, reseed, grouped)
    _keep_spent(spent, samples, size)
    return result


def _letting_go(items, spent: list | None):
    """``items``, with one of the last task's samples in ``spent`` let go before each (the module docstring)."""
    if not spent:
        return items
    return _one_gone_before_each(items, spent)


def _one_gone_before_each(items, spent: list):
    for item in items:
        if spent:
            del spent[-1]
        yield item


def _keep_spent(spent: list | None, samples: list, size: int | None) -> None:
    """The task's samples, collated into its batches, stay in ``spent`` (those of the last task not let go yet go now)."""
    if spent is not None and size is not None:
        spent[:] = samples


def _run_bulk(part, task: Task, alloc, result: Result, reseed: int | None) -> Result:
    """A task of a bulk-read source without per-sample steps: one ``gather`` of all its rows, then the batch steps."""
    times = result.times
    t0 = time.perf_counter()
    batch = part.source.gather(task.indices, alloc or new_arrays)
    times["read"] = time.perf_counter() - t0
    result.rows = len(task.indices)  # several batches' rows (no map_batch then): the consumer cuts them apart
    result.payload = _batch_steps(part, batch, times, reseed, task.epoch, task.indices[0] if len(task.indices) else 0)
    return result


def _task_items(part, task: Task, streams, result: Result, samples: list):
    """``(index, sample)`` pairs of the task: indices with None (read later), or a stream shard's items until full."""
    if task.indices is not None:
        return ((int(i), None) for i in task.indices)
    wanted = part.batch_size or part.stream_chunk
    return _stream_items(part, task, streams, result, lambda: len(samples) < wanted)


def _stops_with_rows_done(part, task: Task, samples: list, result: Result) -> bool:
    """On `StopHere`: whether the task ends at the rows done (recorded in ``result.stopped``); False: re-raise."""
    if not samples or not splittable(part, task):
        return False
    result.stopped = len(samples)  # every sample is kept (`splittable`): the first rows, in order
    return True


class _Failure(enum.Enum):
    """What a task does after one of its samples failed (`_after_failure`)."""

    SKIP = "skip"  # on_error skips it: go on with the next sample
    END_TASK = "end task"  # the error is the task's whole result
    DELIVER_BEFORE = "deliver before"  # collate the whole batches before it, then the error


def _after_failure(part, exc: Exception, index, stage, result: Result, grouped: bool, done: int) -> _Failure:
    """Record a sample's failure in ``result`` (skipped, or the task's error) and say what the task does next.

    ``stage`` is None for a failed read, else the position of the failing
    step; ``grouped``: the task holds several batches, of which ``done``
    samples are kept before this one.
    """
    name = "read" if stage is None else part.ops[stage].name
    if part.skips(stage):
        result.skipped.append((index, f"{name}: {type(exc).__name__}: {exc}"))
        return _Failure.SKIP
    result.error = TaskError.from_exception(exc, index, part.source.where(index), name)
    return _Failure.DELIVER_BEFORE if grouped and done >= part.batch_size else _Failure.END_TASK


def _groups_batches(part, task: Task) -> bool:
    """Whether the task holds several whole batches (aligned plans), collated one by one into a `BatchGroup`."""
    return bool(part.batch_size) and task.indices is not None and len(task.indices) > part.batch_size


def _end_sampling(part, progress, result: Result, read_time: float, op_times: list) -> None:
    """After the last sample: tell ``progress`` (collating is not a sample's time) and record the step times."""
    if progress is not None and part.timeout is not None and result.stopped is None:
        progress(None)
    times = result.times
    times["read"] = read_time
    for op, spent in zip(part.ops, op_times):
        times[op.name] = times.get(op.name, 0.0) + spent


def _deliver(part, task: Task, samples: list, kept: list, alloc, result: Result, reseed, grouped: bool) -> Result:
    """The task's result from its kept samples: a group of batches, one batch, or the samples themselves (unbatched)."""
    if grouped:
        return _collate_group(part, samples, kept, alloc, result, reseed, task.epoch)
    result.rows = len(samples)
    if not part.aligned:
        result.indices = kept
    if not samples:
        return result
    if part.batch_size is None:
        result.payload = samples
        return result
    result.payload, result.error = _one_batch(part, samples, kept, alloc, result.times, reseed, task.epoch)
    return result


def _collate_group(part, samples: list, kept: list, alloc, result: Result, reseed, epoch: int) -> Result:
    """Collate a task of several whole batches one batch at a time, into a `BatchGroup`.

    A failure (a sample's, already in ``result.error``, or a batch's here)
    keeps the batches before it, so they are delivered before the error
    is raised, exactly as tasks of one batch each would deliver them.
    """
    size = part.batch_size
    if result.error is not None:
        del samples[len(samples) // size * size :]
    batches = []
    for start in range(0, len(samples), size):
        batch, error = _one_batch(part, samples[start : start + size], kept[start : start + size], alloc, result.times,
                                  reseed, epoch)
        if error is not None:
            result.error = error
            break
        batches.append(batch)
    result.rows = len(batches) * size if result.error is not None else len(samples)
    result.payload = BatchGroup(batches) if batches else None
    return result


def _one_batch(part, rows: list, indices: list, alloc, times: dict, reseed=None, epoch: int = 0):
    """Collate ``rows`` and run the worker's batch steps on them: ``(batch, None)``, or ``(None, TaskError)``."""
    t0 = time.perf_counter()
    try:
        if part.collate is not None:
            batch = part.collate(rows)
        else:
            direct = alloc if (alloc is not None and not part.batch_ops) else new_arrays
            batch = collate_into(rows, indices, direct)
    except Exception as exc:
        row = getattr(exc, "row", None)  # a collate that names the row it failed on (padded_batch)
        index = indices[row] if isinstance(row, int) and 0 <= row < len(indices) else getattr(exc, "index", indices[0])
        where = part.source.where(index) if not isinstance(index, tuple) else None
        return None, TaskError.from_exception(exc, index, where, "batch")
    times["batch"] = times.get("batch", 0.0) + time.perf_counter() - t0
    try:
        return _batch_steps(part, batch, times, reseed, epoch, indices[0]), None
    except Exception as exc:
        return None, TaskError.from_exception(exc, indices[0], None, "map_batch")


def _timed_out(limit: float) -> TimeoutError:
    return TimeoutError(f"still running after {limit:g} s, the limit set by map(timeout={limit:g}); "
                        "its worker process was stopped and a new one started")


def _batch_steps(part, batch, times, reseed=None, epoch: int = 0, first=0):
    if reseed is not None and part.batch_ops:
        seed_global_generators(reseed, epoch, 1, first)
    for op in part.batch_ops:
        t0 = time.perf_counter()
        batch = op.fn(batch)
        times[op.name] = times.get(op.name, 0.0) + time.perf_counter() - t0
    return batch


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

