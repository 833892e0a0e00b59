"""``pipe.cache(path)``: written once, read ever after, never stale, never half-read."""

from __future__ import annotations

import os
import sys
import warnings

import cloudpickle
import numpy as np
import pytest

import feedline as fl

pytest.importorskip("pyarrow")

cloudpickle.register_pickle_by_value(sys.modules[__name__])

N = 37


def counted(calls_dir):
    """A map function that leaves one file per call, so calls are counted on any backend."""

    def decode(x):
        open(os.path.join(calls_dir, f"{int(x)}-{os.getpid()}-{np.random.randint(1 << 30)}"), "w").close()
        return {"image": np.full((4, 5, 3), x, np.uint8), "label": int(x) % 7}

    return decode


def calls(calls_dir) -> int:
    return len(os.listdir(calls_dir))


@pytest.fixture
def calls_dir(tmp_path):
    path = tmp_path / "calls"
    path.mkdir()
    return str(path)


def build(source, calls_dir, store, backend="serial"):
    return fl.from_arrays(source).map(counted(calls_dir), backend=backend, workers=None if backend == "serial" else 2).cache(store)


def test_first_pass_writes_the_store_and_later_runs_read_it(tmp_path, calls_dir, backend, no_leaks):
    store = str(tmp_path / "store")
    data = np.arange(N)
    pipe = build(data, calls_dir, store, backend).shuffle(seed=3).map(lambda s: s, backend=backend, workers=2 if backend != "serial" else None).batch(8)
    first = [b["label"].tolist() for b in pipe]
    pipe.close()
    assert calls(calls_dir) == N  # every sample decoded exactly once
    assert os.path.exists(os.path.join(store, "manifest.json"))
    # A new pipeline object from the same code (a later run) reads the store: no decode.
    again = build(data, calls_dir, store, backend).shuffle(seed=3).batch(8)
    second = [b["label"].tolist() for b in again]
    again.close()
    assert calls(calls_dir) == N
    assert second == first
    flat = [v for b in first for v in b]
    assert sorted(flat) == sorted(int(x) % 7 for x in data)


def test_cached_samples_equal_the_uncached_pipeline(tmp_path, calls_dir):
    data = np.arange(N)
    plain = fl.from_arrays(data).map(counted(calls_dir)).shuffle(seed=1).batch(5)
    cached = build(data, calls_dir, str(tmp_path / "s")).shuffle(seed=1).batch(5)
    for epoch in range(2):
        for a, b in zip(plain.epoch(epoch), cached.epoch(epoch), strict=True):
            np.testing.assert_array_equal(a["image"], b["image"])
            np.testing.assert_array_equal(a["label"], b["label"])


def test_epochs_after_the_first_do_not_recompute(tmp_path, calls_dir):
    pipe = build(np.arange(N), calls_dir, str(tmp_path / "s")).shuffle(seed=0).batch(10)
    orders = [[int(v) for b in pipe for v in b["image"][:, 0, 0, 0]] for _ in range(3)]
    assert calls(calls_dir) == N
    assert all(sorted(o) == list(range(N)) for o in orders)
    assert orders[0] != orders[1]  # still shuffled per epoch


def test_a_changed_step_rebuilds_with_a_warning(tmp_path, calls_dir):
    store = str(tmp_path / "s")
    list(fl.from_arrays(np.arange(N)).map(lambda x: x * 2).cache(store))
    with pytest.warns(UserWarning, match="different pipeline"):
        out = list(fl.from_arrays(np.arange(N)).map(lambda x: x * 3).cache(store))
    assert [int(v) for v in out] == [3 * i for i in range(N)]


def test_a_changed_source_rebuilds(tmp_path):
    store = str(tmp_path / "s")
    list(fl.from_arrays(np.arange(N)).cache(store))
    with pytest.warns(UserWarning, match="different pipeline"):
        out = list(fl.from_arrays(np.arange(N) + 100).cache(store))
    assert int(out[0]) == 100


def test_on_change_raise_refuses_a_stale_store(tmp_path):
    store = str(tmp_path / "s")
    list(fl.from_arrays(np.arange(N)).map(lambda x: x + 1).cache(store))
    pipe = fl.from_arrays(np.arange(N)).map(lambda x: x + 2).cache(store, on_change="raise")
    with pytest.raises(fl.FeedlineError, match="different pipeline.*on_change"):
        list(pipe)


def test_on_change_reuse_keeps_the_old_store(tmp_path):
    store = str(tmp_path / "s")
    list(fl.from_arrays(np.arange(N)).map(lambda x: x + 1).cache(store))
    with pytest.warns(UserWarning, match="reusing"):
        out = list(fl.from_arrays(np.arange(N)).map(lambda x: x + 2).cache(store, on_change="reuse"))
    assert int(out[0]) == 1


def test_an_interrupted_write_leaves_no_store(tmp_path):
    store = str(tmp_path / "s")

    def explode_midway(x):
        if int(x) == 20:
            raise KeyboardInterrupt
        return x

    with pytest.raises(KeyboardInterrupt):
        list(fl.from_arrays(np.arange(N)).map(explode_midway, backend="serial").cache(store))
    assert not os.path.exists(store)
    assert [p for p in os.listdir(tmp_path) if p.startswith("s")] == []  # no temporary directory left behind
    out = list(fl.from_arrays(np.arange(N)).map(lambda x: x, backend="serial").cache(store))
    assert [int(v) for v in out] == list(range(N))


