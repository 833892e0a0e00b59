"""Compile a pipeline description into a `Plan`: what the consumer and the workers each do.

The steps are split into:
- index steps (shuffle, shard), run by the consumer to make each epoch's
  list of indices: cheap, and the reason every guarantee holds;
- the `WorkerPart`: source, per-sample steps, collation and (when batches
  line up with tasks) batch steps, which `feedline.worker.run_task` runs
  for one task at a time, identically on every backend.
A task is a batch's worth of consecutive positions of the epoch's order.
When no step can drop a sample, a task's output is exactly one batch
("aligned"); otherwise the consumer re-cuts rows into full batches and runs
the batch steps itself.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import numpy as np

from ._settings import Ray

__all__ = ["Plan", "WorkerPart", "compile_plan", "new_seed"]

CHUNK_UNBATCHED = 64  # most samples per task of an unbatched pipeline: amortises messaging for cheap samples
TASKS_UNBATCHED = 256  # an unbatched epoch is cut into at least this many tasks: work for 128 workers x 2


@dataclass
class WorkerPart:
    """Everything a worker needs; pickled once per runtime."""

    source: object
    ops: list  # per-sample steps (Map, Filter), in order
    batch_size: int | None
    collate: object
    batch_ops: list  # MapBatch steps run in the worker (aligned plans only)
    seed: int
    aligned: bool
    skip_read: bool = False  # a failed read (or filter) is skipped: the first map's on_error is "skip"
    stream_chunk: int = CHUNK_UNBATCHED  # samples per task of an unbatched stream

    @property
    def bulk_read(self) -> bool:
        """Batches are read with one ``source.gather`` call (no per-sample step to run)."""
        return (self.aligned and not self.ops and self.source.gather is not None
                and self.collate is None and bool(self.batch_size))

    def skips(self, stage: int | None) -> bool:
        """Whether a failure in per-sample step ``stage`` (None: the read) drops the sample.

        Reads and filters follow the first map's policy (decoding usually
        lives in the first map, and a file that cannot be read is the same
        kind of failure as one that cannot be decoded).
        """
        own = self.ops[stage].skips if stage is not None else None
        return self.skip_read if own is None else own


@dataclass
class Plan:
    """A compiled pipeline: the worker's part, the consumer's index steps and the settings."""

    part: WorkerPart
    index_steps: list
    drop_remainder: bool
    consumer_batch_ops: list
    backend: str | None
    workers: int | None
    ordered: bool
    depth: int | None
    ray: Ray | None = None
    filtered: bool = False  # a filter() makes the number of samples per epoch unknown in advance

    @property
    def streaming(self) -> bool:
        return self.part.source.streaming

    def task_size(self, count: int) -> int:
        """Samples per task for an epoch of ``count`` samples.

        A batch when the pipeline batches. Unbatched, a chunk of at most
        `CHUNK_UNBATCHED` that still cuts the epoch into `TASKS_UNBATCHED`
        tasks when it can: 40 expensive samples (a Keras Sequence whose items
        are whole batches) become 40 tasks spread over every worker, not one
        task on one worker. It depends only on the epoch's length, so a
        checkpoint resumes on the same task grid whatever the worker count.
        """
        if self.part.batch_size:
            return self.part.batch_size
        return max(1, min(CHUNK_UNBATCHED, count // TASKS_UNBATCHED))

    @property
    def runs_user_code(self) -> bool:
        """Per-sample Python work exists (steps, or a source that calls user code to read).

        (A pipeline whose only Python is ``map_batch`` still runs serially: its
        batches are bulk reads; running map_batch in workers is issue 15's to do.)
        """
        return bool(self.part.ops) or self.part.source.user_code

    def epoch_order(self, count: int, epoch: int) -> np.ndarray:
        """``arange(count)`` reordered by each index step (shuffle, shard), in step order."""
        order = np.arange(count, dtype=np.int64)
        for step in self.index_steps:
            order = step.reorder(order, epoch)
        return order

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The epoch's sample indices in delivery order (indexed sources)."""
        return self.epoch_order(len(self.part.source), epoch)

    def epoch_shards(self, epoch: int) -> list[int]:
        """The epoch's generator shards in delivery order (streaming sources)."""
        return [int(s) for s in self.epoch_order(self.part.source.num_shards, epoch)]

    def num_batches(self) -> int:
        """Batches per epoch; TypeError when it cannot be known in advance."""
        if self.streaming:
            raise TypeError("len() is unknown for a generator source: the number of samples is not known in advance")
        if self.filtered:
            raise TypeError("len() is unknown after filter(): the number of samples kept is not known in advance")
        n = len(self.epoch_indices(0))
        size = self.part.batch_size
        if size is None:
            return n
        return n // size if self.drop_remainder else -(-n // size)


class PlanBuilder:
    """Collects steps in order; each step's `place` checks that it may come here."""

    def __init__(self):
        self.index_steps, self.ops, self.maps, self.batch_ops = [], [], [], []
        self.batch = None
        self.depth = None
        self.filtered = False

    def add_index_step(self, step, verb: str) -> None:
        if self.batch is not None:
            raise ValueError(f"{verb}() must come before batch(): it works on sample indices")
        self.index_steps.append(step)

    def add_sample_step(self, step, verb: str) -> None:
        if self.batch is not None:
            raise ValueError(f"{verb}() after batch() would see whole batches; put it before batch(), or use map_batch() for work on batches")
        self.ops.append(step)

    def add_map(self, step) -> None:
        self.add_sample_step(step, "map")
        self.maps.append(step)

    def add_filter(self, step) -> None:
        self.add_sample_step(step, "filter")
        self.filtered = True


def compile_plan(source, steps, seed: int) -> Plan:
    """Check the order of ``steps`` and split them into a `Plan`.

    Raises:
        ValueError: a step in a place where it cannot run (e.g. ``map``
            after ``batch``), or map steps asking for different backends.
    """
    builder = PlanBuilder()
    for step in steps:
        step.place(builder)
    maps = builder.maps
    backend, workers, ray = _executor_settings(maps)
    aligned = source.streaming or not (builder.filtered or any(m.skips for m in maps))
    # (a stream task always fills its batch from one shard, so streams are aligned too)
    batch = builder.batch
    part = WorkerPart(
        source=source,
        ops=builder.ops,
        batch_size=batch.size if batch else None,
        collate=batch.collate if batch else None,
        batch_ops=builder.batch_ops if aligned else [],
        seed=seed,
        aligned=aligned,
        skip_read=bool(maps) and maps[0].skips,
    )
    return Plan(
        part=part,
        index_steps=builder.index_steps,
        drop_remainder=bool(batch and batch.drop_remainder),
        consumer_batch_ops=[] if aligned else builder.batch_ops,
        backend=backend,
        workers=workers,
        ordered=all(m.ordered for m in maps),
        depth=builder.depth,
        ray=ray,
        filtered=builder.filtered,
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
    given = [m.ray for m in maps if m.ray is not None and m.ray != Ray()]
    if any(r != given[0] for r in given[1:]):
        raise ValueError("map() steps give different Ray settings; the fused stage runs on one set of actors, so give them on one map() only")
    backend = backends.pop() if backends else None
    ray = (given[0] if given else Ray()) if backend == "ray" else None
    return backend, (counts.pop() if counts else None), ray


def new_seed() -> int:
    """A fresh random seed, for ``shuffle(seed=None)``."""
    return secrets.randbits(63)
