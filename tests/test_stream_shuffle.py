"""``shuffle(seed, window=N)``: a bounded, seeded shuffle of a generator's samples (issue 16).

Generator sources stream their shards, so ``shuffle(seed)`` alone can only
reorder shards (the first batch of 4 shards is 0, 4, 8, ...). With
``window=N`` the consumer keeps N samples and hands out one drawn from
``(seed, epoch)`` as each new one arrives. These tests check the mixing,
exactly-once delivery, the same order for every backend and worker count,
exact resumption after every batch, the memory bound, and the errors.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import feedline as fl


def stride(total: int):
    """Shard ``s`` of ``n`` yields s, s + n, s + 2n, ... below ``total``."""

    def factory(shard, num_shards):
        yield from range(shard, total, num_shards)

    return factory


def values(batches) -> list:
    """Every sample of an epoch, in delivery order."""
    out = []
    for b in batches:
        out += np.asarray(b).reshape(-1).tolist()
    return out


def windowed(total=200, shards=4, window=32, seed=7, size=8, backend="serial", workers=1, **batch):
    pipe = fl.from_generator(stride(total), shards).shuffle(seed=seed, window=window)
    pipe = pipe.map(lambda v: v, backend=backend, workers=workers)
    return pipe.batch(size, **batch) if size else pipe


def epoch_lists(pipe, epoch=0) -> list:
    with pipe:
        return [np.asarray(b).tolist() for b in pipe.epoch(epoch)]


# ------------------------------------------------------------------- mixing
def test_window_mixes_samples_within_and_across_shards(no_leaks):
    plain = epoch_lists(fl.from_generator(stride(200), 4).shuffle(seed=7).batch(8))
    shard = plain[0][0] % 4
    assert plain[0] == list(range(shard, shard + 32, 4)), "without window=, a batch is a run of one shard"
    mixed = epoch_lists(windowed())
    first = mixed[0]
    assert first != sorted(first), "samples come out of their stream order"
    assert len({v % 4 for v in first}) > 1, "a batch mixes shards"
    single = epoch_lists(windowed(shards=1))
    assert single[0] != list(range(8)), "one shard's samples are mixed among themselves"


@pytest.mark.parametrize("window", [1, 16, 100])
def test_a_sample_comes_out_at_most_n_minus_1_places_ahead_of_its_arrival(window, no_leaks):
    # One shard, so a sample's value is its arrival position: output p holds an arrival <= p + window - 1.
    out = values(epoch_lists(windowed(total=300, shards=1, window=window)))
    assert all(v <= p + window - 1 for p, v in enumerate(out[: 300 - window])), "a buffer of N rows cannot look further"
    if window == 1:
        assert out == list(range(300)), "a window of one sample keeps the stream order"
    else:
        assert max(v - p for p, v in enumerate(out)) > window // 2, "the buffer is used"


# ------------------------------------------------------------- exactly once
@pytest.mark.parametrize("window,size", [(1, 8), (7, 8), (64, 5), (1000, 8), (33, None)])
def test_every_sample_arrives_exactly_once(window, size, no_leaks):
    got = values(epoch_lists(windowed(total=203, shards=3, window=window, size=size)))
    assert sorted(got) == list(range(203))


def test_drop_remainder_drops_less_than_one_batch(no_leaks):
    got = epoch_lists(windowed(total=203, window=50, drop_remainder=True))
    assert [len(b) for b in got] == [8] * 25
    assert len(set(values(got))) == 200


# ------------------------------------------------------------- determinism
@pytest.mark.parametrize("workers", [1, 8])
def test_same_order_on_every_backend_and_worker_count(backend, workers, no_leaks):
    reference = epoch_lists(windowed(total=300, shards=5, window=40))
    assert epoch_lists(windowed(total=300, shards=5, window=40, backend=backend, workers=workers)) == reference
    # filter() drops samples in the workers: the rows that reach the window are still in plan order.
    keep = fl.from_generator(stride(300), 5).shuffle(seed=3, window=40).filter(lambda v: v % 3 != 0)
    serial = epoch_lists(keep.map(lambda v: v, backend="serial").batch(8))
    assert epoch_lists(keep.map(lambda v: v, backend=backend, workers=workers).batch(8)) == serial
    assert sorted(values(serial)) == [v for v in range(300) if v % 3 != 0]


def test_order_differs_per_epoch_and_per_seed_and_repeats_for_both(no_leaks):
    with windowed(seed=7) as pipe:
        first, second = [values(pipe.epoch(k)) for k in (0, 1)]
        again = values(pipe.epoch(0))
    other = values(windowed(seed=8).epoch(0))
    assert first == again
    assert first != second and first != other
    assert sorted(first) == sorted(second) == sorted(other) == list(range(200))


# --------------------------------------------------------------- resumption
@pytest.mark.parametrize("size", [8, None])
def test_resume_after_every_batch_gives_exactly_the_rest(backend, size, no_leaks):
    total = 90 if size else 40
    build = lambda: windowed(total=total, shards=3, window=20, size=size, backend=backend, workers=2)  # noqa: E731
    with build() as pipe:
        whole = [np.asarray(b).tolist() for b in pipe.epoch(1)]
        for stop in range(len(whole) + 1):
            it = pipe.epoch(1)
            head = [np.asarray(next(it)).tolist() for _ in range(stop)]
            state = json.loads(json.dumps(it.state()))  # a checkpoint goes through JSON
            it.close()
            tail = [np.asarray(b).tolist() for b in pipe.resume(state)]
            assert head + tail == whole, f"resumed after batch {stop}: {state}"
    with build() as fresh:  # another pipeline object (a restarted job) resumes the same way
        it = fresh.epoch(1)
        head = [np.asarray(next(it)).tolist() for _ in range(3)]
        state = it.state()
        it.close()
    with build() as restarted:
        assert head + [np.asarray(b).tolist() for b in restarted.resume(state)] == whole


def test_resume_with_filter_and_map_batch(no_leaks):
    build = lambda: (fl.from_generator(stride(150), 4).shuffle(seed=1, window=25)  # noqa: E731
                     .filter(lambda v: v % 5 != 0).batch(6).map_batch(lambda b: b * 10))
    with build() as pipe:
        whole = [b.tolist() for b in pipe.epoch(0)]
        assert sorted(values(whole)) == [10 * v for v in range(150) if v % 5 != 0]
        for stop in (0, 3, 11, len(whole) - 1, len(whole)):
            it = pipe.epoch(0)
            head = [next(it).tolist() for _ in range(stop)]
            state = it.state()
            it.close()
            assert head + [b.tolist() for b in pipe.resume(state)] == whole


# ------------------------------------------------------------------- memory
@pytest.mark.parametrize("window", [5, 64])
def test_window_holds_at_most_n_samples(window, no_leaks):
    with windowed(total=500, window=window) as pipe:
        it = pipe.epoch(0)
        assert it.stats().window_peak == 0
        seen = [it.stats().window_peak for _ in it]
        assert max(seen) == it.stats().window_peak == window, "the buffer fills to N and never goes past it"
        assert "shuffle window" in it.stats().consumer_seconds, "the consumer's time in the window is profiled"
    with fl.from_generator(stride(50), 2).shuffle(seed=0).batch(8) as plain:
        it = plain.epoch(0)
        list(it)
        assert it.stats().window_peak == 0


def mapped_segments() -> int:
    """Shared-memory segments this process maps (batch slots of process workers)."""
    with open("/proc/self/maps") as f:
        return len({line.split(None, 5)[-1] for line in f if "feedline_" in line})


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="counts mappings through /proc")
def test_held_samples_do_not_pin_worker_batches(no_leaks):
    # A sample held by the window is a copy: were it a view, each held sample would keep its
    # worker's whole batch slot mapped (hundreds of slots for a window of 2000 and batches of 4).
    def factory(shard, num_shards):
        for i in range(shard, 2400, num_shards):
            yield {"x": np.full(64, i, dtype=np.float32), "name": str(i)}  # strings: samples held one by one

    def numbers(shard, num_shards):
        for i in range(shard, 2400, num_shards):
            yield np.full(64, i, dtype=np.float32)  # arrays only: samples held as columns

    for source in (fl.from_generator(factory, 4), fl.from_generator(numbers, 4)):
        with source.shuffle(seed=0, window=2000).map(lambda v: v, backend="process", workers=2).batch(4) as pipe:
            peak = max(mapped_segments() for _ in pipe)
        assert peak < 40, f"{peak} worker slots stayed mapped"


def test_nested_samples_keep_their_fields_together(no_leaks):
    def factory(shard, num_shards):
        for i in range(shard, 60, num_shards):
            yield {"x": np.full(3, i, dtype=np.float32), "name": f"item-{i}", "label": i}

    with fl.from_generator(factory, 3).shuffle(seed=2, window=10).batch(7) as pipe:
        batches = list(pipe)
    names = [n for b in batches for n in b["name"]]
    assert sorted(names, key=lambda n: int(n[5:])) == [f"item-{i}" for i in range(60)]
    for b in batches:
        assert b["x"].shape == (len(b["name"]), 3)
        assert b["x"][:, 0].tolist() == b["label"].tolist() == [int(n[5:]) for n in b["name"]]


def test_a_field_that_changes_kind_midway_is_batched_like_the_recut_does(no_leaks):
    # Numbers are held as columns until a piece holds a string: from then on rows are kept one by one.
    def factory(shard, num_shards):
        for i in range(shard, 120, num_shards):
            yield {"v": i, "tag": "seventy" if i == 70 else float(i)}

    build = lambda: fl.from_generator(factory, 3).shuffle(seed=4, window=20).batch(8)  # noqa: E731
    with build() as pipe:
        batches = list(pipe.epoch(0))
        assert sorted(int(v) for b in batches for v in b["v"]) == list(range(120))
        for b in batches:
            assert [t if isinstance(t, str) else float(t) for t in b["tag"]] == ["seventy" if v == 70 else float(v) for v in b["v"]]
            assert isinstance(b["tag"], list) == (70 in b["v"].tolist()), "only the batch with the string holds a list"
        whole = [b["v"].tolist() for b in batches]
        for stop in range(len(whole) + 1):
            it = pipe.epoch(0)
            head = [next(it)["v"].tolist() for _ in range(stop)]
            state = it.state()
            it.close()
            assert head + [b["v"].tolist() for b in pipe.resume(state)] == whole


def test_a_none_among_numbers_in_a_window_is_refused_naming_the_field(no_leaks):
    # a None batches the same way wherever it falls: refused by name, never a list in one batch and an error in another
    def factory(shard, num_shards):
        for i in range(shard, 120, num_shards):
            yield {"v": i, "tag": None if i == 70 else float(i)}

    with fl.from_generator(factory, 3).shuffle(seed=4, window=20).batch(8) as pipe:
        with pytest.raises(fl.SampleError, match=r"field \['tag'\] is None"):
            list(pipe.epoch(0))


# ------------------------------------------------------------------- errors
def test_samples_that_cannot_batch_together_are_named(backend, no_leaks):
    def factory(shard, num_shards):
        for _ in range(shard, 60, num_shards):
            yield np.zeros(4 if shard == 2 else 3)

    pipe = fl.from_generator(factory, 3).shuffle(seed=4, window=10).map(lambda v: v, backend=backend).batch(8)
    with pipe, pytest.raises(fl.SampleError, match=r"cannot batch sample \(\d, \d+\).*shape \(4,\)"):
        list(pipe)

@pytest.mark.parametrize("bad", [0, -3, True, 2.5, "64"])
def test_bad_window_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"shuffle\(window=\.\.\.\) must be an integer >= 1"):
        fl.from_generator(stride(10), 2).shuffle(seed=0, window=bad)


def test_window_on_an_indexed_source_says_it_is_already_global():
    with pytest.raises(ValueError, match=r"already permutes the whole epoch.*Drop window="):
        fl.from_arrays(np.arange(10)).shuffle(seed=0, window=4).batch(2)


def test_window_misplaced_or_twice_is_refused():
    stream = fl.from_generator(stride(10), 2)
    with pytest.raises(ValueError, match=r"shuffle\(\) must come before batch\(\)"):
        stream.batch(2).shuffle(seed=0, window=4)
    with pytest.raises(ValueError, match="appears twice"):
        stream.shuffle(seed=0, window=4).shuffle(seed=1, window=8)
    with pytest.raises(ValueError, match="padded_batch"):
        stream.shuffle(seed=0, window=4).padded_batch(2)


def test_print_shows_the_window_and_a_state_needs_the_same_window(no_leaks):
    assert "shuffle(seed=7, window=32)" in repr(windowed())
    with windowed(window=16) as pipe:
        it = pipe.epoch(0)
        next(it)
        state = it.state()
        it.close()
    with windowed(window=32) as other, pytest.raises(ValueError, match="fingerprint"):
        other.resume(state)
    with windowed(window=16) as same:
        with pytest.raises(ValueError, match=r"state\['window'\] must be a dict"):
            same.resume(dict(state, window="x"))
        with pytest.raises(ValueError, match=r"state\['window'\] names row 24 as the oldest held"):
            same.resume(dict(state, window={"delivered": 8, "first": 24}))
        with pytest.raises(ValueError, match=r"state\['window'\] is missing"):
            same.resume({k: v for k, v in state.items() if k != "window"})
