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

import dataclasses
import secrets
from dataclasses import dataclass

import numpy as np

from .._packing import RaggedCollate
from .._padding import BudgetCollate, Finish
from ._settings import Ray

__all__ = ["OrderedSource", "Plan", "WorkerPart", "compile_plan", "new_seed"]

CHUNK_UNBATCHED = 64  # most samples per task of an unbatched pipeline: amortises messaging for cheap samples
TASKS_UNBATCHED = 256  # an unbatched epoch is cut into at least this many tasks: work for 128 workers x 2
SAMPLES_PER_PACK_TASK = 64  # samples per task of pack() / batch_by_budget(): amortises messaging; the batches do not depend on it


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
    generator_seed: int = 0  # seeds the global generators of process workers and Ray actors (`worker._generators`)
    skip_read: bool = False  # a failed read (or filter) is skipped: the first map's on_error is "skip"
    stream_chunk: int = CHUNK_UNBATCHED  # samples per task of an unbatched stream
    timeout: float | None = None  # seconds one sample's read and maps may take (map(timeout=...))
    timeout_stage: int | None = None  # the per-sample step whose on_error a timed-out sample follows

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
    padder: object = None  # padded_batch / bucket_by_length (`feedline._padding.Padder`): how re-cut pieces join
    window: object = None  # the Shuffle step with window=N: a stream's rows shuffled in the consumer (engine/_window.py)
    backend_for_timeout: bool = False  # "process" was chosen because map(timeout=) needs it (no backend= given)
    pack: object = None  # the Pack step: rows packed in the consumer (engine/_packer.py)
    rows_per_batch: int | None = None  # pack() then batch(n): n rows a batch (None: rows one at a time)
    budget: int | None = None  # batch_by_budget(max_tokens): items a batch may hold, padding counted (engine/_budget.py)
    deal: object = None  # shard(even=...) deals whole packed / budgeted batches, or sizes= plans them (engine/_deal.py)

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
    def groups_batches(self) -> bool:
        """Whether a task may hold several whole batches (`feedline._tree.BatchGroup`).

        Where a task is a message to another process, a batch that takes
        well under a millisecond costs as much again in messages and
        bookkeeping per batch (a 3x32x32 map: workers 86 % busy); the engine
        then sends several batches per task, from the second epoch, sized
        from the measured work (`feedline.engine._state.measured_chunk`).
        Each batch is still collated and stepped on its own, so no batch
        changes. Only where every task is whole batches of an indexed source
        (no filter, no skip, no buckets), and not under a prefetch depth the
        user set: the depth counts tasks, so grouping would multiply the
        batches it holds.
        """
        part = self.part
        bulk_with_steps = part.bulk_read and part.batch_ops  # one gather of several batches, then map_batch on all
        return bool(part.batch_size) and part.aligned and not self.streaming and self.depth is None and not bulk_with_steps

    @property
    def order_seed(self) -> int | None:
        """The seed of the source's own draws (``fl.mix``), or None."""
        return self.part.source.order_seed if isinstance(self.part.source, OrderedSource) else None

    @property
    def runs_user_code(self) -> bool:
        """Per-sample Python work exists (steps, or a source that calls user code to read).

        (A pipeline whose only Python is ``map_batch`` reads in bulk: the
        calling thread and a thread pool are tried on it, see
        `feedline.engine._bulk_trial`.)
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
        source = self.part.source
        if isinstance(source, OrderedSource):  # a composite (mix, concatenate, repeat) starts from its own order
            order = source.first_order(epoch)
            for step in self.index_steps:
                order = step.reorder(order, epoch)
            return order
        return self.epoch_order(len(source), epoch)

    def epoch_shards(self, epoch: int) -> list[int]:
        """The epoch's generator shards in delivery order (streaming sources)."""
        return [int(s) for s in self.epoch_order(self.part.source.num_shards, epoch)]

    def num_batches(self) -> int:
        """Batches per epoch; TypeError when it cannot be known in advance."""
        if self.streaming:
            raise TypeError("len() is unknown for a generator source: the number of samples is not known in advance")
        if self.padder is not None and self.padder.buckets is not None:
            raise TypeError("len() is unknown after bucket_by_length(): how many batches each bucket fills depends on the data")
        if self.budget is not None:
            raise TypeError("len() is unknown after batch_by_budget(): how many samples fit each batch depends on their lengths")
        if self.pack is not None:
            raise TypeError("len() is unknown after pack(): how many rows the samples fill depends on their lengths")
        if self.filtered:
            raise TypeError("len() is unknown after filter(): the number of samples kept is not known in advance")
        counted = [s for s in self.index_steps if type(s).__name__ != "Shuffle"]  # a shuffle keeps the length: not drawn
        n = len(dataclasses.replace(self, index_steps=counted).epoch_order(len(self.part.source), 0))
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
        self.positional = []  # take()/skip(): they count samples, which a generator's shards are not
        self.window = None  # shuffle(window=N)
        self.pack = None  # pack(max_length)
        self.shards = []  # the shard() steps among the index steps

    def add_positions(self, step, verb: str) -> None:
        """take()/skip(): an index step; after batch() it counts batches, when every batch is full."""
        self.positional.append(verb)
        if self.pack is not None:
            raise ValueError(f"{verb}() after pack() would count packed rows, whose number depends on the lengths; put "
                             f"{verb}() before pack() to count samples")
        if self.batch is None:
            self.index_steps.append(step)
            return
        if self.filtered or any(m.skips for m in self.maps):
            raise ValueError(f"{verb}() after batch() counts batches, but a filter() or map(on_error='skip') before it "
                             f"makes batches come out of re-cut samples; put {verb}() before batch() to count samples")
        if self.batch.budget is not None:
            raise ValueError(f"{verb}() after batch_by_budget() would count batches of different sizes; put {verb}() "
                             "before it to count samples")
        if self.batch.padder is not None and self.batch.padder.buckets is not None:
            raise ValueError(f"{verb}() after bucket_by_length() would count batches of different sizes; put {verb}() "
                             "before it to count samples")
        self.index_steps.append(step.per_sample(self.batch.size))

    def add_window(self, step) -> None:
        """shuffle(window=N): one stream shuffle per pipeline, before batch() (checked by add_index_step)."""
        if self.window is not None:
            raise ValueError(f"shuffle(window=...) appears twice ({self.window.describe()} and {step.describe()}); "
                             "one window shuffles the stream, give it the window you want")
        self.window = step

    def add_pack(self, step) -> None:
        """pack(): after the per-sample steps, before batch() (which then batches rows)."""
        if self.batch is not None:
            raise ValueError(f"{step.describe()} after batch(): pack the samples, then batch the rows; put pack() before batch()")
        if self.pack is not None:
            raise ValueError(f"pack() appears twice ({self.pack.describe()} and {step.describe()}); a pipeline packs once")
        self.pack = step

    def add_index_step(self, step, verb: str) -> None:
        if self.pack is not None:
            raise ValueError(f"{verb}() must come before pack(): it works on sample indices")
        if self.batch is not None:
            raise ValueError(f"{verb}() must come before batch(): it works on sample indices")
        self.index_steps.append(step)
        if verb == "shard":
            self.shards.append(step)

    def add_sample_step(self, step, verb: str) -> None:
        if self.pack is not None and self.batch is None:
            raise ValueError(f"{verb}() after pack() would see packed rows; put it before pack(), or use map_batch() after "
                             "pack().batch(n) for work on batches of rows")
        if self.batch is not None:
            raise ValueError(f"{verb}() after batch() would see whole batches; put it before batch(), or use map_batch() for work on batches")
        self.ops.append(step)

    def add_map(self, step) -> None:
        self.add_sample_step(step, "map")
        self.maps.append(step)

    def add_filter(self, step) -> None:
        self.add_sample_step(step, "filter")
        self.filtered = True


