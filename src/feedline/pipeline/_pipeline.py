"""The public `Pipeline`: an immutable description of an input pipeline.

Each method returns a new pipeline with one more step; nothing runs until
the pipeline is iterated. Iterating builds a `feedline.engine.Runtime`
(workers, shared memory) that persists across epochs until `close`; only
the description is pickled (see `__getstate__`).
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING

from .. import _startup
from .._packing import as_sizes
from .._padding import Padder
from .._switch_interval import short_switch_interval
from . import _arguments, _identity, _repeating, _running, _seeds, _stateful
from ._cache import CacheSource
from ._describe import describe
from ._plan import SAMPLES_PER_PACK_TASK, OrderedSource, compile_plan, new_seed
from ._settings import Ray
from ._steps import Batch, BudgetBatch, Filter, Map, MapBatch, Pack, PaddedBatch, Prefetch, Shard, Shuffle, Skip, Take

if TYPE_CHECKING:
    from ..engine import EpochIterator

__all__ = ["Pipeline"]


class Pipeline:
    """An input pipeline: a source and the steps applied to it.

    Build one with a source function (`feedline.from_arrays`, ...), chain
    steps, then iterate: each ``iter(pipe)`` is the next epoch.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(10)).shuffle(seed=0).batch(4)
    >>> sorted(int(v) for b in pipe for v in b)
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, source, steps: tuple = ()):
        self._source = source
        self._steps = tuple(steps)
        seed, generator_seed = _seeds.first_seed(source, self._steps), _seeds.generator_seed(source, self._steps)
        self._plan = compile_plan(source, self._steps, seed, generator_seed)  # validates step order now
        self._runtime = None
        self._next_epoch = 0
        self._finalizer = None
        self._live = None  # weak reference to the latest epoch's iterator, for state_dict()
        self._pending = None  # the position load_state_dict() gave the next iter()

    # ------------------------------------------------------------ building
    def _with(self, step) -> "Pipeline":
        return Pipeline(self._source, self._steps + (step,))

    @property
    def source(self):
        """The pipeline's source (read-only)."""
        return self._source

    @property
    def steps(self) -> tuple:
        """The pipeline's steps, in order (immutable records; read-only)."""
        return self._steps

    @property
    def plan(self):
        """The compiled plan (`feedline.pipeline._plan.Plan`): what the consumer and the workers each do."""
        return self._plan

    def __getstate__(self) -> dict:
        # What travels is the description: a running pipeline pickles like a new one.
        return {"source": self._source, "steps": self._steps, "next_epoch": self._next_epoch}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["source"], state["steps"])
        self._next_epoch = state["next_epoch"]

    def shuffle(self, seed: int | None = None, *, window: int | None = None) -> "Pipeline":
        """Visit samples in a new order each epoch, a permutation from ``(seed, epoch)``.

        Only indices are permuted (never a buffer of decoded samples), so the
        shuffle is perfect and costs nothing. ``seed=None`` draws a seed now;
        it is shown by ``print(pipe)`` and kept in checkpoints. The seed also
        seeds the ``rng`` given to ``map`` functions. For a generator source,
        the order of shards is shuffled.

        ``window=N`` (generator sources only; tf.data's ``shuffle(buffer_size)``,
        Grain's window shuffle) also mixes samples within and across shards:
        the consumer keeps a buffer of N samples and hands out one drawn from
        ``(seed, epoch)`` as each new one arrives. The order is the same on
        every backend and worker count, and ``it.state()`` resumes it exactly.
        It sits where samples reach the consumer, after ``map``/``filter``;
        memory is N samples. Indexed sources refuse it: ``shuffle(seed)``
        already permutes their whole epoch.

        Raises:
            ValueError: ``seed`` or ``window`` is not a valid integer; ``window``
                on an indexed source (naming the fix).

        >>> import feedline as fl
        >>> def count(shard, num_shards):
        ...     yield from range(shard, 12, num_shards)
        >>> pipe = fl.from_generator(count, 2).shuffle(seed=0, window=4).map(abs, backend="serial").batch(6)
        >>> batches = [b.tolist() for b in pipe]
        >>> sorted(batches[0] + batches[1]) == list(range(12)) and batches[0] != [0, 2, 4, 6, 8, 10]
        True
        """
        return self._with(Shuffle(new_seed() if seed is None else seed, window))

    def map(
        self, fn, *, workers: int | None = None, backend: str | Ray | None = None, on_error="raise", ordered: bool = True,
        timeout: float | None = None, ray_address: str | None = None, ray_options: dict | None = None,
    ) -> "Pipeline":
        """Apply ``fn(sample)`` or ``fn(sample, rng)`` to every sample, in parallel.

        Args:
            fn: any function, lambda or closure; with a second parameter (or
                one named ``rng``) it receives a `numpy.random.Generator`
                seeded from ``(seed, epoch, index)``, so augmentation is the
                same for any backend and worker count.
            workers: number of workers (default: one per available core).
            backend: ``"serial"``, ``"thread"``, ``"process"``, ``"ray"``,
                ``fl.Ray(...)`` (Ray with settings: cluster address, resources
                of each actor; see docs/scaling.md) or None to let feedline
                choose (see docs/automatic_choice.md).
            on_error: ``"raise"`` (default), ``"skip"`` (drop the sample,
                count it in ``stats()`` and warn once per epoch), or a function
                ``(index, error) -> replacement sample``.
            ordered: False lets batches arrive in completion order (faster
                when sample costs vary; not resumable mid-epoch).
            timeout: seconds one sample's read and per-sample steps may take
                (None: no limit). A sample still running after that is
                stopped by killing its worker process, a new worker takes
                over, and the sample follows ``on_error`` as a `TimeoutError`
                (``"raise"``: a `SampleError` naming the sample, its file and
                the limit, at its batch). Runs the map in processes (a
                thread cannot be stopped): ``backend="thread"``/``"serial"``
                are refused, ``"ray"`` is not supported yet. The smallest
                limit of several maps applies.
            ray_address, ray_options: deprecated spelling of
                ``backend=fl.Ray(address=..., **options)``.
        """
        ray = _arguments.ray_settings(backend, ray_address, ray_options)
        step = Map(fn, workers=workers, backend=backend, on_error=on_error, ordered=ordered, ray=ray, timeout=timeout)
        with short_switch_interval():  # a start imports the backend the first time: reads that wait for the GIL beside busy threads
            _startup.described(step.backend, workers, (self._source, *self._steps, step))
        return self._with(step)

    def filter(self, pred) -> "Pipeline":
        """Keep the samples for which ``pred(sample)`` is true."""
        return self._with(Filter(pred))

    def batch(self, size: int, drop_remainder: bool = False, collate=None) -> "Pipeline":
        """Group samples into batches of ``size``.

        The default collation stacks arrays (and numbers) along a new first
        axis, through tuples, lists and dicts; other values become lists.
        A ``None`` (a null of a Parquet or Arrow column) stays in a list of
        other values, and raises `SampleError` naming the sample and the
        field among numbers or arrays, whichever row holds it.
        ``collate(list_of_samples)`` replaces it.
        """
        return self._with(Batch(size, drop_remainder, collate))

    def padded_batch(
        self, size: int, pad_value=0, *, pad_to=None, pad_multiple: int | None = None, axis: int = 0,
        lengths: bool = False, mask: bool = False, drop_remainder: bool = False,
    ) -> "Pipeline":
        """Batch samples of different lengths (audio clips, token lists), padding them to a common length.

        tf.data's ``padded_batch``, or a DataLoader ``collate_fn`` calling
        ``pad_sequence``. Every array or list field of the sample (a dict's
        values, a tuple's items, or the sample itself) is padded along
        ``axis`` with ``pad_value``: to the longest sample of the batch, to
        ``pad_to``, then up to a multiple of ``pad_multiple``; other fields
        are batched as ``batch()`` does. See docs/variable_length.md.

        Args:
            size: samples per batch.
            pad_value: a number for every field, or ``{field: value}``: only
                those fields are padded (dict keys, or a tuple's positions).
            pad_to: a fixed length (int, or ``{field: int}``); a longer
                sample is an error naming it. None: the batch's longest.
            pad_multiple: round the padded length up to a multiple of this.
            axis: the axis of each sample that varies (0: the first).
            lengths, mask: add each padded field's lengths (int64) and/or
                mask (bool, True on real items): ``"<field>_lengths"`` and
                ``"<field>_mask"`` keys for a dict sample, appended to a
                tuple sample, ``(padded, lengths, mask)`` for a bare one.
            drop_remainder: drop the epoch's last batch if it is short.

        >>> import feedline as fl
        >>> pipe = fl.from_sequence([[1, 2, 3], [4], [5, 6]]).padded_batch(3, lengths=True)
        >>> [(x.tolist(), n.tolist()) for x, n in pipe]
        [([[1, 2, 3], [4, 0, 0], [5, 6, 0]], [3, 1, 2])]
        """
        padder = Padder(pad_value, pad_to, pad_multiple, axis, lengths, mask)
        return self._with(PaddedBatch(size, drop_remainder, None, padder))

    def bucket_by_length(
        self, length_fn, boundaries, batch_sizes, *, pad_value=0, pad_to_boundary: bool = False,
        pad_multiple: int | None = None, axis: int = 0, lengths: bool = False, mask: bool = False,
        drop_remainder: bool = False,
    ) -> "Pipeline":
        """Batch samples of similar length together, each bucket with its own batch size, padded.

        tf.data's ``bucket_by_sequence_length``. ``length_fn(sample)`` puts
        a sample in bucket ``b`` when ``boundaries[b-1] <= length <
        boundaries[b]`` (bucket 0 below the first boundary, the last one
        from the last boundary up); a bucket's batch is handed out as soon
        as it holds ``batch_sizes[b]`` samples, and what is left in each
        bucket at the end of the epoch comes last, bucket by bucket (unless
        ``drop_remainder``). Which batches come out, in which order, is a
        function of the epoch's sample order only: the same for any backend
        and worker count, and ``state()``/``resume()`` are exact (a resume
        re-reads from the oldest sample still waiting in a bucket).
        Padding is as in `padded_batch`; ``pad_to_boundary=True`` pads
        bucket ``b`` to ``boundaries[b] - 1`` (the last bucket to its
        longest). See docs/variable_length.md.

        >>> import feedline as fl
        >>> clips = [[1] * n for n in (1, 5, 2, 6, 1, 7)]
        >>> pipe = fl.from_sequence(clips).bucket_by_length(len, [4], [2, 2])
        >>> [b.shape for b in pipe]
        [(2, 2), (2, 6), (1, 1), (1, 7)]
        """
        _arguments.check_list("bucket_by_length", "boundaries", boundaries)
        _arguments.check_list("bucket_by_length", "batch_sizes", batch_sizes)
        padder = Padder(pad_value, None, pad_multiple, axis, lengths, mask, length_fn, tuple(boundaries),
                        tuple(batch_sizes), pad_to_boundary)
        return self._with(PaddedBatch(max(padder.batch_sizes), drop_remainder, None, padder))

    def batch_by_budget(
        self, max_tokens: int, *, length_fn=None, pad_value=0, axis: int = 0, lengths: bool = False, mask: bool = False,
        sizes=None,
    ) -> "Pipeline":
        """Batches of as many samples as fit ``max_tokens``, padding counted: rows x longest <= ``max_tokens``.

        Fairseq's and ESPnet's ``max_tokens`` batching (tf.data's nearest
        is ``bucket_by_sequence_length`` with ``bucket_batch_sizes``). In
        the epoch's order, a sample joins the current batch while the batch
        padded to its longest stays within the budget; otherwise the batch
        is handed out and the sample starts the next one. Padding is as in
        `padded_batch` (``pad_value``, ``axis``, ``lengths``, ``mask``). The
        length is ``length_fn(sample)``, or the first padded field's length
        along ``axis``; a sample longer than ``max_tokens`` is an error
        naming it. The batches are the same on every backend and worker
        count, and ``it.state()`` resumes exactly. ``sizes``: each source
        sample's length, known before the map (Fairseq's
        ``dataset.sizes``); the batches are then planned from it, so
        ``shard()`` ranks map only their own batches' samples, and
        ``even="pad"`` works. See docs/variable_length.md.

        Raises:
            ValueError: a bad argument.

        >>> import feedline as fl
        >>> pipe = fl.from_sequence([[1, 2], [3], [4, 5, 6], [7]]).batch_by_budget(6)
        >>> [b.tolist() for b in pipe]
        [[[1, 2], [3, 0]], [[4, 5, 6], [7, 0, 0]]]
        """
        padder = Padder(pad_value, None, None, axis, lengths, mask)
        return self._with(BudgetBatch(SAMPLES_PER_PACK_TASK, False, None, padder, max_tokens, length_fn,
                                      as_sizes(sizes, "batch_by_budget")))

    def pack(self, max_length: int, *, fit: str = "best", buffer: int = 32, too_long: str = "raise", pad_value=0,
             sizes=None) -> "Pipeline":
        """Concatenate whole samples into rows of ``max_length`` items, with segment ids and positions: no compute on padding.

        Grain's ``FirstFitPackIterDataset`` / ``BestFitPackIterDataset``
        (``buffer`` is their ``num_packing_bins``); tf.data has no built-in
        packing (T5/seqio's ``pack_dataset``). Every field of a sample (a
        dict's values, a tuple's items, or the sample itself) is an array
        whose first axis is the sample's length; all are packed together,
        so tokens and their targets stay aligned. Each row holds up to
        ``max_length`` items along that axis, then ``pad_value``; a dict
        sample gains ``"segment_ids"`` (1, 2, ... per sample in the row, 0
        on padding) and ``"positions"`` (0, 1, ... within each sample, 0 on
        padding), int32; a tuple gets them appended, a bare array comes out
        as ``(row, segment_ids, positions)``. Rows come one at a time:
        follow with ``batch(n)`` for batches of ``n`` rows, as in Grain.

        A sample goes into the first of the ``buffer`` open rows it fits
        (``fit="first"``) or the one it leaves least room in (``"best"``,
        the default: less padding at the same cost); when none has room
        and ``buffer`` rows are open, the fullest is handed out. Which rows
        come out is a function of the epoch's order only (the same on every
        backend and worker count), and ``it.state()`` holds the open rows,
        so ``resume`` is exact. See docs/variable_length.md.

        Args:
            max_length: items per row.
            fit: ``"first"`` or ``"best"``.
            buffer: rows held open at once (memory: ``buffer`` rows).
            too_long: ``"raise"`` (a sample longer than ``max_length`` is an
                error naming it) or ``"split"`` (cut into pieces of at most
                ``max_length``, each its own segment). Never cut silently.
            pad_value: fills each row past its last sample.
            sizes: each source sample's length after the map, known
                before it (one integer per source index, Fairseq's
                ``dataset.sizes``): the rows are planned from it (the same
                rows), so ``shard()`` ranks map only the samples of their
                own batches, and ``even="pad"`` works. A mapped sample of
                another length is an error naming it.

        Raises:
            ValueError: a bad argument, or pack() in a place it cannot run.

        >>> import numpy as np, feedline as fl
        >>> pipe = fl.from_sequence([np.array([1, 2, 3]), np.array([4, 5]), np.array([6])]).pack(4, fit="first")
        >>> [(row.tolist(), ids.tolist(), pos.tolist()) for row, ids, pos in pipe]
        [([1, 2, 3, 6], [1, 1, 1, 2], [0, 1, 2, 0]), ([4, 5, 0, 0], [1, 1, 0, 0], [0, 1, 0, 0])]
        """
        return self._with(Pack(max_length, fit, buffer, too_long, pad_value, as_sizes(sizes, "pack")))

    def take(self, n: int) -> "Pipeline":
        """Keep the first ``n`` samples of every epoch (``n`` batches, when placed after ``batch()``).

        After ``shuffle()`` that is a new random subset each epoch; before
        it, the same ``n`` samples in a new order. See docs/vocabulary.md.

        >>> import numpy as np, feedline as fl
        >>> [int(x) for x in fl.from_arrays(np.arange(10)).skip(2).take(3)]
        [2, 3, 4]
        """
        step = Take(n)
        samples = _repeating.endless_take(self._steps, step.count) if self._endless() else None
        if samples is not None:  # repeat().take(n): epochs of n samples (or batches), from as many passes as that takes
            return Pipeline(_repeating.limited(self._source, samples), self._steps)
        return self._with(step)

    def skip(self, n: int) -> "Pipeline":
        """Leave out the first ``n`` samples of every epoch (``n`` batches, when placed after ``batch()``)."""
        return self._with(Skip(n))

    def repeat(self, count: int | None = None) -> "Pipeline":
        """One epoch becomes ``count`` passes over the pipeline so far.

        Pass ``p`` of epoch ``e`` is epoch ``e * count + p`` of the pipeline
        before ``repeat``: each pass has its own ``shuffle`` order and its own
        ``rng`` draws, and ``len()`` is ``count`` times as large.
        ``set_epoch``, ``state()`` and ``resume`` count epochs of the
        repeated pipeline.

        ``count=None`` repeats without end: ``iter(pipe)`` runs pass after
        pass and never stops (stop your loop, or give Keras
        ``steps_per_epoch``); batches run across passes, all full;
        ``it.state()`` and ``resume`` work as for any epoch.
        ``repeat().take(n)`` makes epochs of ``n`` samples out of as many
        passes as that needs. See docs/vocabulary.md.

        >>> import numpy as np, feedline as fl
        >>> [int(x) for x in fl.from_arrays(np.arange(3)).repeat(2)]
        [0, 1, 2, 0, 1, 2]
        """
        _arguments.check_repeat(count, self._source)
        kept, moved = _repeating.split_at_repeat(self._steps)
        if self._endless():
            raise ValueError("repeat() of a pipeline that already repeats without end; give the first repeat() a count")
        return Pipeline(_repeating.repeated(Pipeline(self._source, tuple(kept)), count), tuple(moved))

    def _endless(self) -> bool:
        return isinstance(self._source, OrderedSource) and self._source.endless

    def map_batch(self, fn) -> "Pipeline":
        """Apply ``fn(batch)`` to each batch (vectorised work, after `batch`)."""
        return self._with(MapBatch(fn))

    def shard(self, index: int | None = None, count: int | None = None, *, even: str | None = "auto") -> "Pipeline":
        """Keep this rank's share of every epoch: positions ``index::count`` of the order.

        With no arguments, rank and world size come from an initialised
        ``torch.distributed``, from JAX's process index and count, from the
        Ray Train context (inside ``train_loop_per_worker``), or from the
        ``RANK`` and ``WORLD_SIZE`` environment variables.

        ``even`` decides what happens when the epoch does not divide evenly:
        None gives an exact partition (ranks differ by at most one sample, so
        possibly by one batch); ``"drop"`` leaves out the last ``< count``
        samples of each epoch's order and ``"pad"`` repeats the first ones,
        so every rank takes the same number of batches and none hangs at the
        last collective. The default ``"auto"`` is ``"drop"`` when rank and
        size come from the environment (distributed training) and None when
        you pass them. (Generator sources shard by shard; ``even`` does not
        apply to them. ``filter`` and ``on_error="skip"`` can still make
        ranks differ: avoid them under data parallelism, or stop at a fixed
        step count. Before ``pack()`` / ``batch_by_budget()``, ``"drop"``
        deals whole batches instead, equal in number after ``filter`` and
        skips too; given ``sizes=`` there, each rank maps only its own
        batches' samples, and ``"pad"`` repeats the epoch's first batches:
        see docs/variable_length.md.)
        """
        return self._with(Shard(*_arguments.shard_rank(index, count, even)))

    def cache(self, path, *, encodings: dict | None = None, on_change: str = "rebuild", variable_shape=()) -> "Pipeline":
        """Keep the samples up to here in a store at ``path``: decode once, read ever after.

        The first time the pipeline is iterated, everything before
        ``.cache()`` runs once over the whole source (in parallel, on its own
        workers) and its samples are written to ``path`` as a feedline store
        (Arrow IPC, memory-mapped; see docs/store.md). Every later epoch,
        and every later run of the same code, reads the store instead. A
        store is written to a temporary name and renamed when complete, so
        an interrupted write is never read.

        The store is keyed by a fingerprint of the source's data and the
        code of every step before ``.cache()`` (including helper functions
        of your module that they call, and values they capture). If that
        changes, the store is rebuilt with a warning (``on_change=
        "rebuild"``), refused (``"raise"``) or used anyway (``"reuse"``).
        Library code (NumPy, OpenCV, feedline's ops) is identified by name, so
        upgrading a library does not rebuild caches.

        Put random augmentation after ``.cache()``: a ``map`` before it would
        have its random draw frozen into the store (the same crop every
        epoch), so feedline warns. Shuffle and shard come after it too: the
        store holds every sample in source order, and each epoch's order is
        drawn from it.

        Args:
            path: the store's directory.
            encodings: per-field encodings, e.g. ``{"image": "jpeg:90"}``
                (default ``raw``: fastest to read; see docs/store.md).
            on_change: what to do with a store written by a different pipeline.
            variable_shape: names of fields whose arrays differ in shape from
                sample to sample (e.g. ``["image"]`` for images of any size);
                otherwise the shape of the first samples is the rule.

        >>> import numpy as np, tempfile, os, feedline as fl
        >>> tmp = tempfile.TemporaryDirectory()  # removed with its files once the example ends
        >>> folder = tmp.name
        >>> pipe = fl.from_arrays(np.arange(6)).map(lambda x: x * 10).cache(os.path.join(folder, "c")).batch(3)
        >>> [b.tolist() for b in pipe]
        [[0, 10, 20], [30, 40, 50]]
        """
        _arguments.check_cache(self._source, self._steps)
        upstream = Pipeline(self._source, tuple(s for s in self._steps if not isinstance(s, Prefetch)))
        return Pipeline(CacheSource(upstream, path, encodings=encodings, on_change=on_change, variable_shape=variable_shape))

    def prefetch(self, depth: int | None = None) -> "Pipeline":
        """How many batches may be prepared ahead of the consumer (default: 2 per worker)."""
        return self._with(Prefetch(depth))

    # ---------------------------------------------------------- consuming
    def _prepare_source(self) -> None:
        self._source.prepare()  # e.g. write a cache on first use, before any worker starts

    def _ensure_runtime(self):
        self._prepare_source()
        if self._runtime is None or self._runtime.closed:
            self._runtime, self._finalizer = _running.start_runtime(self, self._finalizer)
        return self._runtime

    def __iter__(self) -> EpochIterator:
        pending, self._pending = self._pending, None  # what load_state_dict() gave, used once
        if pending is not None and pending["state"] is not None:
            return self.resume(pending["state"])
        created = time.perf_counter()
        epoch = self._next_epoch if pending is None else pending["next_epoch"]
        self._next_epoch = epoch + 1
        return self._iterator(epoch, created=created)

    def _iterator(self, epoch: int, state: dict | None = None, created: float | None = None) -> EpochIterator:
        iterator = self._epoch_iterator(epoch, state, created)
        if self._endless():
            iterator = _running.endless(iterator, self._next_pass)
        self._live = weakref.ref(iterator)
        return iterator

    def _epoch_iterator(self, epoch: int, state: dict | None = None, created: float | None = None) -> EpochIterator:
        return _running.epoch_iterator(self, self._ensure_runtime(), epoch, state, created)

    def _next_pass(self, k: int) -> EpochIterator:
        """Pass ``k`` of an endless ``repeat()``: the endless iterator's next epoch."""
        self._next_epoch = k + 1
        return self._epoch_iterator(k)

    def epoch(self, k: int) -> EpochIterator:
        """An iterator over epoch ``k``; the next ``iter(pipe)`` is epoch ``k + 1``."""
        _arguments.check_epoch("epoch", k)
        created = time.perf_counter()
        self._next_epoch = k + 1
        return self._iterator(k, created=created)

    def set_epoch(self, k: int) -> None:
        """Make the next ``iter(pipe)`` epoch ``k`` (e.g. after restoring a checkpoint)."""
        _arguments.check_epoch("set_epoch", k)
        self._next_epoch = k

    def resume(self, state: dict) -> EpochIterator:
        """Continue an epoch from ``it.state()``, exactly after its last batch.

        Every field of ``state`` is checked before anything runs: its type
        and range, that it was saved by this pipeline (same source length,
        steps, shuffle seeds and batch size), that it fits this pipeline's
        epoch (the task exists, the offset is within it, the skipped
        samples were read before it), and its ``"digest"``, which catches a
        state edited after ``state()`` wrote it (a state from before the
        digest existed is accepted when its fields check out).

        Raises:
            ValueError: naming the field that is wrong and what to do; for
                a pipeline that differs only in its shuffle seed (``shuffle()``
                without ``seed=`` draws a new one in every process), the
                seed the state needs.
        """
        checked = self._checked_state(state)
        self._next_epoch = checked["epoch"] + 1
        return self._iterator(checked["epoch"], checked)

    def _checked_state(self, state: dict) -> dict:
        """``state`` checked against this pipeline as `resume` does (raises ValueError), without starting it."""
        return _stateful.checked_state(self, state)

    def state_dict(self) -> dict:
        """Where the latest ``iter(pipe)`` stands, as torch's ``Stateful`` protocol names it.

        After `load_state_dict`, the next ``iter(pipe)`` continues right
        after the last batch that iterator returned (between epochs: starts
        the next epoch), at any backend and worker count. The same as the
        loaders' ``state_dict()``; see docs/checkpoints.md.
        """
        return _stateful.state_dict(self._pending, self._live, self._next_epoch)

    def load_state_dict(self, state_dict: dict) -> None:
        """Make the next ``iter(pipe)`` continue from ``state_dict`` (see `state_dict`).

        Raises:
            ValueError: not a state_dict() of this version, or one of
                another pipeline (the field and the fix named).
        """
        self._pending = _stateful.decoded(state_dict, self)

    def __len__(self) -> int:
        """Batches per epoch (samples, if the pipeline does not batch)."""
        if self._endless():
            raise TypeError("len() is unknown for repeat() without a count: its epoch never ends")
        self._prepare_source()
        return self._plan.num_batches()

    def stats(self):
        """Statistics of the most recent epoch (see `EpochIterator.stats`)."""
        return _running.latest_stats(self._runtime)

    def close(self) -> None:
        """Stop the workers and free shared memory; iterating again restarts them."""
        if self._runtime is not None:
            self._runtime.close()

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------ adapters
    # Each adapter lives in feedline/adapters/ and imports its framework lazily,
    # so the core needs only NumPy; a missing framework names the extra to install.
    def torch(self, device=None, pin_memory=None, **options):
        """Batches as torch tensors; with a CUDA device, copied ahead of time (see `feedline.adapters.torch`)."""
        from ..adapters.torch import to_torch

        return to_torch(self, device=device, pin_memory=pin_memory, **options)

    def jax(self, sharding=None, **options):
        """Batches as JAX arrays, put on device ahead of time (see `feedline.adapters.jax`)."""
        from ..adapters.jax import to_jax

        return to_jax(self, sharding=sharding, **options)

    def tf(self, element_spec=None, **options):
        """A `tf.data.Dataset` over the pipeline's batches (see `feedline.adapters.tf`)."""
        from ..adapters.tf import to_tf

        return to_tf(self, element_spec=element_spec, **options)

    def keras(self, **options):
        """An input for Keras 3 ``model.fit``/``evaluate``/``predict`` (see `feedline.adapters.keras`)."""
        from ..adapters.keras import to_keras

        return to_keras(self, **options)

    # ------------------------------------------------------------ reading
    def _parts(self) -> list:
        """``[label, digest]`` of each thing `_fingerprint` covers, in a state so that resume can name what differs."""
        return _identity.parts(self._source, self._steps)

    def _fingerprint(self) -> str:
        """What a saved ``it.state()`` must match to resume here: the source's size and the steps that order data."""
        return _identity.fingerprint(self._source, self._steps)

    def __repr__(self) -> str:
        return describe(self._source, self._steps, self._runtime)
