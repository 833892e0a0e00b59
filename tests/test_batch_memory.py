"""Large batch arrays are used again once nobody holds them, and never while someone does."""

import gc
import weakref

import numpy as np
import pytest

import feedline as fl
from feedline import testing
from feedline._batch_memory import KEEP, NewArrays
from feedline.store import StoreWriter


@pytest.fixture
def reuse_everything():
    """Every batch array counts as large, so small test data goes through the pool."""
    with testing.mechanism_policy(reuse_arrays_from=1):
        yield


def images(n=96):
    return np.random.default_rng(0).integers(0, 255, (n, 3, 8, 8), dtype=np.uint8)


def store_of(path, x):
    with StoreWriter(path) as w:
        w.write({"x": x, "i": np.arange(len(x))})
    return fl.from_store(path)


@pytest.mark.parametrize("source", ["arrays", "store"])
@pytest.mark.parametrize("backend", [None, "thread", "serial"])
def test_a_kept_batch_is_never_written_again(tmp_path, reuse_everything, source, backend, no_leaks):
    x = images()
    pipe = fl.from_arrays({"x": x, "i": np.arange(len(x))}) if source == "arrays" else store_of(tmp_path / "s", x)
    if backend is not None:
        pipe = pipe.map(lambda s: s, backend=backend, workers=3)
    with pipe.shuffle(seed=1).batch(8) as pipe:
        for _ in range(2):  # the second epoch runs while every batch of the first is still held
            kept = list(pipe)
            for batch in kept:
                np.testing.assert_array_equal(batch["x"], x[batch["i"]])
            assert sorted(np.concatenate([b["i"] for b in kept]).tolist()) == list(range(len(x)))


def test_batches_the_consumer_lets_go_are_handed_out_again(reuse_everything, no_leaks):
    x = images()
    handed_out = []
    with fl.from_arrays(x).shuffle(seed=2).batch(8) as pipe:
        for batch in pipe:  # each batch dropped at the next step
            handed_out.append(weakref.ref(batch))
    gc.collect()
    alive = {id(ref()) for ref in handed_out if ref() is not None}
    # The pool holds what it handed out, and it handed out a few arrays many times (12 batches).
    assert 0 < len(alive) <= KEEP and len(alive) < len(handed_out)


def test_an_array_is_reused_only_when_its_pool_holds_the_last_reference():
    arrays = NewArrays(reuse_from=1)
    first = arrays.array((4, 4), np.float32)
    view = first[1:]
    del first
    second = arrays.array((4, 4), np.float32)
    assert second is not view.base  # a view holds the first one: a new array
    second_id = id(second)
    del second
    assert id(arrays.array((4, 4), np.float32)) == second_id  # nobody held it: the same array again
    assert arrays.array((4, 4), np.float64).dtype == np.float64  # each shape and dtype has its own arrays


def test_small_arrays_are_always_new():
    arrays = NewArrays(reuse_from=1 << 20)
    for _ in range(3):
        assert arrays.array((8,), np.uint8).shape == (8,)
    assert not arrays.reuses(8) and arrays.reuses(1 << 20)
    assert arrays._pools == {}  # nothing kept