def compile_plan(source, steps, seed: int, generator_seed: int | None = None) -> Plan:
    """Check the order of ``steps`` and split them into a `Plan`.

    ``generator_seed``: what seeds the global random generators of process
    workers (None: ``seed``).

    Raises:
        ValueError: a step in a place where it cannot run (e.g. ``map``
            after ``batch``), or map steps asking for different backends.
    """
    builder = PlanBuilder()
    for step in steps:
        step.place(builder)
    _check_source_fits(source, builder)
    _check_window(source, builder.window, builder.batch, builder.pack)
    _check_pack(builder.pack, builder.batch)
    maps = builder.maps
    backend, workers, ray = _executor_settings(maps)
    timeout, timeout_stage = _timeout_settings(builder.ops, maps, source, backend, workers)
    backend_for_timeout = timeout is not None and backend is None
    if timeout is not None:
        backend = "process"  # only a process can be stopped in the middle of a sample
    source = _source_for_batches(source, builder.batch, builder.pack)
    cut = _cut(builder, source)
    index_steps, deal = _index_steps_and_deal(builder, source, cut)
    part = WorkerPart(
        source=source,
        ops=builder.ops,
        batch_size=cut.task_samples,
        collate=cut.collate,
        batch_ops=builder.batch_ops if cut.aligned else [],
        seed=seed,
        generator_seed=seed if generator_seed is None else generator_seed,
        aligned=cut.aligned,
        skip_read=bool(maps) and maps[0].skips,
        timeout=timeout,
        timeout_stage=timeout_stage,
    )
    return _plan(builder, part, cut, index_steps, deal, backend, workers, ray, backend_for_timeout)


