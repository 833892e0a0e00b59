"""Keras Sequences (and ``PyDataset``s) as sources: `from_keras_sequence`, reached as `feedline.adapters.keras.from_keras_sequence`.

Apart from `keras.to_keras` because it builds a pipeline (the facade, whose
``.keras()`` imports the adapter): imports flow one way. Why not a
``PyDataset``, and the limits: docs/adapters.md, "Keras 3".
"""

from __future__ import annotations

import warnings

__all__ = ["from_keras_sequence"]

_KERAS_MODULES = ("keras", "tf_keras", "tensorflow")
# Not copied to the detached class: __init__ never runs on the copy (its state
# is copied as is), and its usual super().__init__(**kwargs) would bind the copy
# to the Keras class again.
_NOT_COPIED = ("__dict__", "__weakref__", "__init__")


def _one_keras_batch(items):
    """Collation for a Keras Sequence: each feedline sample already is a whole batch."""
    return items[0]


def _keras_batch_rows(batch) -> int:
    """Samples in a Keras batch: the first dimension of its first array (1 if it holds none).

    >>> import numpy as np
    >>> _keras_batch_rows(({"image": np.zeros((32, 8))}, np.zeros(32)))
    32
    """
    stack = [batch]
    while stack:
        node = stack.pop(0)
        if isinstance(node, dict):
            stack[:0] = list(node.values())
        elif isinstance(node, (tuple, list)):
            stack[:0] = list(node)
        else:
            shape = getattr(node, "shape", None)
            if shape is not None and len(shape) >= 1 and shape[0] is not None:
                return int(shape[0])
    return 1


# stats() counts samples: each Keras batch holds many (read by the epoch iterator).
_one_keras_batch.rows_of = _keras_batch_rows


def _is_keras_class(klass) -> bool:
    return klass.__module__.split(".")[0] in _KERAS_MODULES


def _uses_zero_argument_super(namespace: dict) -> bool:
    for value in namespace.values():
        function = getattr(value, "__func__", value)
        for fn in (function, getattr(value, "fget", None), getattr(value, "fset", None)):
            code = getattr(fn, "__code__", None)
            if code is not None and "__class__" in code.co_freevars:
                return True
    return False


def _detach_from_keras(seq):
    """A copy of ``seq`` whose class does not inherit from Keras, when that is safe.

    A ``keras.utils.Sequence`` subclass pickles with a reference to Keras,
    so every worker would import Keras (and, on its default backend,
    TensorFlow): seconds of start-up and hundreds of MB per worker, for a
    ``__getitem__`` that usually needs only NumPy. The copy has the same
    methods and attributes on a plain class. It is not made (the original
    is sent) unless the class is plain Python classes on top of Keras ones,
    no method other than ``__init__`` uses zero-argument ``super()``, and no
    class uses ``__slots__``; Keras is then imported in the workers, which
    is slower but equally correct.
    """
    cls = type(seq)
    mro = cls.__mro__[:-1]  # without object
    keras_at = next((k for k, klass in enumerate(mro) if _is_keras_class(klass)), None)
    if keras_at is None or not hasattr(seq, "__dict__"):
        return seq  # nothing of Keras to detach, or nowhere to copy state from
    own, base = mro[:keras_at], mro[keras_at:]
    if not all(_is_keras_class(k) for k in base) or not all(type(k) is type for k in own):
        return seq  # another library's class in the mix, or a metaclass: keep the original
    namespace: dict = {}
    for klass in reversed(own):
        if "__slots__" in vars(klass):
            return seq
        namespace.update({k: v for k, v in vars(klass).items() if k not in _NOT_COPIED})
    if _uses_zero_argument_super(namespace):
        return seq
    shadow = type(cls.__name__, (object,), namespace)
    copy = object.__new__(shadow)
    copy.__dict__.update(vars(seq))
    return copy


class _CountedBatches:
    """A ``PyDataset`` that gives its length as ``num_batches`` only (Keras 3 allows that)."""

    def __init__(self, seq, count: int):
        self.seq, self.count = seq, count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index):
        return self.seq[index]


