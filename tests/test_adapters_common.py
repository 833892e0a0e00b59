"""What all adapters share: even shards, lazy epochs, lazy imports, and their doctests."""

from __future__ import annotations

import doctest
import importlib
import subprocess
import sys

import numpy as np
import pytest

import feedline as fl


def steps(pipe) -> int:
    """Batches an adapter yields per epoch: the same on every rank of a sharded pipeline (the JAX one, as an example)."""
    pytest.importorskip("jax")
    return len(pipe.jax())


def epoch(pipe):
    """One epoch of ``pipe`` through an adapter, started lazily (at the first ``next()``), as NumPy arrays."""
    pytest.importorskip("jax")
    return (np.asarray(batch) for batch in pipe.jax())


@pytest.mark.parametrize(
    ("n", "count", "size", "drop", "expected"),
    [
        (96, 2, 8, False, 6),  # 48 each: 6 batches, nothing left out
        (97, 2, 8, False, 6),  # 49 and 48 samples: 7 and 6 batches -> 6
        (101, 2, 8, False, 7),  # 51 and 50: both 7 batches, every sample used
        (97, 2, 8, True, 6),  # 49 and 48: both 6 full batches
        (96, 2, 48, True, 1),
        (10, 3, 4, False, 1),  # 4, 3, 3 samples: 1 batch each
    ],
)
def test_every_rank_gets_the_batch_count_of_the_shortest(n, count, size, drop, expected):
    counts = [steps(fl.from_arrays(np.arange(n)).shuffle(seed=1).shard(r, count).batch(size, drop_remainder=drop)) for r in range(count)]
    assert counts == [expected] * count
    for r in range(count):
        pipe = fl.from_arrays(np.arange(n)).shuffle(seed=1).shard(r, count).batch(size, drop_remainder=drop)
        assert sum(1 for _ in epoch(pipe)) == expected


@pytest.mark.parametrize(("even", "expected"), [(None, 6), ("drop", 6), ("pad", 7)])
def test_the_core_even_modes_are_respected(even, expected):
    # 97 samples over 2 ranks, batches of 8: "drop" gives 48 each (6 batches),
    # "pad" 49 each (7 batches: padding must not be cut away), None 49/48 (6).
    counts = [steps(fl.from_arrays(np.arange(97)).shard(r, 2, even=even).batch(8)) for r in range(2)]
    assert counts == [expected, expected]


def test_nested_shards_take_the_floor_at_each_step():
    # 100 samples, sharded 3 ways (34/33/33), then each share 2 ways (17/17, 17/16, 17/16): 16 samples at least.
    pipe = fl.from_arrays(np.arange(100)).shard(0, 3).shard(0, 2).batch(4)
    assert steps(pipe) == 4
    assert len(pipe) == 5  # this rank alone has 17 samples


def test_unsharded_pipelines_have_no_even_count():
    pipe = fl.from_arrays(np.arange(10)).batch(3)
    assert steps(pipe) == 4 and sum(1 for _ in epoch(pipe)) == 4  # the last batch is short, not left out
    with pytest.raises(TypeError, match="unknown"):
        steps(fl.from_arrays(np.arange(10)).filter(bool).batch(3))
    one = fl.from_arrays(np.arange(10)).shard(0, 1).batch(3)
    assert steps(one) == 4 and sum(1 for _ in epoch(one)) == 4


def test_an_epoch_starts_only_when_its_first_batch_is_asked_for():
    pipe = fl.from_arrays(np.arange(10)).shuffle(seed=0).batch(5)
    unused = epoch(pipe)
    del unused  # created and dropped, as Keras does with the next epoch's iterator
    first = [b.tolist() for b in epoch(pipe)]
    assert first == [b.tolist() for b in fl.from_arrays(np.arange(10)).shuffle(seed=0).batch(5).epoch(0)]


def test_a_rank_that_runs_short_raises_instead_of_leaving_others_waiting():
    def fail_on_four(v):
        if v == 4:  # on rank 0 (even indices)
            raise ValueError("corrupt")
        return v

    pipe = fl.from_arrays(np.arange(16)).shard(0, 2).map(fail_on_four, on_error="skip", backend="serial").batch(2, drop_remainder=True)
    with pytest.warns(RuntimeWarning, match="skipped 1"), pytest.raises(fl.FeedlineError, match="every rank must take 4"):
        list(epoch(pipe))


@pytest.mark.parametrize("name", ["_common", "torch", "jax", "keras", "tf"])
def test_docstring_examples_run(name):
    module = importlib.import_module(f"feedline.adapters.{name}")
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0


def test_importing_feedline_imports_no_framework():
    script = "import sys, numpy as np, feedline as fl\nimport feedline.adapters.keras\nprint(sorted(m for m in ('torch', 'jax', 'tensorflow', 'keras') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