def _plan(builder, part, cut, index_steps, deal, backend, workers, ray, backend_for_timeout) -> Plan:
    """The `Plan` of `compile_plan`: the worker part, and what the consumer does around it."""
    batch, pack = builder.batch, builder.pack
    return Plan(
        part=part,
        index_steps=index_steps,
        drop_remainder=bool(batch and batch.drop_remainder),
        consumer_batch_ops=[] if cut.aligned else cut.finish + builder.batch_ops,
        backend=backend,
        workers=workers,
        ordered=all(m.ordered for m in builder.maps),
        depth=builder.depth,
        ray=ray,
        filtered=builder.filtered,
        padder=cut.padder,
        window=builder.window,
        backend_for_timeout=backend_for_timeout,
        pack=pack,
        budget=cut.budget,
        rows_per_batch=batch.size if (pack is not None and batch is not None) else None,
        deal=deal,
    )


def _check_source_fits(source, builder) -> None:
    """Steps that count sample positions need a random-access source; index steps cannot follow an endless repeat()."""
    if source.streaming and builder.positional:
        verb = builder.positional[0]
        raise ValueError(f"{verb}() needs a random-access source; a generator source streams its shards, so it has no "
                         f"sample positions to count. Give from_generator(samples_per_epoch=...) for a fixed epoch length, "
                         f"or stop your loop after n batches")
    if isinstance(source, OrderedSource) and source.endless and builder.index_steps:
        step = builder.index_steps[0].describe()
        raise ValueError(f"{step} after repeat() without a count would need the whole endless stream; put it before "
                         "repeat() (every pass gets its own order), or give repeat(count)")


def _source_for_batches(source, batch, pack):
    """The source the workers read: an endless repeat's batches run across passes, all full.

    Raises:
        ValueError: pack() or batch_by_budget() after an endless repeat().
    """
    if not (isinstance(source, OrderedSource) and source.endless):
        return source
    if pack is not None or (batch and batch.budget):
        step = pack.describe() if pack is not None else batch.describe()
        raise ValueError(f"{step} after repeat() without a count is not supported yet; give repeat(count), or iterate "
                         "the pipeline once per epoch")
    return source.for_batches(batch.size) if batch is not None else source


