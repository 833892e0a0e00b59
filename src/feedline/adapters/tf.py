"""TensorFlow adapter: ``pipe.tf(element_spec=None)`` returns a `tf.data.Dataset`.

The dataset is ``tf.data.Dataset.from_generator`` over feedline epochs:
each time TensorFlow iterates it (each Keras epoch, each ``for`` loop) the
pipeline's next epoch starts. The work (reading, decoding, augmenting,
batching) runs in feedline's workers; tf.data only receives finished
batches, one Python call per batch, so its Python overhead is per batch,
never per sample. Its cardinality is set to ``len(pipe)`` when known, so
Keras shows a progress bar with a total.

No tf.data prefetch is added: feedline already prepares batches ahead, and
a second buffer would only hold more memory. Add ``.prefetch()`` yourself
only for tf.data work you chain after this dataset.

The element spec comes from the first batch (which starts the pipeline
when ``pipe.tf()`` is called; that batch is not lost, it opens the first
epoch) or from ``element_spec=``. The first axis of every array is left
unknown (``None``), because a last partial batch is shorter; declare a
spec to fix it (e.g. for XLA or TPUs with ``drop_remainder=True``).
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref

import numpy as np

from .._errors import FeedlineError
from ._common import epoch_batches, even_steps, map_structure, require, steps_per_epoch

__all__ = ["to_tf"]


def _spec_of(batch):
    """The `tf.TensorSpec` tree of one batch: first axis unknown, the rest as seen."""
    tf = sys.modules["tensorflow"]

    def spec(leaf):
        array = np.asarray(leaf)
        if array.dtype.kind in "US":
            dtype = tf.string
        elif array.dtype.kind == "O":
            raise TypeError(
                f"pipe.tf(): a batch holds a leaf of type {type(leaf).__name__} (an object array or a "
                "list of mixed values), which tf.data cannot carry; return arrays or numbers from "
                "map(), or pass element_spec="
            )
        else:
            dtype = tf.as_dtype(array.dtype)
        shape = (None,) + array.shape[1:] if array.ndim else ()
        return tf.TensorSpec(shape=shape, dtype=dtype)

    return map_structure(spec, _as_tf_structure(batch))


def _as_tf_structure(batch):
    """tf.data reads lists as tensors to stack; make them tuples (which it reads as structure)."""
    if isinstance(batch, list):
        return tuple(_as_tf_structure(v) for v in batch)
    if isinstance(batch, tuple):
        items = [_as_tf_structure(v) for v in batch]
        return type(batch)(*items) if hasattr(batch, "_fields") else tuple(items)
    if isinstance(batch, dict):
        return {k: _as_tf_structure(v) for k, v in batch.items()}
    return batch


class _Epochs:
    """What the dataset keeps alive: the pipeline, and the epoch opened to read the element spec.

    The returned dataset holds it (``dataset._feedline_epochs``), and so do
    datasets made from that one; the generator factory holds it only
    weakly, because TensorFlow keeps every ``from_generator`` function for
    the life of the process (in its graph's list of Python functions): held
    from there, a pipeline nothing else references would keep its workers
    and shared memory until the interpreter exits.
    """

    def __init__(self, pipe, even_batches: bool, opened=None):
        self.pipe = pipe
        self.even_batches = even_batches
        self.opened = opened  # (first batch, rest of the epoch) or None
        self.lock = threading.Lock()


class _EpochFactory:
    """The generator factory given to ``from_generator``: each call is a new epoch.

    The first call may reuse the epoch opened to read the element spec, with
    its first batch put back in front. A lock keeps two calls (two
    concurrent iterations of the dataset) from sharing that epoch.
    """

    def __init__(self, epochs: _Epochs):
        self.epochs = weakref.ref(epochs)

    def __call__(self):
        epochs = self.epochs()
        if epochs is None:
            raise FeedlineError(
                "pipe.tf(): this tf.data dataset's feedline pipeline was garbage collected (nothing held the dataset "
                "returned by pipe.tf() or one made from it); keep that dataset while TensorFlow iterates it")
        with epochs.lock:
            opened, epochs.opened = epochs.opened, None
        if opened is not None:
            first, rest = opened
            batches = itertools.chain([first], rest)
            del first, opened
        else:
            batches = epoch_batches(epochs.pipe, even_steps(epochs.pipe, epochs.even_batches))
        del epochs  # the running epoch holds the pipeline (its iterator's owner), not this frame
        for batch in batches:
            yield _as_tf_structure(batch)


def to_tf(pipe, element_spec=None, *, even_batches: bool = True):
    """A `tf.data.Dataset` over the batches of ``pipe``; each iteration is the next epoch.

    Use it with ``model.fit(pipe.tf(), epochs=...)``, with Keras on the
    TensorFlow backend, or in a custom loop (``for x, y in ds:`` or inside a
    ``tf.function``).

    Args:
        pipe: the pipeline.
        element_spec: the `tf.TensorSpec` structure of a batch; None derives
            it from the first batch (first axis unknown).
        even_batches: for a sharded pipeline (``.shard()``), the same number
            of batches on every worker (default).

    Returns:
        A `tf.data.Dataset` with that element spec and, when the number of
        batches is known, that cardinality.

    Raises:
        ImportError: TensorFlow is not installed (``pip install 'feedline[tf]'``).
        TypeError: a batch holds values tf.data cannot carry (object arrays).
        ValueError: the pipeline is empty, so there is no batch to read the spec from.

    >>> import numpy as np, feedline as fl
    >>> x, y = np.zeros((64, 4), np.float32), np.arange(64)
    >>> pipe = fl.from_arrays(x, y).batch(16)
    >>> ds = pipe.tf()
    >>> ds.element_spec[0]
    TensorSpec(shape=(None, 4), dtype=tf.float32, name=None)
    >>> int(ds.cardinality())  # batches an epoch, from len(pipe)
    4
    >>> [int(y_batch[0]) for _, y_batch in ds]
    [0, 16, 32, 48]
    >>> pipe.close()
    """
    tf = require("tensorflow", "tf", "pipe.tf()")
    steps = even_steps(pipe, even_batches)
    opened = None
    if element_spec is None:
        rest = epoch_batches(pipe, steps)
        try:
            first = next(rest)
        except StopIteration:
            raise ValueError("pipe.tf(): the pipeline yielded no batch, so there is no element_spec to derive; pass element_spec=") from None
        element_spec = _spec_of(first)
        opened = (first, rest)
        del first
    epochs = _Epochs(pipe, even_batches, opened)
    del opened
    dataset = tf.data.Dataset.from_generator(_EpochFactory(epochs), output_signature=element_spec)
    count = steps_per_epoch(pipe, even_batches)
    if count is not None:
        dataset = dataset.apply(tf.data.experimental.assert_cardinality(count))
    dataset._feedline_epochs = epochs  # the dataset (and those made from it) keeps the pipeline; see `_Epochs`
    return dataset
