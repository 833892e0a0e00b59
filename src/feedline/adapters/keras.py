"""Keras 3 adapter: ``model.fit(pipe.keras())`` on every backend, and Keras Sequences as sources.

`to_keras` returns a Keras `DataAdapter` (accepted as is since Keras 3.7)
that gives each Keras backend exactly what its trainer iterates (JAX: the
epoch's NumPy batches; PyTorch: a `TorchLoader`; TensorFlow: `to_tf`), with
no second pool or prefetch on top of feedline's. `from_keras_sequence` runs
an existing ``keras.utils.Sequence`` in feedline's workers. Why not a
``PyDataset``, and the limits: docs/adapters.md, "Keras 3".
"""

from __future__ import annotations

import functools
import importlib
import itertools
from typing import TYPE_CHECKING

from .._errors import FeedlineError
from ._common import EpochPosition, even_steps, require, steps_per_epoch

if TYPE_CHECKING:  # at run time see __getattr__
    from ._keras_sequence import from_keras_sequence
    from .keras_checkpoint import LoaderCheckpoint

__all__ = ["LoaderCheckpoint", "from_keras_sequence", "to_keras"]

# from_keras_sequence builds a pipeline (the facade), whose .keras() imports this module: it lives in
# `_keras_sequence`, below the facade, and is found here on first use (PEP 562).
_WHERE = {"from_keras_sequence": "._keras_sequence", "LoaderCheckpoint": ".keras_checkpoint"}


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'feedline.adapters.keras' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name], __package__), name)



@functools.cache
def _adapter_class():
    """Define the adapter class on first use (it subclasses Keras's, so Keras must be imported)."""
    keras = require("keras", "keras", "pipe.keras()")
    major_minor = tuple(int(p) for p in keras.__version__.split(".")[:2])
    if major_minor < (3, 7):
        raise ImportError(
            f"pipe.keras() needs Keras >= 3.7 (it passes fit() a DataAdapter, which older Keras "
            f"rejects); this is Keras {keras.__version__}. Upgrade with: pip install 'feedline[keras]'"
        )
    from keras.src.trainers.data_adapters.data_adapter import DataAdapter

    class FeedlineDataAdapter(DataAdapter):
        """What ``pipe.keras()`` returns: pass it as ``x`` or ``validation_data``."""

        def __init__(self, pipe, even_batches: bool = True):
            self._pipe = pipe
            self._even = even_batches
            self._tf_dataset = None
            self._epochs = _Epochs(pipe, even_batches)

        def get_numpy_iterator(self):
            return self._epochs.next_epoch()

        def get_jax_iterator(self):
            return self._epochs.next_epoch()

        def get_torch_dataloader(self):
            from keras.src.backend.torch.core import get_device

            from .torch import TorchLoader

            return _TorchEpochs(self._epochs, TorchLoader(self._pipe, device=get_device(), even_batches=self._even))

        def on_epoch_end(self):
            self._epochs.pause()

        def get_tf_dataset(self):
            if self._tf_dataset is None:
                from .tf import to_tf

                self._tf_dataset = to_tf(self._pipe, even_batches=self._even)
            return self._tf_dataset

        @property
        def num_batches(self):
            return steps_per_epoch(self._pipe, self._even)

        @property
        def batch_size(self):
            return None

        @property
        def has_partial_batch(self):
            return None

        @property
        def partial_batch_size(self):
            return None

        def __repr__(self) -> str:
            return f"FeedlineDataAdapter over\n{self._pipe!r}"

    return FeedlineDataAdapter


class _Epochs:
    """Hands Keras one feedline epoch per iterator, and resumes an epoch Keras only peeked at.

    Before the first ``fit``/``evaluate``/``predict`` of an unbuilt model,
    Keras (JAX and PyTorch backends) opens an iterator, takes one batch to
    learn the input shapes, and drops the iterator. Starting a fresh epoch
    after that would waste the work prefetched for the dropped one and shift
    every later epoch number by one. So an epoch dropped after at most
    ``keep`` batches (1, plus those staged ahead on a device) is parked,
    and the next iterator replays those batches and continues it.

    When Keras ends its epoch (``on_epoch_end``) before the feedline epoch
    ended, the live epoch is paused (see `_PausableEpoch`). `position` says
    where the live epoch stands, paused or not (`LoaderCheckpoint` saves
    it); ``take`` (set by a resume) ends the next iterator after that many
    batches, parking the rest of the epoch for the next iterator, so that a
    resumed Keras epoch ends at its own last step.
    """

    def __init__(self, pipe, even_batches: bool):
        self.pipe = pipe
        self.even = even_batches
        self.parked = None  # (batches already handed out, rest of the epoch)
        self.live = None  # the epoch an iterator Keras holds is reading (not a parked one)
        self.generation = 0
        self.position = EpochPosition(pipe)
        self.take = None

    def resume(self, state_dict: dict, take: int | None) -> None:
        """Make the next iterator continue at ``state_dict``'s position (a `LoaderCheckpoint` restore)."""
        self.position.load_state_dict(state_dict, "LoaderCheckpoint")
        if self.parked is not None:  # an epoch Keras peeked at before the restore: not the one to continue
            self.parked[1].close()
            self.parked = None
        self.take = take

    def next_epoch(self, keep: int = 1):
        self.generation += 1
        return self._run(self.generation, keep)

    def pause(self) -> None:
        """Keras ended its epoch: cancel the live epoch's outstanding work, keeping its place."""
        if self.live is not None:
            self.live.pause()

    def _run(self, generation, keep):
        parked, self.parked = self.parked, None  # taken at the first next(): iterators made and dropped unused take nothing
        if parked is None:
            if self.live is not None:  # a paused epoch nobody reads on (an evaluation's): the new one starts anew
                self.live.close()
            head, rest = [], _PausableEpoch(self.position, even_steps(self.pipe, self.even))
        else:
            head, rest = parked
            if not head:  # parked by a resumed epoch's last step (a peek parks the batches it saw)
                rest.next_if_empty = True
        self.live = rest
        take, self.take = self.take, None
        batches = itertools.chain(head, rest) if take is None else itertools.islice(itertools.chain(head, rest), take)
        given, parked_now = [], False
        try:
            for batch in batches:
                if given is not None:
                    given.append(batch)
                    if len(given) > keep:
                        given = None  # past the peek: keep nothing
                yield batch
                del batch
            if take is not None:  # the resumed Keras epoch's last step: the next iterator continues the epoch
                self.parked, parked_now = ([], rest), True
        except GeneratorExit:  # dropped by Keras (an error inside the epoch is not parked)
            if given is not None and generation == self.generation:
                self.parked, parked_now = (given, rest), True
            raise
        finally:
            if self.live is rest:
                self.live = None
            if not parked_now:
                rest.close()