@dataclass(frozen=True)
class _Cut:
    """How tasks become batches: what a task holds, who collates it, and whether its output is one batch."""

    aligned: bool  # a task's output is exactly one batch, so the workers run the batch steps
    padder: object  # padded_batch / bucket_by_length / batch_by_budget's padding, or None
    budget: object  # batch_by_budget's max_tokens, or None
    collate: object
    finish: list  # what the consumer runs first on re-cut pieces (fitting them to a common length)
    task_samples: int | None


def _cut(builder, source) -> _Cut:
    """How the epoch's tasks are cut and collated (see `_Cut`)."""
    batch, pack = builder.batch, builder.pack
    padder = batch.padder if batch else None
    budget = batch.budget if batch else None
    aligned = _tasks_are_batches(builder, source, padder, budget)
    collate = padder.collate(aligned) if padder is not None else (batch.collate if batch else None)
    if budget is not None:
        collate = BudgetCollate(padder, batch.length_fn)
    finish = [Finish(padder)] if padder is not None and not aligned else []  # the consumer fits re-cut pieces
    task_samples = SAMPLES_PER_PACK_TASK if budget is not None else (batch.size if batch else None)
    if pack is not None:  # workers send ragged pieces of samples; the consumer packs them into rows
        return _Cut(False, padder, budget, RaggedCollate(pack.max_length, pack.too_long == "split"), finish, SAMPLES_PER_PACK_TASK)
    return _Cut(aligned, padder, budget, collate, finish, task_samples)


def _tasks_are_batches(builder, source, padder, budget) -> bool:
    """Whether a task's output is exactly one batch (before pack(), which never aligns)."""
    # A generator's batches are re-cut across shards (a shard's last task is short), so batched streams never align.
    if (source.streaming and builder.batch is not None) or builder.filtered or any(m.skips for m in builder.maps):
        return False
    if padder is not None and padder.buckets is not None:
        return False  # buckets gather rows from many tasks
    return budget is None  # a budget batch's rows come from as many tasks as fit the budget


def _index_steps_and_deal(builder, source, cut: _Cut) -> tuple[list, object]:
    """``(index steps, deal)``: planned from a table of lengths (``sizes=``) or dealt as whole batches."""
    batch, pack = builder.batch, builder.pack
    sizes = pack.sizes if pack is not None else (batch.sizes if cut.budget is not None else None)
    if sizes is not None:
        return plan_batches(builder, source, sizes, pack, batch, cut.padder, any(m.skips for m in builder.maps))
    return deal_batches(builder.index_steps, builder.shards, pack, cut.budget, source.streaming)


def deal_batches(index_steps: list, shards: list, pack, budget, streaming: bool) -> tuple[list, tuple | None]:
    """``(index steps, deal)``: shard(even=...) before pack() / batch_by_budget() deals whole batches (engine/_deal.py).

    How many batches a rank's share of samples makes depends on their
    lengths, so with ``even`` every rank cuts the whole epoch's batches and
    keeps every ``count``-th; the shard leaves the index steps.
    """
    shards = [s for s in shards if s.even is not None]
    if (pack is None and budget is None) or streaming or not shards:
        return index_steps, None
    step = shards[-1]
    if len(shards) > 1:
        raise ValueError(f"{shards[0].describe()} and {step.describe()} before pack() / batch_by_budget(): shard once")
    if step.even == "pad":
        raise ValueError(f"{step.describe()} before pack() / batch_by_budget(): whole batches are dealt to ranks, and "
                         "how many batches the epoch makes is known in advance only from a table of lengths; give "
                         "sizes= (each sample's length) to pad with the epoch's first batches, or use even='drop' (the "
                         "epoch's last < count batches are left out, counted in stats().dropped_batches)")
    from ..engine._deal import Dealt  # start-up cost: describing a pipeline imports nothing of the engine

    return [s for s in index_steps if s is not step], Dealt(step.index, step.count)


