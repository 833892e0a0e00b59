"""The loaders under test: one function per loader.

Each takes a `Workload` and returns a context manager that yields a
`Run`: an iterable of batches ``(array, ..., index)`` for one epoch, plus a
line saying what the loader actually ran (feedline's automatic choice).
Building the loader (pipeline, DataLoader, worker processes) happens inside
the context, so the runner's clock counts start-up the way a user
experiences it, and leaving the context releases everything (workers,
shared memory), so the next loader starts on an idle machine.

The loaders here are generic: they read sample ``i`` as ``w.read(i)`` and
apply the workload's one per-sample function ``w.fn``, so every loader runs
the same Python code and only the machinery differs. Each workload adds its
own *native* loaders (`Workload.native`): a library's own ops or file
format. Every loader uses 2 workers (the host has 2 cores) and no shuffle.

Thread pools: `benchmarks.__main__` sets OMP/OPENBLAS/MKL/VECLIB/NUMEXPR
thread counts to 1 in the environment before anything loads, and every
worker process of every loader (fork or spawn) inherits it; OpenCV's pool is
pinned to 1 where the workloads load OpenCV (`workloads` helpers). That is
what feedline's process workers do by default, so the comparison is fair.

Add a loader: write a generator function decorated with
``@contextlib.contextmanager``, register it in `LOADERS` with a line in
`NOTES`, and import its library in `prepare` (imports stay out of the clock).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from .workloads import Workload, collate

__all__ = ["LOADERS", "NATIVE_NOTES", "NOTES", "Run", "SampleDataset", "applies", "feedline_native", "feedline_pipeline", "find", "prepare",
           "remembering_in"]

WORKERS = 2


@dataclass
class Run:
    """One epoch of one loader: its batches, and what it ran."""

    batches: Iterable
    detail: str = ""
    why: str = ""  # feedline's reason for its choice of backend


class SampleDataset:
    """Map-style dataset over a workload: ``fn((data[i], index[i]))`` (raw rows when ``fn`` is None).

    Defined at module level so spawn workers import it by name. A memory-mapped
    ``data`` travels as its file name and reopens in each worker (the usual
    way to feed a DataLoader from a memmap), not as a pickled copy.
    """

    def __init__(self, w: Workload, fn: Callable | None = "same"):
        self.data, self.index = w.data, w.index
        self.fn = w.fn if fn == "same" else fn

    def __getstate__(self):
        state = dict(self.__dict__)
        if isinstance(self.data, np.memmap):
            d = self.data
            state["data"] = ("memmap", d.filename, d.dtype.str, d.shape, d.offset)
        return state

    def __setstate__(self, state):
        data = state["data"]
        if isinstance(data, tuple) and data and data[0] == "memmap":
            _, filename, dtype, shape, offset = data
            state["data"] = np.memmap(filename, dtype=np.dtype(dtype), mode="r", shape=shape, offset=offset)
        self.__dict__.update(state)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        s = (self.data[i], self.index[i])
        return s if self.fn is None else self.fn(s)


def _ranges(n: int, size: int):
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


# ------------------------------------------------------------- serial loop
@contextlib.contextmanager
def serial_loop(w: Workload):
    """The single-core reference: a plain Python loop and ``np.stack``."""
    yield Run((collate([w.sample(i) for i in r]) for r in _ranges(len(w), w.batch_size)), "1 process, 1 thread")


# ----------------------------------------------------------------- feedline
class _FeedlineRun(Run):
    """A feedline epoch: what it ran is read when asked (the automatic choice may switch backend mid-epoch)."""

    def __init__(self, it, extra: str):
        self.batches, self._extra = it, extra

    @property
    def detail(self) -> str:
        stats = self.batches.stats()
        return f"{stats.backend} x{stats.workers}" + (f", {self._extra}" if self._extra else "")

    @property
    def why(self) -> str:
        return self.batches.stats().decision


@contextlib.contextmanager
def feedline_pipeline(pipe, detail: str = ""):
    """Iterate a feedline pipeline for one epoch (workers start inside), close it after."""
    with pipe:
        it = iter(pipe)  # builds the runtime: workers start here
        try:
            yield _FeedlineRun(it, detail)
        finally:
            it.close()


def feedline_native(sample_fn: Callable, batch_fn: Callable, detail: str) -> Callable:
    """A native loader: ``from_arrays(data, index).map(sample_fn).batch(B).map_batch(batch_fn)``, automatic backend."""

    def loader(w: Workload):
        import feedline as fl

        pipe = fl.from_arrays(w.data, w.index).map(sample_fn).batch(w.batch_size).map_batch(batch_fn)
        return feedline_pipeline(pipe, detail)

    return loader


def _feedline(hand: bool):
    def loader(w: Workload):
        import feedline as fl

        pipe = fl.from_arrays(w.data, w.index)
        settings = w.hand if hand else {}
        if w.fn is not None:
            pipe = pipe.map(w.fn, **(settings or {}))
        return feedline_pipeline(pipe.batch(w.batch_size))

    return loader


_memory: list[str] = []  # the file the remembered row's verdicts live in, made on first use (one per benchmark process)
_remembered_for: set[str] = set()  # workloads whose agreeing trials ran


@contextlib.contextmanager
def _feedline_remembered(w: Workload):
    """feedline-auto started on the verdict its earlier runs left: the first use (the runner's untimed warm-up)
    runs the trials that must agree (`feedline.engine.choice.Remembering.agree`), the later ones start on their verdict."""
    import atexit
    import os
    import shutil
    import tempfile

    from feedline.engine.choice import DEFAULT_POLICY

    if not _memory:
        folder = tempfile.mkdtemp(prefix="feedline-bench-memory-")
        atexit.register(shutil.rmtree, folder, True)
        _memory.append(os.path.join(folder, "choices.json"))
    with remembering_in(_memory[0]):
        if w.name not in _remembered_for:  # the warm-up round: the trials before the last one, run here
            _remembered_for.add(w.name)
            for _ in range(DEFAULT_POLICY.remember.agree - 1):
                with _feedline(hand=False)(w) as run:
                    for _ in run.batches:
                        pass
        with _feedline(hand=False)(w) as run:
            yield run


@contextlib.contextmanager
def remembering_in(path: str):
    """``FEEDLINE_REMEMBER=path`` meanwhile (read as a pipeline starts, written when its trial decides), then as before."""
    import os

    before = os.environ.get("FEEDLINE_REMEMBER")
    os.environ["FEEDLINE_REMEMBER"] = path
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("FEEDLINE_REMEMBER", None)
        else:
            os.environ["FEEDLINE_REMEMBER"] = before


# -------------------------------------------------------------------- torch
def _torch(context: str | None):
    @contextlib.contextmanager
    def loader(w: Workload):
        from torch.utils.data import DataLoader

        dl = DataLoader(SampleDataset(w), batch_size=w.batch_size, shuffle=False, num_workers=WORKERS,
                        multiprocessing_context=context, persistent_workers=False)
        it = iter(dl)  # starts the workers; inside the timed region
        try:
            yield Run(it, f"{context or 'fork'} x{WORKERS}")
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)  # joins the workers now, not at GC
            if shutdown is not None:
                shutdown()
            del it

    return loader


# -------------------------------------------------------------------- keras
_PYDATASET = None


def _pydataset_class():
    """A ``keras.utils.PyDataset`` over `SampleDataset` (defined on first use: keras imports TensorFlow)."""
    global _PYDATASET
    if _PYDATASET is None:
        import keras

        class SamplePyDataset(keras.utils.PyDataset):
            def __init__(self, ds, batch_size, **kwargs):
                super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
                self.ds, self.batch_size = ds, batch_size

            def __len__(self):
                return math.ceil(len(self.ds) / self.batch_size)

            def __getitem__(self, k):
                lo, hi = k * self.batch_size, min((k + 1) * self.batch_size, len(self.ds))
                return collate([self.ds[i] for i in range(lo, hi)])

        _PYDATASET = SamplePyDataset
    return _PYDATASET


def _keras(use_multiprocessing: bool):
    @contextlib.contextmanager
    def loader(w: Workload):
        from keras.src.trainers.data_adapters import get_data_adapter

        ds = _pydataset_class()(SampleDataset(w), w.batch_size, workers=WORKERS, use_multiprocessing=use_multiprocessing)
        # What fit(ds, shuffle=False) consumes: Keras' PyDatasetAdapter and its numpy iterator (the JAX and
        # torch backends take this iterator; the TensorFlow backend wraps it in tf.data.from_generator).
        adapter = get_data_adapter(ds, shuffle=False)
        adapter.on_epoch_begin()
        try:
            kind = "multiprocessing.Pool (fork)" if use_multiprocessing else "ThreadPool"
            yield Run(adapter.get_numpy_iterator(), f"OrderedEnqueuer, {kind} x{WORKERS}")
        finally:
            adapter.on_epoch_end()

    return loader


# ------------------------------------------------------------------ tf.data
def tf_output_signature(w: Workload):
    """(dtypes, shapes) of one sample after ``fn``, for ``tf.numpy_function``."""
    import tensorflow as tf

    probe = w.sample(0)
    return [tf.as_dtype(np.asarray(a).dtype) for a in probe], [np.asarray(a).shape for a in probe]


@contextlib.contextmanager
def tf_data(w: Workload):
    """``range(n).map(numpy_function(sample), AUTOTUNE).batch(B).prefetch(AUTOTUNE)``."""
    import tensorflow as tf

    dtypes, shapes = tf_output_signature(w)
    np_dtypes = [d.as_numpy_dtype for d in dtypes]

    def sample(i):
        return [np.asarray(a, dtype=d) for a, d in zip(w.sample(int(i)), np_dtypes)]

    def load(i):
        out = tf.numpy_function(sample, [i], dtypes, stateful=False)
        for t, shape in zip(out, shapes):
            t.set_shape(shape)
        return tuple(out)

    ds = (tf.data.Dataset.range(len(w)).map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
          .batch(w.batch_size).prefetch(tf.data.AUTOTUNE))
    yield Run(ds.as_numpy_iterator(), "numpy_function, map AUTOTUNE, prefetch AUTOTUNE")


# -------------------------------------------------------------------- Grain
@contextlib.contextmanager
def grain_iter(dataset, detail: str):
    """Iterate a Grain ``IterDataset`` for one epoch; close its worker processes after."""
    it = iter(dataset)
    try:
        yield Run(it, detail)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        del it


def grain_mp(w: Workload, source, fn: Callable | None):
    """``MapDataset.source(source).map(fn).batch(B).to_iter_dataset().mp_prefetch(2 workers)``."""
    import grain

    ds = grain.MapDataset.source(source)
    if fn is not None:
        ds = ds.map(fn)
    ds = ds.batch(w.batch_size).to_iter_dataset().mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
    return grain_iter(ds, f"mp_prefetch x{WORKERS}")


def _grain(w: Workload):
    return grain_mp(w, SampleDataset(w, fn=None), w.fn)


# --------------------------------------------------------------------- SPDL
def _spdl(processes: bool):
    @contextlib.contextmanager
    def loader(w: Workload):
        from spdl.pipeline import PipelineBuilder

        pool = None
        fn = w.sample
        if processes:
            from concurrent.futures import ProcessPoolExecutor

            # The default (fork) context; the dataset reaches each worker once, through the initializer.
            pool = ProcessPoolExecutor(WORKERS, initializer=_spdl_worker_init, initargs=(SampleDataset(w),))
            fn = _spdl_worker_item
        builder = (PipelineBuilder().add_source(range(len(w)))
                   .pipe(fn, concurrency=WORKERS, executor=pool, output_order="input")
                   .aggregate(w.batch_size).pipe(collate).add_sink(3))
        pipeline = builder.build(num_threads=WORKERS)
        try:
            with pipeline.auto_stop():
                yield Run(pipeline.get_iterator(timeout=300), f"{'ProcessPoolExecutor' if processes else 'threads'} x{WORKERS}")
        finally:
            if pool is not None:
                pool.shutdown(wait=True)

    return loader


_WORKER_DATASET = None


def _spdl_worker_init(dataset) -> None:
    global _WORKER_DATASET
    _WORKER_DATASET = dataset


def _spdl_worker_item(i: int):
    """Sample ``i`` in a ProcessPoolExecutor worker: only the index travels to it, only the row back."""
    return _WORKER_DATASET[i]


def _spdl_available() -> bool:
    try:
        import spdl.pipeline  # noqa: F401
    except (ImportError, OSError):  # not installed, or its native library does not load
        return False
    return True


LOADERS: dict[str, Callable] = {
    "serial-loop": serial_loop,
    "feedline-auto": _feedline(hand=False),
    "feedline-remembered": _feedline_remembered,
    "feedline-hand": _feedline(hand=True),
    "torch-fork": _torch(None),
    "torch-spawn": _torch("spawn"),
    "keras-thread": _keras(False),
    "keras-process": _keras(True),
    "tf-data": tf_data,
    "grain": _grain,
    "spdl-thread": _spdl(False),
    "spdl-process": _spdl(True),
}

# What each loader is, for RESULTS.md.
NOTES: dict[str, str] = {
    "serial-loop": "plain Python loop calling the per-sample function, np.stack per batch (1 core)",
    "feedline-auto": "fl.from_arrays(data, index).map(fn).batch(B): feedline chooses backend and workers "
                     "(no map at all where there is no per-sample work)",
    "feedline-remembered": "the same, started on the verdict the automatic choice's earlier runs (two in the untimed "
                           "warm-up, whose trials agreed) left: every later run of a training script",
    "feedline-hand": "the same with the best hand setting of map() for the workload (given under its table)",
    "torch-fork": "DataLoader(num_workers=2), default (fork) context, persistent_workers=False",
    "torch-spawn": "DataLoader(num_workers=2, multiprocessing_context='spawn'), persistent_workers=False",
    "keras-thread": "keras.utils.PyDataset(workers=2, use_multiprocessing=False) through Keras' PyDatasetAdapter "
                    "(what fit() iterates)",
    "keras-process": "the same with use_multiprocessing=True (multiprocessing.Pool, fork)",
    "tf-data": "tf.data.Dataset.range(n).map(tf.numpy_function(fn), num_parallel_calls=AUTOTUNE, deterministic=True)"
               ".batch(B).prefetch(AUTOTUNE)",
    "grain": "grain.MapDataset.source(rows).map(fn).batch(B).to_iter_dataset().mp_prefetch(num_workers=2)",
    "spdl-thread": "spdl.pipeline: source(range(n)).pipe(fn, concurrency=2) (thread pool).aggregate(B).pipe(collate)",
    "spdl-process": "the same with executor=ProcessPoolExecutor(2) (fork)",
}

# The native loaders the workloads define (name -> what it is, in general).
NATIVE_NOTES: dict[str, str] = {
    "feedline-native": "feedline's idiomatic code for the workload: feedline.vision / feedline.audio ops, "
                       "whole-batch work in map_batch, automatic backend",
    "tf-native": "tf.data with TensorFlow's own ops (tf.io.decode_jpeg, tf.image), AUTOTUNE",
    "feedline-store": "fl.from_store(path) of a store written once by feedline, then the shared function",
    "grain-arrayrecord": "Grain over an ArrayRecord file of the decoded images, then the shared function",
    "tf-tfrecord": "tf.data.TFRecordDataset of the decoded images, then the shared function in numpy_function",
}


def find(name: str, w: Workload) -> Callable:
    """The loader ``name`` for workload ``w`` (its native one, or the generic one)."""
    if name in w.native:
        return w.native[name]
    return LOADERS[name]


def prepare(names) -> None:
    """Import what the named loaders need, so no timed run pays for an import."""
    import feedline  # noqa: F401

    if any(n.startswith("torch") for n in names):
        import torch.utils.data  # noqa: F401
    if any(n.startswith(("keras", "tf-")) for n in names):
        import tensorflow  # noqa: F401
        from keras.src.trainers.data_adapters import get_data_adapter  # noqa: F401

        _pydataset_class()
    if any(n.startswith("grain") for n in names):
        import grain  # noqa: F401
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()  # Grain reads absl flags; a script that is not an absl app must do this
    if any(n.startswith("spdl") for n in names):
        import spdl.pipeline  # noqa: F401


def applies(name: str, w: Workload) -> str:
    """'' if loader ``name`` runs on ``w``, else why not."""
    if name in w.skipped:
        return w.skipped[name]
    if name in NATIVE_NOTES:
        return "" if name in w.native else "not defined for this workload"
    if name not in LOADERS:
        return "unknown loader"
    if name == "feedline-hand" and w.hand is None:
        return "the best hand setting is feedline-auto's (no map)"
    if name == "feedline-remembered" and w.fn is None:
        return "no map: no trial to remember"
    if name.startswith("spdl") and not _spdl_available():
        return "spdl does not import"
    return ""
