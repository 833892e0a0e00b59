"""The guarantees of issue 2, section 6, each checked on every backend.

Every test here runs on "serial", "thread" and "process" (the `backend`
fixture) and fails if it leaves a worker, thread or shared-memory segment
behind (`no_leaks`). Serial is the reference: the other backends must give
the same batches, bit for bit.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading
import time
import traceback
import warnings

import cloudpickle
import numpy as np
import pytest

import feedline as fl
from feedline import testing

N = 37  # not a multiple of any batch size used here, so every epoch ends with a remainder
WORKERS = 2

# Functions defined in this module travel to process workers by value, as a
# notebook's would; by reference, every worker would import this module (and
# pytest) before its first task.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# --------------------------------------------------------------------- helpers
def identity(pipe, backend, workers=WORKERS, **options):
    """``pipe.map(identity)`` on ``backend``: puts the per-sample work where the test wants it."""
    return pipe.map(lambda x: x, backend=backend, workers=workers, **options)


def indices(batches) -> list[int]:
    """The sample values of a list of batches (or of samples), flattened to ints."""
    return [int(v) for b in batches for v in np.atleast_1d(np.asarray(b))]


def run(pipe, epochs: int = 1) -> list[list]:
    """``epochs`` consecutive epochs of ``pipe``, each a list of batches; closes the pipeline."""
    with pipe:
        return [list(pipe) for _ in range(epochs)]


def assert_exactly_once(got: list[int], expected) -> None:
    expected = sorted(expected)
    duplicates = sorted({v for v in got if got.count(v) > 1})
    assert not duplicates, f"delivered more than once: {duplicates}"
    missing = sorted(set(expected) - set(got))
    assert not missing, f"never delivered: {missing}"
    assert sorted(got) == expected


def assert_same_batches(got: list, expected: list) -> None:
    """Bit-identical: same number of batches, same structure, dtypes and bytes."""
    assert len(got) == len(expected), f"{len(got)} batches, expected {len(expected)}"
    for number, (a, b) in enumerate(zip(got, expected)):
        a_leaves, b_leaves = _leaves(a), _leaves(b)
        assert len(a_leaves) == len(b_leaves), f"batch {number}: structure differs"
        for x, y in zip(a_leaves, b_leaves):
            x, y = np.asarray(x), np.asarray(y)
            assert x.dtype == y.dtype and x.shape == y.shape, f"batch {number}: {x.dtype}{x.shape} != {y.dtype}{y.shape}"
            assert x.tobytes() == y.tobytes(), f"batch {number} differs:\n{x}\n!=\n{y}"


def _leaves(tree) -> list:
    if isinstance(tree, (tuple, list)):
        return [leaf for v in tree for leaf in _leaves(v)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in _leaves(tree[k])]
    return [tree]


def augment(x, rng):
    """A random augmentation that uses the rng it is given (several draws, two kinds)."""
    x = np.asarray(x, dtype=np.float64)
    return x * rng.uniform(0.5, 1.5) + rng.standard_normal(x.shape)


def draw(x, rng):
    """The sample and the first number its rng gives."""
    return (int(x), float(rng.random()))


def fail_on(*bad):
    """A map function that raises ValueError on the samples in ``bad``."""
    bad = frozenset(bad)

    def explode_on_bad(x):
        if int(x) in bad:
            raise ValueError(f"cannot decode sample {int(x)}")
        return x

    return explode_on_bad


def shard_factory(shard: int, num_shards: int):
    """Shard ``s`` yields ``s * 1000 + k`` for ``k < 2 * s + 3``: unequal shard lengths."""
    for k in range(2 * shard + 3):
        yield np.int64(shard * 1000 + k)


def all_shard_items(num_shards: int) -> list[int]:
    return [s * 1000 + k for s in range(num_shards) for k in range(2 * s + 3)]


# ------------------------------------------------------------- exactly once
def test_every_index_exactly_once_per_epoch(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend).batch(5)
    for epoch in run(pipe, epochs=3):
        assert_exactly_once(indices(epoch), range(N))


def test_every_index_exactly_once_with_filter(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend).filter(lambda x: x % 4 != 1).batch(5)
    for epoch in run(pipe, epochs=2):
        assert_exactly_once(indices(epoch), [i for i in range(N) if i % 4 != 1])
        assert [len(b) for b in epoch[:-1]] == [5] * (len(epoch) - 1), "filtered batches are re-cut to full size"


@pytest.mark.parametrize("count", [2, 3])
def test_every_index_exactly_once_with_shard(backend, count, no_leaks):
    for epoch in range(2):
        parts = []
        for rank in range(count):
            pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5).shard(rank, count), backend).batch(4)
            with pipe:
                parts.append(indices(pipe.epoch(epoch)))
        for i in range(count):
            for j in range(i + 1, count):
                assert not set(parts[i]) & set(parts[j]), f"ranks {i} and {j} share samples"
        assert_exactly_once([v for part in parts for v in part], range(N))


def test_every_index_at_most_once_with_drop_remainder(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend).batch(5, drop_remainder=True)
    for epoch in run(pipe, epochs=2):
        assert [len(b) for b in epoch] == [5] * (N // 5)
        got = indices(epoch)
        assert len(set(got)) == len(got) == N - N % 5
        assert set(got) <= set(range(N))


def test_every_index_at_most_once_with_filter_and_drop_remainder(backend, no_leaks):
    kept = [i for i in range(N) if i % 3 != 0]  # 24 samples: 4 batches of 5, 4 dropped
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend).filter(lambda x: x % 3 != 0)
    pipe = pipe.batch(5, drop_remainder=True)
    for epoch in run(pipe, epochs=2):
        assert [len(b) for b in epoch] == [5] * (len(kept) // 5)
        got = indices(epoch)
        assert len(set(got)) == len(got) and set(got) <= set(kept)


@pytest.mark.parametrize("num_shards", [7, 1], ids=["more_shards_than_workers", "fewer_shards_than_workers"])
def test_every_generator_item_exactly_once(backend, num_shards, no_leaks):
    pipe = identity(fl.from_generator(shard_factory, num_shards).shuffle(seed=5), backend).batch(4)
    for epoch in run(pipe, epochs=2):
        assert_exactly_once(indices(epoch), all_shard_items(num_shards))


@pytest.mark.parametrize("num_shards", [7, 1], ids=["more_shards_than_workers", "fewer_shards_than_workers"])
def test_every_generator_item_exactly_once_unbatched(backend, num_shards, no_leaks):
    pipe = identity(fl.from_generator(shard_factory, num_shards), backend)
    for epoch in run(pipe, epochs=2):
        assert_exactly_once(indices(epoch), all_shard_items(num_shards))


def test_every_generator_item_exactly_once_with_filter(backend, no_leaks):
    pipe = identity(fl.from_generator(shard_factory, 5), backend).filter(lambda x: x % 2 == 0).batch(3)
    [epoch] = run(pipe)
    assert_exactly_once(indices(epoch), [v for v in all_shard_items(5) if v % 2 == 0])


def test_generator_shards_split_across_ranks_exactly_once(backend, no_leaks):
    parts = []
    for rank in range(2):
        pipe = identity(fl.from_generator(shard_factory, 5).shard(rank, 2), backend).batch(4)
        [epoch] = run(pipe)
        parts.append(indices(epoch))
    assert not set(parts[0]) & set(parts[1])
    assert_exactly_once(parts[0] + parts[1], all_shard_items(5))


# ------------------------------------------------- determinism and order
@pytest.fixture(scope="module")
def serial_reference():
    """Two epochs of the augmenting pipeline on the serial backend: the reference output."""
    x = np.arange(N * 3).reshape(N, 3)
    pipe = fl.from_arrays(x).shuffle(seed=7).map(augment, backend="serial").batch(6)
    return run(pipe, epochs=2)


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_output_is_bit_identical_to_serial(backend, workers, serial_reference, no_leaks):
    x = np.arange(N * 3).reshape(N, 3)
    pipe = fl.from_arrays(x).shuffle(seed=7).map(augment, backend=backend, workers=workers).batch(6)
    got = run(pipe, epochs=2)
    for epoch, reference in zip(got, serial_reference):
        assert_same_batches(epoch, reference)


@pytest.mark.parametrize("workers", [1, 3])
def test_output_with_filter_is_identical_to_serial(backend, workers, no_leaks):
    def build(backend, workers):
        return (
            fl.from_arrays(np.arange(N))
            .shuffle(seed=7)
            .filter(lambda x: x % 5 != 2)
            .map(draw, backend=backend, workers=workers)
            .batch(4)
            .map_batch(lambda b: (b[0] * 10, b[1]))
        )

    expected = run(build("serial", 1), epochs=2)
    got = run(build(backend, workers), epochs=2)
    for a, b in zip(got, expected):
        assert_same_batches(a, b)


@pytest.mark.parametrize("workers", [1, 3])
def test_generator_output_order_is_identical_to_serial(backend, workers, no_leaks):
    def build(backend, workers):
        return fl.from_generator(shard_factory, 6).shuffle(seed=7).map(lambda v: v, backend=backend, workers=workers).batch(3)

    expected = run(build("serial", 1), epochs=2)
    got = run(build(backend, workers), epochs=2)
    for a, b in zip(got, expected):
        assert_same_batches(a, b)


def test_unbatched_output_is_identical_to_serial(backend, no_leaks):
    def build(backend):
        return fl.from_arrays(np.arange(N * 2).reshape(N, 2)).shuffle(seed=7).map(augment, backend=backend, workers=WORKERS)

    [expected] = run(build("serial"))
    [got] = run(build(backend))
    assert_same_batches(got, expected)


def test_automatic_backend_gives_the_same_output_as_serial(no_leaks):
    x = np.arange(N * 3).reshape(N, 3)
    [expected] = run(fl.from_arrays(x).shuffle(seed=7).map(augment, backend="serial").batch(6))
    [got] = run(fl.from_arrays(x).shuffle(seed=7).map(augment).batch(6))
    assert_same_batches(got, expected)


def per_index_draws(batches) -> dict[int, float]:
    """``{index: first rng number}`` from batches of ``draw`` output (or unbatched samples)."""
    out = {}
    for b in batches:
        for i, v in zip(np.atleast_1d(b[0]), np.atleast_1d(b[1])):
            out[int(i)] = float(v)
    return out


def test_rng_depends_only_on_seed_epoch_and_index(backend, no_leaks):
    def draws(batch_size=None, shard=None, epoch=0):
        pipe = fl.from_arrays(np.arange(N)).shuffle(seed=3)
        if shard is not None:
            pipe = pipe.shard(*shard)
        pipe = pipe.map(draw, backend=backend, workers=WORKERS)
        if batch_size is not None:
            pipe = pipe.batch(batch_size)
        with pipe:
            return per_index_draws(pipe.epoch(epoch))

    reference = draws(batch_size=4)
    assert sorted(reference) == list(range(N))
    assert len(set(reference.values())) == N, "samples share an rng stream"
    assert draws(batch_size=7) == reference, "the batch size changed the augmentation"
    assert draws() == reference, "batching changed the augmentation"
    sharded = draws(batch_size=3, shard=(1, 3))
    assert len(sharded) == len(range(1, N, 3))
    assert sharded == {i: reference[i] for i in sharded}, "sharding changed the augmentation"
    next_epoch = draws(batch_size=4, epoch=1)
    assert sorted(next_epoch) == list(range(N))
    assert all(next_epoch[i] != reference[i] for i in range(N)), "the augmentation does not change between epochs"


def test_rng_is_the_same_on_every_backend_for_the_same_seed(backend, no_leaks):
    def draws(backend, seed):
        pipe = fl.from_arrays(np.arange(N)).shuffle(seed=seed).map(draw, backend=backend, workers=WORKERS).batch(5)
        with pipe:
            return per_index_draws(pipe)

    here = draws(backend, 3)
    assert here == draws("serial", 3)
    assert here != draws("serial", 4), "the seed does not reach the rng"


def test_epoch_k_reproduces_the_kth_iteration(backend, no_leaks):
    def build():
        return fl.from_arrays(np.arange(N)).shuffle(seed=2).map(augment, backend=backend, workers=WORKERS).batch(5)

    iterated = run(build(), epochs=3)
    with build() as pipe:
        assert_same_batches(list(pipe.epoch(2)), iterated[2])
        assert_same_batches(list(pipe.epoch(0)), iterated[0])
        assert_same_batches(list(iter(pipe)), iterated[1])  # iter(pipe) after epoch(0) is epoch 1


def test_epoch_iterator_reports_its_epoch(backend, no_leaks):
    with identity(fl.from_arrays(np.arange(N)), backend).batch(8) as pipe:
        assert [it.epoch for it in (iter(pipe), iter(pipe), pipe.epoch(7), iter(pipe))] == [0, 1, 7, 8]


# ------------------------------------------------------ persistent workers
def test_process_workers_persist_across_epochs(no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda x: os.getpid(), backend="process", workers=2).batch(2)
    with pipe:
        first = indices(list(pipe))
        executor = testing.executor(pipe)
        pids = executor.worker_pids()
        second = indices(list(pipe))
        third = indices(list(pipe))
        assert testing.executor(pipe) is executor
        assert executor.worker_pids() == pids
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert set(first) | set(second) | set(third) <= set(pids), "an epoch ran on processes other than the first epoch's workers"


def test_thread_workers_persist_across_epochs(no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda x: threading.get_ident(), backend="thread", workers=2).batch(2)
    with pipe:
        first = indices(list(pipe))
        executor = testing.executor(pipe)
        idents = {t.ident for t in executor.threads}
        second = indices(list(pipe))
        assert testing.executor(pipe) is executor
        assert {t.ident for t in executor.threads} == idents
        assert all(t.is_alive() for t in executor.threads)
    assert len(idents) == 2 and threading.get_ident() not in idents
    assert set(first) | set(second) <= idents


def test_serial_backend_runs_in_the_calling_thread(no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(lambda x: threading.get_ident(), backend="serial").batch(4)
    [epoch] = run(pipe)
    assert set(indices(epoch)) == {threading.get_ident()}


# ------------------------------------------------------------------- errors
def test_error_reaches_the_consumer_as_sample_error_naming_the_index(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(13), backend=backend, workers=WORKERS).batch(4)
    delivered = []
    with pipe, pytest.raises(fl.SampleError) as info:
        for batch in pipe:
            delivered.append(batch.tolist())
    error = info.value
    assert error.index == 13
    assert "sample 13" in str(error)
    assert "ValueError" in str(error) and "cannot decode sample 13" in str(error)
    assert delivered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], "batches before the failing one were lost or reordered"


def test_error_chains_the_original_exception_and_its_worker_traceback(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(13), backend=backend, workers=WORKERS).batch(4)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    cause = info.value.__cause__
    assert type(cause) is ValueError
    assert str(cause) == "cannot decode sample 13"
    text = "".join(traceback.format_exception(info.value))
    assert "explode_on_bad" in text, f"the worker's traceback is missing:\n{text}"
    assert 'raise ValueError(f"cannot decode sample {int(x)}")' in text


def test_error_of_a_user_defined_exception_class_keeps_its_type(backend, no_leaks):
    class CorruptSample(Exception):
        pass

    def decode(x):
        if int(x) == 6:
            raise CorruptSample("bad header")
        return x

    pipe = fl.from_arrays(np.arange(N)).map(decode, backend=backend, workers=WORKERS).batch(4)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 6
    assert isinstance(info.value.__cause__, CorruptSample)


def test_error_when_reading_a_file_names_the_file(backend, tmp_path, no_leaks):
    for name in ["a.txt", "b.txt", "c.txt"]:
        (tmp_path / name).write_text(name)
    pipe = fl.from_files(tmp_path).map(lambda p: pathlib.Path(p).read_text(), backend=backend, workers=WORKERS).batch(2)
    (tmp_path / "b.txt").unlink()
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 1
    assert info.value.where == str(tmp_path / "b.txt")
    assert str(tmp_path / "b.txt") in str(info.value)
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_error_in_the_source_names_the_index(backend, no_leaks):
    class Flaky:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 7:
                raise KeyError(i)
            return i

    pipe = fl.from_sequence(Flaky()).map(lambda x: x, backend=backend, workers=WORKERS).batch(3)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 7
    assert isinstance(info.value.__cause__, KeyError)


def test_error_in_a_generator_shard_names_the_shard_and_item(backend, no_leaks):
    def factory(shard, num_shards):
        for k in range(6):
            if shard == 1 and k == 3:
                raise OSError("truncated shard")
            yield shard * 100 + k

    pipe = fl.from_generator(factory, 3).map(lambda v: v, backend=backend, workers=WORKERS).batch(2)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == (1, 3)
    assert "shard 1" in str(info.value)
    assert isinstance(info.value.__cause__, OSError)


def test_error_in_a_filter_predicate_is_a_sample_error(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).filter(lambda x: 1 // (int(x) - 8) < 1).batch(4)
    with pipe, pytest.raises(fl.SampleError) as info:
        list(pipe)
    assert info.value.index == 8
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_pipeline_can_be_closed_and_iterated_again_after_an_error(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(13), backend=backend, workers=WORKERS).batch(4)
    for attempt in range(2):
        delivered = []
        with pytest.raises(fl.SampleError) as info:
            for batch in pipe:
                delivered.append(batch.tolist())
        assert info.value.index == 13
        assert delivered == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], f"attempt {attempt}"
        pipe.close()


def test_pipeline_can_be_iterated_again_after_an_error_without_closing(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(30), backend=backend, workers=WORKERS).batch(4)
    with pipe:
        for _ in range(2):
            delivered = []
            with pytest.raises(fl.SampleError):
                for batch in pipe:
                    delivered.append(batch.tolist())
            assert indices(delivered) == list(range(28))


def test_skip_drops_the_failing_samples_and_counts_them(backend, no_leaks):
    bad = (5, 13, 30)
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(*bad), backend=backend, workers=WORKERS, on_error="skip").batch(4)
    with pipe:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            batches = list(pipe)
        stats = pipe.stats().as_dict()
    assert indices(batches) == [i for i in range(N) if i not in bad]
    assert [len(b) for b in batches] == [4] * 8 + [2], "skipped samples left short batches"
    assert sorted(stats["skipped_indices"]) == list(bad)
    assert stats["skipped"] == 3


def test_skip_warns_once_per_epoch(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(5, 13, 30), backend=backend, workers=WORKERS, on_error="skip").batch(4)
    with pipe:
        for epoch in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                list(pipe)
            ours = [w for w in caught if issubclass(w.category, RuntimeWarning) and "skipped" in str(w.message)]
            assert len(ours) == 1, f"epoch {epoch}: {[str(w.message) for w in caught]}"
            assert "3 samples" in str(ours[0].message) and f"epoch {epoch}" in str(ours[0].message)
            assert sorted(pipe.stats().as_dict()["skipped_indices"]) == [5, 13, 30], "skips were not counted per epoch"


def test_skip_without_failures_does_not_warn(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(), backend=backend, workers=WORKERS, on_error="skip").batch(4)
    with pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            assert indices(list(pipe)) == list(range(N))
        assert pipe.stats().as_dict()["skipped_indices"] == []


def test_skip_with_unordered_output_drops_and_counts(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(5, 13), backend=backend, workers=WORKERS, on_error="skip", ordered=False)
    with pipe:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got = indices(list(pipe))
        assert sorted(pipe.stats().as_dict()["skipped_indices"]) == [5, 13]
    assert_exactly_once(got, [i for i in range(N) if i not in (5, 13)])


def test_on_error_callable_supplies_a_replacement(backend, no_leaks):
    def replace(index, error):
        return -1000 - index if isinstance(error, ValueError) else None

    pipe = fl.from_arrays(np.arange(N)).shuffle(seed=1).map(fail_on(5, 13), backend=backend, workers=WORKERS, on_error=replace)
    pipe = pipe.batch(4)
    with pipe:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            got = indices(list(pipe))
        assert pipe.stats().as_dict()["skipped_indices"] == []
    assert sorted(got) == sorted([i for i in range(N) if i not in (5, 13)] + [-1005, -1013])


# -------------------------------------------------------------------- leaks
def test_no_leaks_after_close(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).batch(4)
    it = iter(pipe)
    next(it)  # mid-epoch, with work in flight
    pipe.close()


def consume_within(iterator, seconds: float = 5.0) -> list:
    """``list(iterator)``, failing (instead of hanging the run) if it takes longer than ``seconds``."""
    outcome = {}

    def consume():
        try:
            outcome["items"] = list(iterator)
        except Exception as exc:  # noqa: BLE001 - re-raised in the test's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=consume, name="test-consumer", daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"iterating hung for {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["items"]


def test_iterator_used_after_close_raises_instead_of_hanging(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).batch(4)
    it = iter(pipe)
    next(it)
    pipe.close()
    with pytest.raises(fl.FeedlineError, match="closed"):
        consume_within(it)


def test_new_epoch_supersedes_an_unfinished_one(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend).batch(4)
    with pipe:
        old = iter(pipe)
        next(old)  # work of epoch 0 is in flight
        new = iter(pipe)
        assert_exactly_once(indices(consume_within(new)), range(N))
        with pytest.raises(fl.FeedlineError, match="superseded"):
            next(old)
        assert_exactly_once(indices(consume_within(iter(pipe))), range(N))


def test_close_is_idempotent_and_the_pipeline_restarts_when_iterated(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).batch(4)
    assert indices(list(pipe)) == list(range(N))
    pipe.close()
    pipe.close()
    assert indices(list(pipe)) == list(range(N))
    pipe.close()


def test_no_leaks_after_an_exception_in_the_consumer(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).batch(4)
    with pytest.raises(RuntimeError, match="training step failed"), pipe:
        for _ in pipe:
            raise RuntimeError("training step failed")


def test_no_leaks_after_a_sample_error_without_close(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(N)).map(fail_on(9), backend=backend, workers=WORKERS).batch(4)
    with pytest.raises(fl.SampleError):
        list(pipe)
    del pipe


def test_no_leaks_after_del_without_close(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N * 1000).reshape(N, 1000)), backend).batch(4)
    it = iter(pipe)
    next(it)  # mid-epoch
    del it, pipe


def test_no_leaks_after_del_of_a_finished_pipeline(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend).batch(4)
    assert indices(list(pipe)) == list(range(N))
    del pipe


SCRIPT = """\
import os
import pathlib
import numpy as np
import feedline as fl
from feedline import testing