def plan_batches(builder, source, sizes, pack, batch, padder, skips: bool) -> tuple[list, object]:
    """``(index steps, deal)`` of pack() / batch_by_budget() with ``sizes=``: batches planned from the table (engine/_deal.py).

    The last index step becomes the plan: this rank's order is the samples
    of its batches, so with shard(even=...) each rank maps only its own.
    """
    step = pack if pack is not None else batch
    name = step.describe().split("(")[0]
    _check_sizes(name, source, sizes, builder.filtered or skips)
    shards = [s for s in builder.shards if s.even is not None]
    if len(shards) > 1:
        raise ValueError(f"{shards[0].describe()} and {shards[1].describe()} before {name}(): shard once")
    shard = shards[0] if shards else None
    steps = [s for s in builder.index_steps if s is not shard]
    from ..engine._deal import LengthPlan  # start-up cost, as in deal_batches

    budget = (batch.budget, padder.join, padder.cut) if pack is None else None
    rows_per_batch = batch.size if (pack is not None and batch is not None) else None
    plan = LengthPlan(sizes.array, shard.index if shard else 0, shard.count if shard else 1, shard.even if shard else None,
                      pack, budget, rows_per_batch, bool(batch and batch.drop_remainder), source.where)
    return steps + [plan], plan


def _check_sizes(name: str, source, sizes, drops: bool) -> None:
    """``sizes=`` of pack() / batch_by_budget(): a table by source index, of a source that can be read by it."""
    if source.streaming:
        raise ValueError(f"{name}(sizes=...) needs a random-access source: a generator source has no sample index to "
                         "look a length up by; leave sizes= out")
    if isinstance(source, OrderedSource):
        raise ValueError(f"{name}(sizes=...) after fl.mix(), fl.concatenate() or repeat() is not supported yet: they "
                         "number their samples across their inputs, so no table by source index fits; leave sizes= out")
    if drops:
        raise ValueError(f"{name}(sizes=...) plans the batches before map() runs, so a sample that filter() or "
                         "on_error='skip' drops would leave a hole in a planned batch; filter by the table first (a "
                         "source of the samples you keep, and their sizes), or leave sizes= out")
    if len(sizes) != len(source):
        raise ValueError(f"{name}(sizes=...) has {len(sizes)} lengths, but the source has {len(source)} samples; give "
                         "one length per source sample, by source index")


def _check_pack(pack, batch) -> None:
    """pack().batch(n): rows are stacked; padding and bucketing rows of one length would do nothing."""
    if pack is None or batch is None:
        return
    if batch.padder is not None or batch.collate is not None:
        raise ValueError(f"{pack.describe()} then {batch.describe()}: packed rows all have max_length items, so batch them "
                         "with batch(n) (no collate=, no padding)")


def _check_window(source, window, batch, pack=None) -> None:
    """shuffle(window=N) shuffles a stream's rows: refused where it cannot, or need not, work."""
    if window is None:
        return
    if pack is not None:
        raise ValueError(f"{window.describe()} with pack() is not supported yet; shuffle the shards (shuffle(seed)) and "
                         "pack without a window")
    if not source.streaming:
        raise ValueError(f"{window.describe()}: window= is for generator sources, which stream; this source is read by "
                         f"index, so shuffle(seed={window.seed}) already permutes the whole epoch (any sample can land "
                         "anywhere, no buffer needed). Drop window=")
    if batch is not None and batch.padder is not None:
        raise ValueError(f"{window.describe()} with padded_batch() or bucket_by_length() is not supported yet; "
                         "use batch(), or pad in map() to a fixed length")