class _PausableEpoch:
    """One feedline epoch that stops its work when Keras's epoch ends and, if read on, continues where it stood.

    Keras ends an epoch without saying whether it will read the same
    iterator again: fit's training iterator with ``steps_per_epoch`` goes on
    in the next Keras epoch (Keras's rule), an evaluation's
    (``validation_steps=``, ``evaluate(steps=)``) is dropped only when the
    next evaluation starts, a whole training epoch later. `pause` cancels
    the epoch's queued and running tasks at once and keeps its position; a
    later ``next()`` resumes the epoch there (``pipe.resume``), so both read
    the batches they would have read. An epoch whose position cannot be
    kept (``map(ordered=False)``) is left running, as before.
    """

    def __init__(self, position: EpochPosition, steps: int | None):
        self.position = position
        self.steps = steps
        self.batches = position.epoch(steps)
        self.paused = None  # the position's pending state while this epoch is paused
        self.next_if_empty = False  # a resume parked this epoch at its end: then the next epoch follows

    def __iter__(self):
        return self

    def __next__(self):
        if self.paused is not None:
            self.paused = None
            self.batches = self.position.epoch(self.steps)  # continues at the position kept by `pause`
        first, self.next_if_empty = self.next_if_empty, False
        try:
            return next(self.batches)
        except StopIteration:
            if not first:
                raise
            self.batches = self.position.epoch(self.steps)
            return next(self.batches)

    def pause(self) -> None:
        position = self.position
        if self.paused is not None or position.iterator is None:
            return  # not started, ended, or paused already
        if self.steps is not None and position.given >= self.steps:
            self.batches.close()  # its last batch was handed out: nothing left to keep
            return
        try:
            state = position.state_dict()
        except FeedlineError:
            return  # unordered output has no position to resume from
        self.batches.close()
        position.load_state_dict(state, "pipe.keras()")
        self.paused = position.pending

    def close(self) -> None:
        if self.paused is not None and self.position.pending is self.paused:
            self.position.pending = None  # nobody reads on: the next epoch starts anew
        self.paused = None
        self.batches.close()


class _TorchEpochs:
    """What the PyTorch backend iterates: `_Epochs` converted by a `TorchLoader`."""

    def __init__(self, epochs: _Epochs, loader):
        self.epochs = epochs
        self.loader = loader

    def __iter__(self):
        staged = self.loader.depth if self.loader.device is not None and self.loader.device.type != "cpu" else 0
        return self.loader.convert(self.epochs.next_epoch(keep=1 + staged))

    def __len__(self) -> int:
        return len(self.loader)


def to_keras(pipe, *, even_batches: bool = True):
    """An input for Keras 3 ``model.fit``, ``evaluate`` and ``predict``, on any backend.

    ``model.fit(pipe.keras(), epochs=3, validation_data=val.keras())``:
    each Keras epoch runs one feedline epoch (a new shuffle), the progress
    bar knows ``len(pipe)`` steps, and no Keras worker threads or queues sit
    on top of feedline's. Batches are ``x``, ``(x,)``, ``(x, y)`` or
    ``(x, y, sample_weight)``, or dicts keyed by input name, as Keras expects.

    Args:
        pipe: the pipeline (batched).
        even_batches: for a sharded pipeline, the same number of batches on
            every rank (default).

    Returns:
        A Keras ``DataAdapter`` that ``fit`` uses as is.

    Raises:
        ImportError: Keras is missing or older than 3.7 (``pip install 'feedline[keras]'``).

    >>> import keras
    >>> import numpy as np, feedline as fl
    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    >>> y = (x.sum(axis=1) > 0).astype("float32")
    >>> pipe = fl.from_arrays(x, y).shuffle(seed=0).batch(16)
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
    >>> model.compile(optimizer="sgd", loss="binary_crossentropy")
    >>> history = model.fit(pipe.keras(), epochs=2, verbose=0)  # each Keras epoch: one feedline epoch of 4 batches
    >>> len(history.history["loss"])
    2
    >>> pipe.close()
    """
    return _adapter_class()(pipe, even_batches=even_batches)
