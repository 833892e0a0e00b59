"""The task grid: how many samples each task of an indexed epoch holds, this epoch and the next.

An epoch's index list is cut into tasks of ``step`` samples (`task_grid`).
The first epoch uses the pipeline's own grid (a batch a task, when it
batches); where a task is a message to another process, or rows are read
in bulk, the next epoch's grid is measured from the last one's work per
sample (`measured_chunk`, `next_epoch_chunk`). A checkpoint names the grid
it was cut on (``"chunk"``), so a resumed epoch runs on that grid
(`start_chunk`).
"""

from __future__ import annotations

import functools

__all__ = ["MAX_CHUNK", "MAX_TASK_BYTES", "OLD_CHUNK", "TARGET_TASK_SECONDS", "TASKS_PER_WORKER", "cache_share",
           "measured_chunk", "next_epoch_chunk", "start_chunk", "task_grid"]

OLD_CHUNK = 64  # samples per task of an unbatched epoch in states that do not name their grid

TARGET_TASK_SECONDS = 0.01  # an unbatched task's work, once measured: a hundred times a task's messaging
MAX_CHUNK = 4096  # samples per task at most (unbatched, or several batches): bounds what one task holds in memory ...
MAX_TASK_BYTES = 4 << 20  # ... and the bytes of the batches one task holds (its slot is reused once all are dropped)
TASKS_PER_WORKER = 8  # an unbatched epoch keeps at least this many tasks per worker: balance, and work queued behind each


def measured_chunk(task_seconds: float, rows: int, count: int, workers: int, batch: int | None = None,
                   batch_bytes: int = 0, max_bytes: int = MAX_TASK_BYTES, previous: int | None = None) -> int | None:
    """Samples per task for the next epoch, from the last one's work per sample (None: nothing measured).

    Used where a task is a message to another process (process and Ray
    workers): cheap samples get many per task, so that messaging does not
    dominate; expensive ones get one per task. With ``batch`` (a pipeline
    whose tasks may hold several whole batches, `Plan.groups_batches`), a
    whole number of batches, each of ``batch_bytes``, at most ``max_bytes``
    together (`MAX_TASK_BYTES`; for bulk reads on threads or the calling
    thread, `cache_share`). Otherwise threads and the calling thread keep
    the first epoch's grid (longer tasks measured no faster there). The
    grid is recorded in every checkpoint (``chunk``), so a resumed epoch
    runs on the grid it was cut with.

    Against the ``previous`` epoch's chunk it at most halves: the work per
    sample is a sum over the epoch's tasks, which one stalled task can
    inflate many times over on a loaded machine, and the next epoch's tasks
    would shrink to a few batches. Work that really got dearer gets there
    in a few epochs.
    The bounds (tasks per worker, bytes) hold whatever ``previous`` was.

    >>> measured_chunk(0.5, 50_000, 50_000, 2, batch=256, batch_bytes=786_432)  # 2.6 ms a batch: 3 a task
    768
    >>> measured_chunk(2.0, 1_000, 1_000, 2, batch=32)  # 64 ms a batch: one
    32
    >>> measured_chunk(2.0, 1_000, 50_000, 2, batch=32, previous=320)  # ... but half the last epoch's 10 at least
    160
    """
    if rows <= 0 or task_seconds <= 0:
        return None
    per_sample = task_seconds / rows
    chunk = min(max(int(TARGET_TASK_SECONDS / per_sample), (previous or 0) // 2), MAX_CHUNK)
    tasks = TASKS_PER_WORKER * max(1, workers)
    if batch is None:
        return max(1, min(chunk, count // tasks))
    batches = min(chunk // batch, count // batch // tasks)
    if batch_bytes > 0:
        batches = min(batches, max_bytes // batch_bytes)
    return batch * max(1, batches)


def cache_share(workers: int) -> int:
    """Bytes of a task of several batches read in bulk on threads: 3/4 of the last-level cache over the workers.

    The batches all workers write at once stay in the cache. 0 where the
    cache size is not known (Linux's /sys only): no grouping then.
    """
    return int(0.75 * _last_level_cache()) // max(1, workers)


@functools.lru_cache(maxsize=1)
def _last_level_cache() -> int:
    """Bytes of the largest CPU cache of cpu0 (Linux /sys), or 0; read once."""
    import glob

    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=0)


def task_grid(plan, count: int, chunk: int | None) -> tuple[int, int, int]:
    """``(samples per task, number of tasks, samples the tasks cover)`` of an indexed epoch of ``count`` samples.

    ``chunk``: the samples per task a resumed state names, or the one
    measured on the last epoch (`measured_chunk`); None for the
    pipeline's own grid (a batch per task, when it batches). Under
    ``drop_remainder`` the tasks of an aligned plan stop at the last whole
    batch.
    """
    batch = plan.part.batch_size
    step = chunk if chunk is not None else plan.task_size(count)
    covered = count // batch * batch if (batch and plan.drop_remainder and plan.part.aligned) else count
    return step, -(-covered // step), covered


def start_chunk(plan, state: dict | None, learned: int | None) -> int | None:
    """Samples per task for a new indexed epoch (None: the pipeline's own grid).

    A resumed ``state`` names its grid (older states do not: `OLD_CHUNK`
    samples a task unbatched, a batch a task batched). A fresh epoch takes
    the grid ``learned`` on the last one (None on the first), where tasks
    may hold several samples or batches.
    """
    unbatched = plan.part.batch_size is None
    if state is not None:
        return state.get("chunk", OLD_CHUNK) if unbatched else state.get("chunk")
    if unbatched or plan.groups_batches:
        return learned
    return None


def next_epoch_chunk(plan, runtime, stats, count: int, batch_bytes: int | None) -> int | None:
    """The samples per task the next epoch of ``runtime`` runs on, learned from this one's ``stats``.

    Learned only where the grid pays: a task is a message (process and Ray
    workers) or a gather of several batches read in bulk (threads, the
    calling thread), and only once an automatic backend choice has settled
    (its trial measures on its own grid). Otherwise the last learned grid
    stays. ``count``: the samples of this epoch's order; ``batch_bytes``:
    the bytes of one whole batch (None: not seen).
    """
    backend, workers = runtime.backend, runtime.workers
    messages = backend in ("process", "ray")  # where a task is a message: its size from the work measured per sample
    bulk = plan.part.bulk_read and plan.groups_batches and backend in ("thread", "serial")  # one gather for several batches
    settled = runtime.executor.settled  # an automatic choice's trial measures on its grid: learn after it
    unbatched = plan.part.batch_size is None
    if not ((unbatched or plan.groups_batches) and not plan.streaming and (messages or bulk) and settled):
        return runtime.learned_chunk
    max_bytes = MAX_TASK_BYTES if messages else cache_share(workers)
    room = runtime.tuner.task_room() if messages else None  # a small /dev/shm holds the whole window
    learned = measured_chunk(stats.task_seconds, stats.samples, count, workers,
                             batch=plan.part.batch_size, batch_bytes=batch_bytes or 0,
                             max_bytes=max_bytes if room is None else min(max_bytes, room),
                             previous=runtime.learned_chunk)
    return learned or runtime.learned_chunk
