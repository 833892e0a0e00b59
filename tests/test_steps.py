"""Steps: what each one does to an epoch, and the mistakes reported when a pipeline is built."""

from __future__ import annotations

import sys
import threading

import cloudpickle
import numpy as np
import pytest

import feedline as fl
from feedline import testing

N = 23

# Functions defined in this module travel to process workers by value, as a
# notebook's would; by reference, every worker would import this module (and
# pytest) before its first task.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def values(pipe) -> list[int]:
    """One epoch, flattened to a list of ints (batched or not)."""
    out = []
    for item in pipe:
        out.extend(int(v) for v in np.atleast_1d(np.asarray(item)))
    return out


def epochs(pipe, count: int) -> list[list[int]]:
    with pipe:
        return [values(pipe) for _ in range(count)]


# --------------------------------------------------------------------- shuffle
def test_shuffle_is_a_permutation_of_the_indices():
    [order] = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=3), 1)
    assert sorted(order) == list(range(N))
    assert order != list(range(N))


def test_shuffle_order_differs_between_epochs():
    first, second, third = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=3).batch(5), 3)
    assert sorted(first) == sorted(second) == sorted(third) == list(range(N))
    assert first != second and second != third and first != third


def test_shuffle_with_the_same_seed_gives_the_same_orders():
    a = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=11).batch(4), 3)
    b = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=11).batch(4), 3)
    assert a == b


def test_shuffle_with_different_seeds_gives_different_orders():
    a = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=1), 2)
    b = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=2), 2)
    assert a[0] != b[0] and a[1] != b[1]


def test_shuffle_without_a_seed_draws_one_and_shows_it():
    pipe = fl.from_arrays(np.arange(N)).shuffle()
    assert "shuffle(seed=" in repr(pipe)
    [order] = epochs(pipe, 1)
    assert sorted(order) == list(range(N))


@pytest.mark.parametrize("seed", [-1, 1.5, "7", True])
def test_shuffle_rejects_a_bad_seed(seed):
    with pytest.raises(ValueError, match="seed"):
        fl.from_arrays(np.arange(N)).shuffle(seed=seed)