def test_skipped_samples_are_left_out_of_the_cache(tmp_path):
    def fragile(x):
        if int(x) % 10 == 3:
            raise ValueError(f"corrupt sample {int(x)}")
        return x

    pipe = fl.from_arrays(np.arange(N)).map(fragile, on_error="skip").cache(str(tmp_path / "s")).batch(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        values = [int(v) for b in pipe for v in b]
    assert values == [i for i in range(N) if i % 10 != 3]
    assert len(pipe) == -(-len(values) // 4)


def test_variable_size_samples_round_trip(tmp_path):
    def ragged(i):
        return np.arange(int(i) + 1, dtype=np.float32), f"clip-{int(i)}"

    out = list(fl.from_sequence(range(9)).map(ragged).cache(str(tmp_path / "s")))
    for i, (array, name) in enumerate(out):
        np.testing.assert_array_equal(array, np.arange(i + 1, dtype=np.float32))
        assert name == f"clip-{i}"


def test_resume_mid_epoch_reads_the_cache(tmp_path, calls_dir):
    pipe = build(np.arange(N), calls_dir, str(tmp_path / "s")).shuffle(seed=5).batch(4)
    it = iter(pipe)
    head = [next(it)["label"].tolist() for _ in range(3)]
    state = it.state()
    rest = [b["label"].tolist() for b in it]
    again = build(np.arange(N), calls_dir, str(tmp_path / "s")).shuffle(seed=5).batch(4)
    resumed = [b["label"].tolist() for b in again.resume(state)]
    assert resumed == rest
    assert len(head) == 3
    assert calls(calls_dir) == N


def test_steps_that_belong_after_the_cache_are_refused_before_it(tmp_path):
    with pytest.raises(ValueError, match="shuffle.*after .cache"):
        fl.from_arrays(np.arange(4)).shuffle(seed=1).cache(str(tmp_path / "s"))
    with pytest.raises(ValueError, match="shard.*after .cache"):
        fl.from_arrays(np.arange(4)).shard(0, 2).cache(str(tmp_path / "s"))
    with pytest.raises(ValueError, match="batch"):
        fl.from_arrays(np.arange(4)).batch(2).cache(str(tmp_path / "s"))
    with pytest.raises(ValueError, match="on_change"):
        fl.from_arrays(np.arange(4)).cache(str(tmp_path / "s"), on_change="sometimes")


def test_random_augmentation_before_the_cache_is_warned_about(tmp_path):
    pipe = fl.from_arrays(np.arange(4)).map(lambda x, rng: x + rng.integers(10)).cache(str(tmp_path / "s"))
    with pytest.warns(UserWarning, match="frozen into the cache"):
        list(pipe)


def test_print_shows_the_cache_and_what_it_holds(tmp_path):
    pipe = fl.from_arrays(np.arange(4)).map(lambda x: x).cache(str(tmp_path / "s")).batch(2)
    assert "written on first use" in repr(pipe)
    list(pipe)
    assert "ready" in repr(pipe)


# ------------------------------------------------------------- fingerprints
def cache_fingerprint(fn, path="s", **options) -> str:
    """The fingerprint a cache of ``from_arrays(...).map(fn)`` records: what decides whether the store is still valid."""
    return fl.from_arrays(np.arange(4)).map(fn, **options).cache(str(path)).source.fingerprint()


def test_fingerprint_follows_helper_functions_and_captured_values():
    namespace = {"__name__": "user_code"}
    exec("def helper(x):\n    return x + 1\ndef decode(x):\n    return helper(x) * 2\n", namespace)
    before = cache_fingerprint(namespace["decode"])
    exec("def helper(x):\n    return x + 2\n", namespace)
    assert cache_fingerprint(namespace["decode"]) != before
    scale = 3
    f = lambda x: x * scale  # noqa: E731 - a lambda that captures a variable is the case under test
    captured = cache_fingerprint(f)
    scale = 4
    assert cache_fingerprint(f) != captured


def test_fingerprint_ignores_how_the_work_runs(tmp_path):
    def decode(x):
        return x

    one = cache_fingerprint(decode, tmp_path / "s", workers=1, backend="serial")
    assert cache_fingerprint(decode, tmp_path / "s", workers=2, backend="process") == one


def test_fingerprint_is_stable_across_interpreters(tmp_path):
    import subprocess

    code = (
        "import numpy as np, feedline as fl\n"
        "def decode(x):\n    return np.flip(x)\n"
        "print(fl.from_arrays(np.arange(8)).map(decode).cache('x').source.fingerprint())\n"
    )
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert len(runs) == 1


def test_shapes_that_vary_after_the_first_rows_need_variable_shape(tmp_path):
    def late_ragged(i):
        return {"clip": np.zeros(3 if int(i) < 300 else 5, np.float32)}

    source = fl.from_sequence(range(310)).map(late_ragged)
    with pytest.raises(fl.FeedlineError, match=r"cache\(path, variable_shape="):
        list(source.cache(str(tmp_path / "a")))
    assert not os.path.exists(tmp_path / "a")
    out = list(source.cache(str(tmp_path / "b"), variable_shape=["clip"]))
    assert [len(s["clip"]) for s in out[298:302]] == [3, 3, 5, 5]
