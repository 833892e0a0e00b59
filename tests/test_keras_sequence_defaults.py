"""``from_keras_sequence`` matches Keras: a new batch order each epoch by default, and stats that count rows.

Keras's ``fit`` shuffles a ``PyDataset``'s batch order (``shuffle=True`` is
its default); a pipeline made from one did not, which changed training
silently. Its ``stats()`` counted each batch as one sample. Real Keras,
imported in this process on its default backend (fits run on it too).
"""

from __future__ import annotations

import numpy as np
import pytest

from feedline.adapters.keras import from_keras_sequence

keras = pytest.importorskip("keras")


def rows_class():
    """A real ``keras.utils.PyDataset``: 640 samples in 20 batches of 32; batch ``i`` is filled with ``i``.

    Defined in a function so that it travels to process workers by value:
    a class of this module would make each worker import the module, and
    with it Keras (and TensorFlow).
    """

    class Rows(keras.utils.PyDataset):
        def __init__(self, batches=20, size=32, **kwargs):
            super().__init__(**kwargs)
            self.batches, self.size = batches, size

        def __len__(self):
            return self.batches

        def __getitem__(self, i):
            return np.full((self.size, 3), i, np.float32), np.full((self.size, 1), i, np.float32)

    return Rows


Rows = rows_class()


def orders(pipe, epochs=2):
    return [[int(y[0, 0]) for _, y in pipe] for _ in range(epochs)]


def test_keras_fit_shuffles_a_pydataset_by_default_and_so_does_from_keras_sequence(backend, no_leaks):
    import inspect

    assert inspect.signature(keras.Model.fit).parameters["shuffle"].default is True  # what we match
    with from_keras_sequence(Rows(), backend=backend, workers=2) as pipe:
        first, second = orders(pipe)
    assert sorted(first) == sorted(second) == list(range(20))
    assert first != second and first != list(range(20)), "a new batch order each epoch"
    assert "shuffle(seed=" in repr(pipe), "the drawn seed is shown"


def test_keras_sequence_order_is_reproducible_with_a_seed_and_can_be_turned_off(backend, no_leaks):
    with from_keras_sequence(Rows(), seed=7, backend=backend, workers=2) as a:
        seeded = orders(a)
    with from_keras_sequence(Rows(), seed=7, backend="serial") as b:
        assert orders(b) == seeded
    with from_keras_sequence(Rows(), shuffle=False, backend=backend, workers=2) as c:
        assert orders(c) == [list(range(20))] * 2
    with pytest.raises(ValueError, match="shuffle=True"):
        from_keras_sequence(Rows(), shuffle=False, seed=1)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_keras_sequence_stats_count_rows_not_batches(backend, on_error, no_leaks):
    with from_keras_sequence(Rows(), backend=backend, workers=2, on_error=on_error) as pipe:
        assert sum(len(x) for x, _ in pipe) == 640
        stats = pipe.stats()
    assert (stats.batches, stats.samples) == (20, 640)
    assert "20 batches, 640 samples" in str(stats)


def test_keras_fit_on_a_sequence_counts_640_samples(no_leaks):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    with from_keras_sequence(Rows(), seed=0, backend="thread", workers=2) as pipe:
        model.fit(pipe.keras(), epochs=1, verbose=0)
        stats = pipe.stats()
    assert (stats.batches, stats.samples) == (20, 640)