# ----------------------------------------------------------------------- batch
def test_batch_sizes_end_with_the_remainder():
    with fl.from_arrays(np.arange(10)).batch(4) as pipe:
        batches = list(pipe)
    assert [len(b) for b in batches] == [4, 4, 2]
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_batch_drop_remainder_drops_the_short_last_batch(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(10)).map(lambda v: v, backend=backend, workers=2).batch(4, drop_remainder=True)
    with pipe:
        batches = list(pipe)
    assert [b.tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def pad(samples):
    """A custom collate: pads variable-length sequences into one array plus their lengths."""
    lengths = np.array([len(s) for s in samples])
    out = np.full((len(samples), lengths.max()), -1, dtype=np.int64)
    for row, s in zip(out, samples):
        row[: len(s)] = s
    return {"x": out, "length": lengths}


def test_batch_custom_collate_receives_the_list_of_samples(backend, no_leaks):
    data = [np.arange(i % 3 + 1) for i in range(5)]  # lengths 1, 2, 3, 1, 2
    pipe = fl.from_sequence(data).map(lambda s: s, backend=backend, workers=2).batch(3, collate=pad)
    with pipe:
        first, second = list(pipe)
    assert first["x"].tolist() == [[0, -1, -1], [0, 1, -1], [0, 1, 2]]
    assert first["length"].tolist() == [1, 2, 3]
    assert second["x"].tolist() == [[0, -1], [0, 1]]
    assert second["length"].tolist() == [1, 2]


def test_batch_custom_collate_may_return_a_plain_list(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(10)).map(lambda v: int(v), backend=backend, workers=2).batch(4, collate=list)
    with pipe:
        assert list(pipe) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_batch_custom_collate_may_return_a_summary_of_the_batch(backend, no_leaks):
    def summarise(samples):
        return {"total": np.array(sum(int(s) for s in samples)), "count": np.array(len(samples))}

    pipe = fl.from_arrays(np.arange(10)).map(lambda v: v, backend=backend, workers=2).batch(4, collate=summarise)
    with pipe:
        batches = list(pipe)
    assert [(int(b["total"]), int(b["count"])) for b in batches] == [(6, 4), (22, 4), (17, 2)]


def test_batch_stacks_dict_samples_into_a_dict_of_arrays(backend, no_leaks):
    data = [{"image": np.full((2, 3), i, dtype=np.uint8), "label": i % 2} for i in range(5)]
    pipe = fl.from_sequence(data).map(lambda s: s, backend=backend, workers=2).batch(3)
    with pipe:
        first, second = list(pipe)
    assert set(first) == {"image", "label"}
    assert first["image"].shape == (3, 2, 3) and first["image"].dtype == np.uint8
    assert first["image"][:, 0, 0].tolist() == [0, 1, 2]
    assert first["label"].tolist() == [0, 1, 0]
    assert second["image"].shape == (2, 2, 3) and second["label"].tolist() == [1, 0]


def test_batch_stacks_tuple_samples_into_a_tuple_of_arrays(backend, no_leaks):
    data = [(np.arange(3, dtype=np.float32) + i, i) for i in range(4)]
    pipe = fl.from_sequence(data).map(lambda s: s, backend=backend, workers=2).batch(4)
    with pipe:
        [(x, y)] = list(pipe)
    assert x.shape == (4, 3) and x.dtype == np.float32
    np.testing.assert_array_equal(x, np.arange(3) + np.arange(4)[:, None])
    assert y.tolist() == [0, 1, 2, 3]


def test_batch_keeps_non_array_leaves_as_lists():
    data = [(f"name{i}", np.int64(i)) for i in range(3)]
    with fl.from_sequence(data).batch(3) as pipe:
        [(names, numbers)] = list(pipe)
    assert names == ["name0", "name1", "name2"]
    assert numbers.tolist() == [0, 1, 2]


def test_batch_of_mismatched_shapes_raises_sample_error_naming_the_sample(backend, no_leaks):
    data = [np.zeros(3), np.zeros(3), np.zeros(4), np.zeros(3)]
    pipe = fl.from_sequence(data).map(lambda s: s, backend=backend, workers=2).batch(4)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 2
    assert "sample 2" in str(info.value)
    assert "(4,)" in str(info.value) and "(3,)" in str(info.value)


def test_batch_of_mismatched_structures_raises_sample_error_naming_the_sample():
    data = [(np.zeros(2), 1), (np.zeros(2), 1), {"x": np.zeros(2)}]
    with fl.from_sequence(data).batch(3) as pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 2
    assert "sample 2" in str(info.value)


# ---------------------------------------------------------------------- filter
def test_filter_keeps_the_samples_where_the_predicate_is_true(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda v: v, backend=backend, workers=2).filter(lambda v: v % 3 == 0).batch(3)
    with pipe:
        batches = [b.tolist() for b in pipe]
    assert batches == [[0, 3, 6], [9, 12, 15], [18, 21]]


def test_filter_before_map_sees_source_samples(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).filter(lambda v: v >= 20).map(lambda v: v * 10, backend=backend, workers=2)
    with pipe:
        assert values(pipe) == [200, 210, 220]


def test_filter_rejecting_everything_gives_an_empty_epoch(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda v: v, backend=backend, workers=2).filter(lambda v: False).batch(4)
    with pipe:
        assert list(pipe) == []


# ------------------------------------------------------------------- map_batch
def test_map_batch_applies_to_every_whole_batch(backend, no_leaks):
    pipe = (
        fl.from_arrays(np.arange(10))
        .map(lambda v: v, backend=backend, workers=2)
        .batch(4)
        .map_batch(lambda b: np.array([b.sum(), len(b)]))
    )
    with pipe:
        assert [b.tolist() for b in pipe] == [[6, 4], [22, 4], [17, 2]]


def test_map_batch_after_filter_sees_full_recut_batches(backend, no_leaks):
    pipe = (
        fl.from_arrays(np.arange(N))
        .map(lambda v: v, backend=backend, workers=2)
        .filter(lambda v: v % 2 == 0)
        .batch(5)
        .map_batch(lambda b: b * -1)
    )
    with pipe:
        batches = [b.tolist() for b in pipe]
    assert batches == [[0, -2, -4, -6, -8], [-10, -12, -14, -16, -18], [-20, -22]]


def test_map_batches_run_in_order():
    pipe = fl.from_arrays(np.arange(4)).batch(2).map_batch(lambda b: b + 1).map_batch(lambda b: b * 10)
    with pipe:
        assert [b.tolist() for b in pipe] == [[10, 20], [30, 40]]


# ----------------------------------------------------------------------- shard
@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shard_parts_are_disjoint_and_cover_the_epoch(count):
    parts = []
    for i in range(count):
        [part] = epochs(fl.from_arrays(np.arange(N)).shuffle(seed=4).shard(i, count).batch(3), 1)
        parts.append(part)
    assert sum(len(p) for p in parts) == N
    assert sorted(v for p in parts for v in p) == list(range(N))
    for i in range(count):
        for j in range(i + 1, count):
            assert not set(parts[i]) & set(parts[j])


def test_shard_parts_cover_every_epoch_of_a_shuffled_pipeline():
    for epoch in range(3):
        parts = []
        for i in range(2):
            with fl.from_arrays(np.arange(N)).shuffle(seed=9).shard(i, 2) as pipe:
                parts.append(values(pipe.epoch(epoch)))
        assert sorted(parts[0] + parts[1]) == list(range(N))


def test_shard_reads_rank_and_world_size_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    [from_env] = epochs(fl.from_arrays(np.arange(N)).shard(), 1)
    [explicit] = epochs(fl.from_arrays(np.arange(N)).shard(1, 3, even="drop"), 1)
    assert from_env == explicit == list(range(1, N // 3 * 3, 3))


@pytest.mark.parametrize("index, count", [(3, 3), (-1, 2), (0, 0), (1, None)])
def test_shard_rejects_bad_index_or_count(index, count):
    with pytest.raises(ValueError):
        fl.from_arrays(np.arange(N)).shard(index, count)


# -------------------------------------------------------------------- prefetch
def test_prefetch_depth_bounds_the_work_in_flight(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda v: v, backend=backend, workers=2).batch(2).prefetch(3)
    with pipe:
        assert values(pipe) == list(range(N))
        assert testing.runtime(pipe).depth == 3
        it = iter(pipe)
        next(it)
        assert testing.executor(pipe).outstanding() <= 3
        it.close()


@pytest.mark.parametrize("depth", [0, -2, 1.5])
def test_prefetch_rejects_a_bad_depth(depth):
    with pytest.raises(ValueError, match="prefetch"):
        fl.from_arrays(np.arange(N)).prefetch(depth)


# -------------------------------------------------------------------------- len
@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda p: p.batch(4), 6),
        (lambda p: p.batch(4, drop_remainder=True), 5),
        (lambda p: p.batch(23), 1),
        (lambda p: p, N),
        (lambda p: p.map(abs), N),
        (lambda p: p.shuffle(seed=0).shard(0, 2).batch(4), 3),
        (lambda p: p.shard(1, 2), 11),
    ],
    ids=["batch", "drop_remainder", "one_batch", "unbatched", "map", "shard", "shard_unbatched"],
)
def test_len_is_the_number_of_batches_per_epoch(build, expected):
    pipe = build(fl.from_arrays(np.arange(N)))
    assert len(pipe) == expected
    with pipe:
        assert len(list(pipe)) == expected