def scale(x, rng):
    return x * 2 + rng.integers(0, 1, size=x.shape)

pipe = fl.from_arrays(np.arange(4000).reshape(400, 10)).map(scale, backend="process", workers=2).batch(8)
it = iter(pipe)
first = next(it)
print(os.getpid(), *testing.worker_pids(pipe), flush=True)
print(*first[0].tolist(), flush=True)
"""  # no `if __name__ == "__main__":` guard, no close(), and the epoch is left unfinished


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.parametrize("how", ["script", "stdin"])
def test_no_leaks_when_the_interpreter_exits_without_close(how, tmp_path):
    if how == "script":
        path = tmp_path / "train.py"
        path.write_text(SCRIPT)
        done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=90, check=False)
    else:  # like a notebook: the map function is defined interactively, in __main__
        done = subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, timeout=90, check=False)
    assert done.returncode == 0, done.stderr
    pids_line, first_row = done.stdout.splitlines()
    consumer, *workers = (int(p) for p in pids_line.split())
    assert first_row.split() == [str(2 * v) for v in range(10)]
    assert len(workers) == 2
    deadline = time.monotonic() + 10
    while True:
        segments = [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{consumer}_")]
        alive = [p for p in workers if not _gone(p)]
        if not segments and not alive or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not segments, f"shared-memory segments left behind: {segments}"
    assert not alive, f"worker processes left behind: {alive}"
    assert "Traceback" not in done.stderr, done.stderr


# ---------------------------------------------------- unordered, unbatched
def test_unordered_output_delivers_every_index_exactly_once(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)).shuffle(seed=5), backend, ordered=False).batch(4)
    for epoch in run(pipe, epochs=2):
        assert_exactly_once(indices(epoch), range(N))


def test_unordered_output_with_filter_delivers_every_kept_index_exactly_once(backend, no_leaks):
    pipe = identity(fl.from_arrays(np.arange(N)), backend, ordered=False).filter(lambda x: x % 3 != 0).batch(4)
    [epoch] = run(pipe)
    assert_exactly_once(indices(epoch), [i for i in range(N) if i % 3 != 0])


def test_unordered_generator_output_delivers_every_item_exactly_once(backend, no_leaks):
    pipe = identity(fl.from_generator(shard_factory, 5), backend, ordered=False).batch(3)
    [epoch] = run(pipe)
    assert_exactly_once(indices(epoch), all_shard_items(5))


def test_unbatched_pipeline_yields_samples_one_by_one(backend, no_leaks):
    x = np.arange(N * 2).reshape(N, 2)
    pipe = fl.from_arrays(x).map(lambda r: r * 2, backend=backend, workers=WORKERS)
    [samples] = run(pipe)
    assert len(samples) == N
    for i, sample in enumerate(samples):
        assert isinstance(sample, np.ndarray) and sample.shape == (2,)
        np.testing.assert_array_equal(sample, x[i] * 2)


def test_unbatched_pipeline_yields_tuple_samples_one_by_one(backend, no_leaks):
    x, y = np.arange(N * 2).reshape(N, 2), np.arange(N) % 3
    pipe = fl.from_arrays(x, y).map(lambda s: (s[0], int(s[1])), backend=backend, workers=WORKERS)
    [samples] = run(pipe)
    assert len(samples) == N
    assert all(isinstance(s, tuple) and len(s) == 2 for s in samples)
    assert [s[1] for s in samples] == (np.arange(N) % 3).tolist()
    np.testing.assert_array_equal(np.stack([s[0] for s in samples]), x)