def _executor_settings(maps):
    """``(backend, workers, ray)`` of the fused per-sample stage: what the map() steps give, which must agree."""
    backend = _one_backend(maps)
    workers = _one_worker_count(maps)
    given = [m.ray for m in maps if m.ray is not None and m.ray != Ray()]
    if any(r != given[0] for r in given[1:]):
        raise ValueError("map() steps give different Ray settings; the fused stage runs on one set of actors, so give them on one map() only")
    ray = (given[0] if given else Ray()) if backend == "ray" else None
    return backend, workers, ray


def _one_backend(maps):
    backends = {m.backend for m in maps if m.backend is not None}
    if len(backends) > 1:
        raise ValueError(
            f"map() steps ask for different backends ({', '.join(sorted(backends))}); feedline fuses "
            "all per-sample steps into one stage, so give backend= on one map() only"
        )
    return backends.pop() if backends else None


def _one_worker_count(maps):
    counts = {m.workers for m in maps if m.workers is not None}
    if len(counts) > 1:
        raise ValueError(f"map() steps ask for different worker counts ({sorted(counts)}); give workers= on one map() only")
    return counts.pop() if counts else None


def _timeout_settings(ops, maps, source, backend, workers):
    """The per-sample time limit and the step whose ``on_error`` it follows: (None, None) without one.

    The smallest ``map(timeout=...)`` applies to the whole of a sample's
    per-sample work. Only a process worker can be stopped while it is stuck
    (a thread cannot be killed, and abandoning it would leave it holding its
    file and memory), so the limit needs the process backend.
    """
    timed = [m for m in maps if m.timeout is not None]
    limits = [(op.timeout, stage) for stage, op in enumerate(ops) if any(op is m for m in timed)]
    if not limits:
        return None, None
    timeout, stage = min(limits)
    if backend in ("serial", "thread"):
        where = "the calling thread" if backend == "serial" else "a thread worker"
        raise ValueError(f"map(timeout={timeout!r}) with backend={backend!r}: a sample stuck in {where} cannot be "
                         "stopped (Python cannot kill a thread); use backend='process' or leave backend unset")
    if backend == "ray":
        raise ValueError(f"map(timeout={timeout!r}) is not supported yet with backend='ray'; use backend='process', "
                         "or Ray's own task timeouts inside your function")
    if workers == 0:
        raise ValueError(f"map(timeout={timeout!r}) with workers=0: the limit stops a stuck worker process, so it needs "
                         "at least one; give workers=None or a count")
    if source.streaming or source.needs_ray:
        kind = "a generator source" if source.streaming else "a Ray Dataset source"
        raise ValueError(f"map(timeout={timeout!r}) is not supported with {kind}: a stuck sample is left out by its "
                         "index, which needs a random-access source read by process workers")
    return float(timeout), stage


class OrderedSource:
    """A source whose epoch starts from an order of its own, not ``arange(len(source))``.

    Composites (``fl.mix``, ``fl.concatenate``, ``repeat``) implement it: the
    order is computed by the consumer from ``(seed, epoch)`` before the epoch
    starts, so the plan's index steps, the tasks and resumption work unchanged.
    """

    seed = 0  # seeds the rng of map() functions placed after the composite (no shuffle() after it)
    seeded = False  # the seed is the user's or drawn for them (mix), not the 0 of a composite without one
    order_seed = None  # the seed of the epoch's draws (mix), written in checkpoints so resume can name it
    endless = False  # repeat() without a count: the iterator runs epoch after epoch as one stream

    def first_order(self, epoch: int) -> np.ndarray:
        """The epoch's sample indices, before the index steps placed after the composite."""
        raise NotImplementedError

    def order_fingerprint(self) -> str:
        """What a saved ``it.state()`` must match: the children and how they are combined."""
        raise NotImplementedError

    def for_batches(self, size: int) -> "OrderedSource":
        """The source to read when batches hold ``size`` samples (an endless repeat groups passes to fill them)."""
        return self


def new_seed() -> int:
    """A fresh random seed, for ``shuffle(seed=None)``."""
    return secrets.randbits(63)