def test_len_after_filter_is_unknown():
    with pytest.raises(TypeError, match="filter"):
        len(fl.from_arrays(np.arange(N)).filter(bool).batch(4))


# ------------------------------------------------------------------- describing
def double(x):
    return 2 * x


def is_even(x):
    return x % 2 == 0


def test_print_shows_the_source_and_every_stage():
    pipe = (
        fl.from_arrays(np.arange(N))
        .shuffle(seed=42)
        .map(double, workers=2, backend="thread")
        .filter(is_even)
        .batch(4, drop_remainder=True)
        .map_batch(np.sort)
        .prefetch(3)
    )
    text = repr(pipe)
    lines = text.splitlines()
    assert lines[0].startswith("from_arrays")
    for expected in [
        "shuffle(seed=42)",
        "map(double",
        "backend='thread'",
        "workers=2",
        "filter(is_even)",
        "batch(4, drop_remainder=True)",
        "map_batch(sort)",
        "prefetch(3)",
    ]:
        assert expected in text, f"{expected!r} missing from:\n{text}"
    assert [line.strip().split("(")[0] for line in lines[1:]] == [
        ".shuffle",
        ".map",
        ".filter",
        ".batch",
        ".map_batch",
        ".prefetch",
    ]
    assert str(pipe) == text


def test_steps_return_new_pipelines_and_leave_the_original_unchanged():
    base = fl.from_arrays(np.arange(10))
    batched = base.batch(4)
    assert batched is not base
    with base, batched:
        assert values(base) == list(range(10))
        assert [len(b) for b in batched] == [4, 4, 2]
    assert len(base) == 10 and len(batched) == 3


# ----------------------------------------------------------- step-order errors
def test_map_after_batch_raises_and_points_to_map_batch():
    with pytest.raises(ValueError, match="map_batch"):
        fl.from_arrays(np.arange(N)).batch(4).map(lambda b: b)


def test_filter_after_batch_raises():
    with pytest.raises(ValueError, match="before batch"):
        fl.from_arrays(np.arange(N)).batch(4).filter(bool)


def test_map_batch_before_batch_raises():
    with pytest.raises(ValueError, match="batch"):
        fl.from_arrays(np.arange(N)).map_batch(lambda b: b)


@pytest.mark.parametrize("step", ["shuffle", "shard"])
def test_index_steps_after_batch_raise(step):
    pipe = fl.from_arrays(np.arange(N)).batch(4)
    with pytest.raises(ValueError, match="before batch"):
        pipe.shuffle(seed=0) if step == "shuffle" else pipe.shard(0, 2)