def _as_sequence(seq):
    if hasattr(seq, "__len__") or not hasattr(seq, "__getitem__"):
        return _detach_from_keras(seq)
    count = getattr(seq, "num_batches", None)
    if isinstance(count, bool) or not isinstance(count, int):
        raise TypeError(
            f"from_keras_sequence() needs a finite sequence: {type(seq).__name__} has no len() and its "
            f"num_batches is {count!r}. An endless PyDataset has no epochs; give it a __len__, or use "
            "fl.from_generator for a stream"
        )
    return _CountedBatches(_detach_from_keras(seq), count)


def from_keras_sequence(seq, *, shuffle: bool = True, seed: int | None = None, workers: int | None = None, backend: str | None = None, on_error="raise"):
    """A pipeline whose batches are the batches of a ``keras.utils.Sequence`` / ``PyDataset``.

    ``seq[i]`` (your ``__getitem__``) runs in feedline's workers, one batch
    per task, in parallel processes by default: real parallelism for
    CPU-bound Python, on every OS, with lambdas and closures, and without an
    ``if __name__ == "__main__":`` guard. Keras is not needed to call this.

    Args:
        seq: anything with ``len()`` (or a Keras ``num_batches``) and
            ``seq[i]`` returning a whole batch, e.g. ``(x, y)`` arrays.
        shuffle: visit batches in a new order each epoch (default), as
            Keras's ``fit`` does with a Sequence (its ``shuffle=True``
            default). Pass ``shuffle=False`` to keep ``seq``'s order: for a
            pipeline given to ``predict`` (whose outputs follow the batch
            order) or ``evaluate``, or when the order itself matters.
        seed: seed of that order: the same seed gives the same order every
            run; None draws one now (shown by ``print(pipe)``, kept in
            checkpoints).
        workers, backend, on_error: as for `Pipeline.map`; ``on_error``
            applies to a whole batch (``"skip"`` drops the batch).

    Returns:
        A `Pipeline` of ``len(seq)`` batches; train with
        ``model.fit(pipe.keras())``. Its ``stats()`` count samples as the
        rows of each batch (the first dimension of its first array).

    Raises:
        TypeError: ``seq`` has no ``[]``, or neither ``len()`` nor a
            ``num_batches`` count (an endless ``PyDataset``).

    The sequence is copied into each worker once, so its ``on_epoch_end``
    cannot change what the workers see; it is not called (a warning says
    so when your class defines one). The default ``shuffle=True`` gives a
    new order each epoch.

    >>> import numpy as np
    >>> class Batches:
    ...     def __len__(self):
    ...         return 3
    ...     def __getitem__(self, i):
    ...         return np.full((2, 1), i), np.array([i, i])
    >>> pipe = from_keras_sequence(Batches(), shuffle=False, backend="serial")
    >>> [int(y.sum()) for x, y in pipe]
    [0, 2, 4]
    >>> shuffled = from_keras_sequence(Batches(), seed=0, backend="serial")
    >>> sorted(int(y.sum()) for x, y in shuffled)  # every batch once, in a seeded order
    [0, 2, 4]
    """
    from ..sources._sequence import from_sequence  # here: a worker unpickling _one_keras_batch needs no facade

    _warn_about_epoch_hooks(seq)
    pipe = from_sequence(_as_sequence(seq))
    if shuffle:
        pipe = pipe.shuffle(seed)
    elif seed is not None:
        raise ValueError("from_keras_sequence(seed=...) only applies with shuffle=True (the default); drop seed= or shuffle=False")
    if workers is not None or backend is not None or on_error != "raise":
        pipe = pipe.map(_whole_batch, workers=workers, backend=backend, on_error=on_error)
    return pipe.batch(1, collate=_one_keras_batch)


def _whole_batch(batch):
    """The identity: carries map() settings (workers, backend, on_error) for a Sequence."""
    return batch


def _warn_about_epoch_hooks(seq) -> None:
    for klass in type(seq).__mro__:
        if _is_keras_class(klass) or klass is object:
            continue
        if "on_epoch_end" in vars(klass) or "on_epoch_begin" in vars(klass):
            warnings.warn(
                f"{type(seq).__name__} defines on_epoch_end/on_epoch_begin, which feedline does not call: "
                "each worker holds its own copy of the sequence, so state changed there would not reach "
                "them. The batch order changes each epoch (shuffle=True, the default) without it.",
                UserWarning,
                stacklevel=3,
            )
            return