def test_batch_twice_raises():
    with pytest.raises(ValueError, match="twice"):
        fl.from_arrays(np.arange(N)).batch(4).batch(2)


def test_maps_asking_for_different_backends_raise():
    with pytest.raises(ValueError, match="backend"):
        fl.from_arrays(np.arange(N)).map(abs, backend="thread").map(abs, backend="process")


# ------------------------------------------------ bad arguments, before workers
@pytest.mark.parametrize("size", [0, -1, 2.5, None, True])
def test_batch_rejects_a_size_that_is_not_a_positive_integer(size):
    with pytest.raises(ValueError, match="batch"):
        fl.from_arrays(np.arange(N)).batch(size)


@pytest.mark.parametrize("workers", [0, -1])
def test_process_backend_rejects_fewer_than_one_worker(workers):
    with pytest.raises(ValueError, match="workers"):
        fl.from_arrays(np.arange(N)).map(abs, workers=workers, backend="process")


def test_thread_backend_rejects_zero_workers():
    with pytest.raises(ValueError, match="workers"):
        fl.from_arrays(np.arange(N)).map(abs, workers=0, backend="thread")


def test_unknown_backend_raises_listing_the_choices():
    with pytest.raises(ValueError, match="process"):
        fl.from_arrays(np.arange(N)).map(abs, backend="gpu")


@pytest.mark.parametrize("on_error", ["ignore", None, 3])
def test_bad_on_error_raises(on_error):
    with pytest.raises(ValueError, match="on_error"):
        fl.from_arrays(np.arange(N)).map(abs, on_error=on_error)


@pytest.mark.parametrize("method", ["map", "filter", "map_batch"])
def test_steps_reject_a_non_callable(method):
    pipe = fl.from_arrays(np.arange(N))
    if method == "map_batch":
        pipe = pipe.batch(2)
    with pytest.raises(TypeError, match=method):
        getattr(pipe, method)("not a function")


def test_from_sequence_rejects_a_non_indexable_object():
    with pytest.raises(TypeError, match="len"):
        fl.from_sequence(object())


def test_unpicklable_map_function_raises_before_any_worker_starts(no_leaks):
    lock = threading.Lock()

    def uses_lock(x):
        with lock:
            return x

    pipe = fl.from_arrays(np.arange(N)).map(uses_lock, backend="process", workers=2).batch(4)
    with pipe, pytest.raises(TypeError, match="uses_lock") as info:
        iter(pipe)
    assert "backend='thread'" in str(info.value)
    assert testing.runtime(pipe) is None, "a runtime (and its workers) was built for a pipeline that cannot be sent"


def test_map_does_not_pass_rng_into_a_defaulted_second_parameter():
    def load(path, size=3):
        return size

    assert list(fl.from_arrays(np.arange(3)).map(load, backend="serial")) == [3, 3, 3]


def test_map_passes_rng_to_a_parameter_named_rng_even_with_a_default():
    def augment(sample, rng=None):
        return rng is not None

    assert list(fl.from_arrays(np.arange(2)).map(augment, backend="serial")) == [True, True]


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_even_shards_give_every_rank_the_same_number_of_batches(even):
    parts = [list(fl.from_arrays(np.arange(101)).shuffle(seed=3).shard(i, 4, even=even).batch(8)) for i in range(4)]
    assert len({len(p) for p in parts}) == 1
    seen = np.concatenate([b for p in parts for b in p])
    if even == "drop":  # at most count - 1 samples left out, none twice
        assert len(seen) == 100 and len(set(seen.tolist())) == 100
    else:  # every sample, and count - 1 at most seen twice
        assert set(seen.tolist()) == set(range(101)) and len(seen) == 104


def test_shard_from_environment_is_even_by_default(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    pipe = fl.from_arrays(np.arange(10)).shard()
    assert "even='drop'" in repr(pipe)
    assert len(list(pipe)) == 3


def test_explicit_shard_is_an_exact_partition_by_default():
    parts = [sorted(int(v) for v in fl.from_arrays(np.arange(10)).shard(i, 3)) for i in range(3)]
    assert sorted(sum(parts, [])) == list(range(10))


def test_set_epoch_makes_the_next_iteration_that_epoch():
    pipe = fl.from_arrays(np.arange(20)).shuffle(seed=5).batch(5)
    expected = [b.tolist() for b in pipe.epoch(3)]
    pipe.set_epoch(3)
    assert [b.tolist() for b in pipe] == expected
    with pytest.raises(ValueError, match="set_epoch"):
        pipe.set_epoch(-1)
