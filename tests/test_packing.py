"""pack(max_length) and batch_by_budget(max_tokens) (issue 60).

Exact rows on hand-checked cases, each sample delivered once with its
tokens intact, the same output on every backend and worker count, and
resumption from the state after every batch (`resume_everywhere`, the
helper the padding and bucket tests use).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_padding_and_generators import resume_everywhere

import feedline as fl
from feedline import SampleError


# ------------------------------------------------------------------ helpers
def lengths_of(n: int, seed: int = 3, high: int = 13) -> list[int]:
    return [int(v) for v in np.random.default_rng(seed).integers(1, high, n)]


def token_sample(lengths):
    """Sample ``i``: tokens ``1000 * i + k``, targets their negatives, ``id`` i on every token (all aligned)."""

    def make(i):
        tokens = 1000 * i + np.arange(lengths[i], dtype=np.int64)
        return {"tokens": tokens, "targets": -tokens, "id": np.full(lengths[i], i, dtype=np.int64)}

    return make


def segments(rows) -> list[tuple[int, list[int]]]:
    """Every (sample id, its tokens) of packed rows, checking that segment ids, positions and targets agree with them."""
    out = []
    for r in range(len(rows["tokens"])):
        tokens, ids, pos = rows["tokens"][r], rows["segment_ids"][r], rows["positions"][r]
        assert (rows["targets"][r] == -tokens).all(), "targets stay aligned with their tokens"
        used = int((ids > 0).sum())
        assert (ids[used:] == 0).all() and (pos[used:] == 0).all() and (tokens[used:] == 0).all(), "padding only at the end"
        for seg in range(1, int(ids.max(initial=0)) + 1):
            where = np.flatnonzero(ids == seg)
            assert where.tolist() == list(range(where[0], where[0] + len(where))), "a segment is contiguous"
            assert pos[where].tolist() == list(range(len(where))), "positions count from 0 in each segment"
            sample = rows["id"][r][where]
            assert (sample == sample[0]).all(), "a segment holds one sample"
            out.append((int(sample[0]), tokens[where].tolist()))
    return out


def assert_each_sample_once(batches, lengths, kept=None):
    got = [seg for b in batches for seg in segments(b)]
    ids = [i for i, _ in got]
    expected = [i for i in range(len(lengths)) if kept is None or kept(i)]
    assert sorted(ids) == expected, "every sample exactly once"
    for i, tokens in got:
        assert tokens == (1000 * i + np.arange(lengths[i])).tolist(), f"sample {i} arrived whole"


def as_lists(batch) -> dict:
    return {k: np.asarray(v).tolist() for k, v in batch.items()}


# --------------------------------------------------------- 1. exact contents
HAND = [3, 4, 2, 3]  # max_length 6, two open rows


def hand_pipe(fit: str, size=None):
    pipe = fl.from_sequence(list(range(len(HAND)))).map(token_sample(HAND), backend="serial").pack(6, fit=fit, buffer=2)
    return pipe.batch(size) if size else pipe


def test_first_fit_puts_each_sample_in_the_first_open_row_with_room(no_leaks):
    # s0 (3) opens A; s1 (4) does not fit A (room 3): opens B; s2 (2) fits A first (room 3 -> 1);
    # s3 (3) fits neither and two rows are open: A, the fullest, goes out; s3 opens C.
    # At the end B and C go out in the order they were opened.
    with hand_pipe("first") as pipe:
        rows = [as_lists(r) for r in pipe]
        stats = pipe.stats()
    assert [r["tokens"] for r in rows] == [[0, 1, 2, 2000, 2001, 0], [1000, 1001, 1002, 1003, 0, 0], [3000, 3001, 3002, 0, 0, 0]]
    assert [r["segment_ids"] for r in rows] == [[1, 1, 1, 2, 2, 0], [1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]]
    assert [r["positions"] for r in rows] == [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 0], [0, 1, 2, 0, 0, 0]]
    assert [r["id"][:1] for r in rows] == [[0], [1], [3]]
    assert stats.packing_efficiency == pytest.approx(12 / 18) and stats.padding_share == pytest.approx(6 / 18)
    assert "packing efficiency 66.7%" in str(stats)


def test_best_fit_puts_each_sample_where_it_leaves_least_room(no_leaks):
    # s0 opens A (room 3), s1 opens B (room 2); s2 (2) fills B exactly (tighter than A): B goes out;
    # s3 (3) fills A: A goes out. No padding at all.
    with hand_pipe("best", size=2) as pipe:
        batches = [as_lists(b) for b in pipe]
        assert pipe.stats().padding_share == 0.0
    assert len(batches) == 1
    assert batches[0]["tokens"] == [[1000, 1001, 1002, 1003, 2000, 2001], [0, 1, 2, 3000, 3001, 3002]]
    assert batches[0]["segment_ids"] == [[1, 1, 1, 1, 2, 2], [1, 1, 1, 2, 2, 2]]
    assert batches[0]["positions"] == [[0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 1, 2]]
    assert batches[0]["targets"] == [[-v for v in row] for row in batches[0]["tokens"]]


def test_packed_rows_batch_like_grain_rows_then_batch(no_leaks):
    with hand_pipe("first", size=2) as pipe:
        shapes = [b["tokens"].shape for b in pipe]
    assert shapes == [(2, 6), (1, 6)]  # the epoch's last batch holds the rows left
    dropped = fl.from_sequence(list(range(4))).map(token_sample(HAND), backend="serial").pack(6, fit="first", buffer=2)
    with dropped.batch(2, drop_remainder=True) as pipe:
        assert [b["tokens"].shape for b in pipe] == [(2, 6)]


def test_a_bare_array_sample_comes_out_with_its_segment_ids_and_positions(no_leaks):
    pipe = fl.from_sequence([np.array([5, 6]), np.array([7])]).pack(4).batch(1)
    with pipe:
        (row, ids, pos), = list(pipe)
    assert row.tolist() == [[5, 6, 7, 0]] and ids.tolist() == [[1, 1, 2, 0]] and pos.tolist() == [[0, 1, 0, 0]]


# ----------------------------------------------------- 2. too long, misaligned
def test_a_sample_longer_than_a_row_is_refused_by_default_naming_it(backend, no_leaks):
    lengths = [2, 9, 3]
    pipe = fl.from_sequence(list(range(3))).map(token_sample(lengths), backend=backend, workers=1).pack(4)
    with pipe, pytest.raises(SampleError, match=r"sample 1\b.*max_length=4.*9 items.*too_long='split'"):
        list(pipe)


def test_a_long_sample_is_split_into_segments_when_asked(backend, no_leaks):
    lengths = [2, 9, 3]
    pipe = (fl.from_sequence(list(range(3))).map(token_sample(lengths), backend=backend, workers=1)
            .pack(4, too_long="split", fit="first").batch(8))
    with pipe:
        (batch,) = list(pipe)
    pieces = segments(batch)
    assert sorted(t for i, ts in pieces if i == 1 for t in ts) == list(range(1000, 1009)), "every token of the long sample, once"
    assert [len(ts) for i, ts in pieces if i == 1] == [4, 4, 1], "pieces of at most max_length, in order"
    assert all(len(ts) <= 4 for _, ts in pieces)


def test_fields_of_different_lengths_are_refused_naming_the_field(backend, no_leaks):
    def misaligned(i):
        return {"tokens": np.arange(5), "targets": np.arange(4 if i == 2 else 5)}

    pipe = fl.from_sequence(list(range(4))).map(misaligned, backend=backend, workers=1).pack(8)
    with pipe, pytest.raises(SampleError, match=r"sample 2\b.*field 'targets' has 4 items.*field 'tokens' has 5"):
        list(pipe)


def test_a_field_that_is_not_an_array_is_refused_naming_it(no_leaks):
    pipe = fl.from_sequence([{"tokens": [1, 2], "label": 3}]).pack(8)
    with pipe, pytest.raises(SampleError, match=r"field 'label' is int 3, not an array"):
        list(pipe)


def test_bad_pack_arguments_are_refused():
    base = fl.from_sequence([[1]])
    for kwargs, message in [({"max_length": 0}, r"pack\(max_length=...\) must be an integer >= 1"),
                            ({"max_length": 4, "fit": "worst"}, r"pack\(fit='worst'\)"),
                            ({"max_length": 4, "buffer": 0}, r"pack\(buffer=...\)"),
                            ({"max_length": 4, "too_long": "cut"}, r"pack\(too_long='cut'\)"),
                            ({"max_length": 4, "pad_value": "x"}, r"pack\(pad_value='x'\)")]:
        with pytest.raises(ValueError, match=message):
            base.pack(**kwargs)
    with pytest.raises(ValueError, match=r"pack\(\) before batch\(\)"):
        base.batch(2).pack(4)
    with pytest.raises(ValueError, match=r"map\(\) after pack\(\)"):
        base.pack(4).map(abs)
    with pytest.raises(ValueError, match=r"shuffle\(\) must come before pack\(\)"):
        base.pack(4).shuffle(seed=0)
    with pytest.raises(ValueError, match="batch them with batch"):
        base.pack(4).padded_batch(2)
    with pytest.raises(ValueError, match=r"take\(\) after pack\(\)"):
        base.pack(4).take(2)
    with pytest.raises(ValueError, match=r"after repeat\(\) without a count is not supported yet"):
        base.repeat().pack(4)
    with base.repeat(2).pack(4) as twice:
        assert [r.tolist() for r, _, _ in twice] == [[1, 1, 0, 0]], "a counted repeat packs both passes"
    with pytest.raises(TypeError, match=r"len\(\) is unknown after pack\(\)"):
        len(base.pack(4))
    assert "pack(4, fit='first', buffer=8)" in repr(base.pack(4, fit="first", buffer=8))


# --------------------------------------------- 3. every backend, every count
def packed_epoch(backend, workers, lengths, fit="best", build=lambda p: p):
    pipe = (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=4)
            .map(token_sample(lengths), backend=backend, workers=workers))
    pipe = build(pipe).pack(16, fit=fit, buffer=4).batch(3)
    with pipe:
        return [list(pipe) for _ in range(2)]


@pytest.mark.parametrize("fit", ["first", "best"])
def test_packed_rows_are_the_same_on_every_backend_and_worker_count(fit, no_leaks):
    lengths = lengths_of(150)
    reference = packed_epoch("serial", None, lengths, fit)
    for epoch in reference:
        assert_each_sample_once(epoch, lengths)
    assert [as_lists(b) for b in reference[0]] != [as_lists(b) for b in reference[1]], "each epoch has its own order"
    for backend, workers in (("thread", 1), ("thread", 2), ("thread", 8), ("process", 1), ("process", 2), ("process", 8)):
        got = packed_epoch(backend, workers, lengths, fit)
        assert [[as_lists(b) for b in e] for e in got] == [[as_lists(b) for b in e] for e in reference], (backend, workers)


def test_packing_after_filter_and_skip_delivers_each_kept_sample_once(backend, no_leaks):
    lengths = lengths_of(90)

    def fails_on_sevens(sample):
        if int(sample["id"][0]) % 7 == 0:
            raise ValueError("a bad sample")
        return sample

    def build(pipe):
        return pipe.map(fails_on_sevens, on_error="skip").filter(lambda s: int(s["id"][0]) % 5 != 0)

    with pytest.warns(RuntimeWarning, match="skipped"):
        for workers in (1, 2, 8):
            epochs = packed_epoch(backend, workers, lengths, build=build)
            for epoch in epochs:
                assert_each_sample_once(epoch, lengths, kept=lambda i: i % 7 and i % 5)


def test_packed_rows_resume_exactly_at_every_batch(backend, no_leaks):
    lengths = lengths_of(40)

    def build():
        return (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=2)
                .map(token_sample(lengths), backend=backend, workers=2)
                .filter(lambda s: int(s["id"][0]) % 6 != 1).pack(16, buffer=3).batch(2))

    whole = resume_everywhere(build, convert=as_lists)
    assert_each_sample_once([{k: np.asarray(v) for k, v in b.items()} for b in whole], lengths, kept=lambda i: i % 6 != 1)


def test_packed_rows_of_a_generator_resume_exactly(backend, no_leaks):
    lengths = lengths_of(45, seed=8)
    make = token_sample(lengths)

    def texts(shard, num_shards):
        for i in range(shard, len(lengths), num_shards):
            yield make(i)

    def build():
        return fl.from_generator(texts, 3).shuffle(seed=1).map(lambda s: s, backend=backend, workers=2).pack(12, fit="first", buffer=2)

    whole = resume_everywhere(build, convert=as_lists)
    assert_each_sample_once([{k: np.asarray(v)[None] for k, v in b.items()} for b in whole], lengths)


def test_a_pack_state_is_checked(no_leaks):
    lengths = lengths_of(60)
    pipe = fl.from_sequence(list(range(60))).map(token_sample(lengths), backend="serial").pack(16, buffer=4).batch(2)
    with pipe:
        it = iter(pipe)
        next(it)
        state = json.loads(json.dumps(it.state()))
        it.close()
        assert set(state["pack"]) == {"first", "next", "open", "pending"}
        assert state["pack"]["open"], "the first batch leaves samples waiting in open rows"
        with pytest.raises(ValueError, match=r"state\['pack'\] must name each held item once"):
            pipe.resume({**state, "pack": {**state["pack"], "open": [[state["pack"]["next"]]]}})
        with pytest.raises(ValueError, match=r"state\['pack'\] holds 5 open"):
            pipe.resume({**state, "pack": {**state["pack"], "open": [[0]] * 5}})
        with pytest.raises(ValueError, match=r"state\['pack'\] is missing"):
            pipe.resume({k: v for k, v in state.items() if k != "pack"})


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(0, 20), min_size=1, max_size=60), fit=st.sampled_from(["first", "best"]),
       buffer=st.integers(1, 6), size=st.integers(1, 4), stop=st.integers(0, 30))
def test_any_packing_holds_every_sample_once_and_resumes_anywhere(lengths, fit, buffer, size, stop):
    def build():
        return (fl.from_sequence(list(range(len(lengths)))).map(token_sample(lengths), backend="serial")
                .pack(12, fit=fit, buffer=buffer, too_long="split").batch(size))

    with build() as pipe:
        whole = [as_lists(b) for b in pipe]
    got = [seg for b in whole for seg in segments({k: np.asarray(v) for k, v in b.items()})]
    for i, n in enumerate(lengths):  # every token of every sample once, in order, in pieces of at most 12
        assert [t for j, ts in got if j == i for t in ts] == (1000 * i + np.arange(n)).tolist()
    assert all(len(ts) <= 12 for _, ts in got) and all(len(b["tokens"]) <= size for b in whole)
    stop = min(stop, len(whole))
    with build() as pipe:
        it = iter(pipe)
        head = [as_lists(next(it)) for _ in range(stop)]
        state = json.loads(json.dumps(it.state()))
        it.close()
    with build() as pipe:
        assert head + [as_lists(b) for b in pipe.resume(state)] == whole


def fails_on_sevens(sample):
    if int(sample["id"][0]) % 7 == 0:
        raise ValueError("a bad sample")
    return sample


def ranked(build, count: int, backend: str, workers: int | None) -> tuple[list, list]:
    """Each rank's batches and stats: ``build(pipe)`` after ``shuffle(seed=5).shard(rank, count, even="drop")``.

    ``count=0``: the whole epoch, not sharded.
    """
    batches, stats = [], []
    for rank in range(count) if count else [None]:
        pipe = fl.from_sequence(list(range(97))).shuffle(seed=5)
        if rank is not None:
            pipe = pipe.shard(rank, count, even="drop")
        with build(pipe.map(token_sample(LENGTHS_97), backend=backend, workers=workers)) as pipe:
            batches.append([as_lists(b) for b in pipe])
            stats.append(pipe.stats())
    return batches, stats


LENGTHS_97 = lengths_of(97, seed=11)


def packed_after_filter_and_skip(pipe):
    return pipe.map(fails_on_sevens, on_error="skip").filter(lambda s: int(s["id"][0]) % 5 != 0).pack(16, buffer=4).batch(2)


def test_sharded_ranks_take_equal_numbers_of_packed_batches_after_filter_and_skip(backend, no_leaks):
    kept = [i for i in range(97) if i % 7 and i % 5]
    with pytest.warns(RuntimeWarning, match="skipped"):
        whole = ranked(packed_after_filter_and_skip, 0, "serial", None)[0][0]
        whole_batches = len(whole)
        for count in (2, 3, 4):
            batches, stats = ranked(packed_after_filter_and_skip, count, backend, 2)
            steps = whole_batches // count
            assert [len(b) for b in batches] == [steps] * count, "every rank runs the same number of steps"
            for rank in range(count):  # rank r takes batches r, r + count, ... of the whole epoch's packing
                assert batches[rank] == whole[rank : steps * count : count], (count, rank)
            seen = [i for b in batches for batch in b for i, _ in segments({k: np.asarray(v) for k, v in batch.items()})]
            dropped = sum(s.dropped_samples for s in stats)
            assert len(seen) == len(set(seen)) == len(kept) - dropped, "every kept sample once, less the dropped ones"
            assert set(seen) <= set(kept)
            assert sum(s.dropped_batches for s in stats) == whole_batches - steps * count < count
            assert all(s.dropped_batches in (0, 1) for s in stats)
            assert dropped == sum(len(segments({k: np.asarray(v) for k, v in b.items()})) for b in whole[steps * count :])


def test_sharded_ranks_take_equal_numbers_of_budget_batches_after_filter_and_skip(backend, no_leaks):
    def build(pipe):
        return (pipe.map(fails_on_sevens, on_error="skip").filter(lambda s: int(s["id"][0]) % 5 != 0)
                .batch_by_budget(30, length_fn=lambda s: len(s["tokens"])))

    with pytest.warns(RuntimeWarning, match="skipped"):
        whole = ranked(build, 0, "serial", None)[0][0]
        for count in (2, 4):
            batches, stats = ranked(build, count, backend, 2)
            steps = len(whole) // count
            assert [len(b) for b in batches] == [steps] * count
            for rank in range(count):
                assert batches[rank] == whole[rank : steps * count : count], (count, rank)
            assert sum(s.dropped_samples for s in stats) == sum(len(b["tokens"]) for b in whole[steps * count :])


def test_a_rank_of_dealt_packed_batches_resumes_exactly_at_every_batch(backend, no_leaks):
    lengths = lengths_of(40)

    def build():
        return (fl.from_sequence(list(range(40))).shuffle(seed=2).shard(1, 3, even="drop")
                .map(token_sample(lengths), backend=backend, workers=2)
                .filter(lambda s: int(s["id"][0]) % 6 != 1).pack(16, buffer=3).batch(2))

    whole = resume_everywhere(build, convert=as_lists)
    assert whole, "rank 1 has batches to resume in"


def test_a_rank_with_the_exact_partition_packs_only_its_own_samples(no_leaks):
    lengths = lengths_of(101)
    seen = []
    for rank in range(3):
        pipe = (fl.from_sequence(list(range(101))).shuffle(seed=0).shard(rank, 3)
                .map(token_sample(lengths), backend="thread", workers=2).pack(16).batch(2))
        with pipe:
            seen += [i for b in pipe for i, _ in segments(b)]
            assert pipe.stats().dropped_batches == 0
    assert sorted(seen) == list(range(101))


def test_dealt_batches_refuse_padding_and_report_what_they_drop(no_leaks):
    base = fl.from_sequence([np.arange(n) for n in (3, 4, 2, 5, 1)])
    with pytest.raises(ValueError, match=r"even=.pad.*give sizes= \(each sample.s length\) to pad"):
        iter(base.shard(0, 2, even="pad").pack(6))
    pipe = base.shard(1, 2, even="drop").pack(6, fit="first", buffer=1)  # rows [3], [4, 2], [5, 1]: rank 1 drops none ...
    with pipe:
        assert [r[0].tolist() for r in pipe] == [[0, 1, 2, 3, 0, 1]]
    pipe = base.shard(0, 2, even="drop").pack(6, fit="first", buffer=1)  # ... rank 0 takes row 0, drops row 2
    with pipe:
        assert [r[0].tolist() for r in pipe] == [[0, 1, 2, 0, 0, 0]]
        stats = pipe.stats()
    assert (stats.dropped_batches, stats.dropped_samples) == (1, 2)
    assert "dropped 1 batch (2 samples) of the epoch's last, incomplete round" in str(stats)
    assert stats.as_dict()["dropped_batches"] == 1
    with pipe:
        it = iter(pipe)
        next(it)
        state = json.loads(json.dumps(it.state()))
        it.close()
        assert state["deal"] == {"made": 1}
        with pytest.raises(ValueError, match=r"state\['deal'\] must be a dict"):
            pipe.resume({**state, "deal": {"made": -1}})


# --------------------------------------------------------------- 4. budget
def budget_pipe(lengths, backend="serial", workers=None, max_tokens=40, keep=None):
    pipe = (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=9)
            .map(lambda i: {"tokens": np.full(lengths[i], i + 1, np.int32), "id": i}, backend=backend, workers=workers))
    return (pipe if keep is None else pipe.filter(keep)).batch_by_budget(max_tokens, lengths=True)


def expected_budget(lengths_in_order: list, max_tokens: int) -> list[list[int]]:
    """The rule: add while (rows + 1) x longest stays within the budget."""
    out, current, longest = [], [], 0
    for i, n in lengths_in_order:
        if current and (len(current) + 1) * max(longest, n) > max_tokens:
            out.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    return out + ([current] if current else [])


def test_budget_batches_hold_as_many_samples_as_fit_and_never_exceed_it(backend, no_leaks):
    lengths = lengths_of(120, high=30)
    with budget_pipe(lengths, backend, 3) as pipe:
        order = [int(i) for i in pipe.plan.epoch_indices(0)]
        got = list(pipe)
        stats = pipe.stats()
    assert [b["id"].tolist() for b in got] == expected_budget([(i, lengths[i]) for i in order], 40)
    for b in got:
        assert b["tokens"].size <= 40, "rows x longest within max_tokens"
        assert b["tokens"].shape[1] == max(b["tokens_lengths"])
        assert b["tokens_lengths"].tolist() == [lengths[i] for i in b["id"].tolist()]
    ids = [i for b in got for i in b["id"].tolist()]
    assert sorted(ids) == list(range(120))
    slots = sum(b["tokens"].size for b in got)
    assert stats.padding_share == pytest.approx(1 - sum(lengths) / slots) and stats.packing_efficiency is None


def test_budget_batches_are_the_same_on_every_backend_and_worker_count(no_leaks):
    lengths = lengths_of(150, high=30)

    def run(backend, workers):
        with budget_pipe(lengths, backend, workers, keep=lambda s: s["id"] % 4 != 3) as pipe:
            return [[b["id"].tolist() for b in pipe] for _ in range(2)]

    reference = run("serial", None)
    for backend, workers in (("thread", 1), ("thread", 8), ("process", 1), ("process", 8)):
        assert run(backend, workers) == reference, (backend, workers)


def test_budget_batches_resume_exactly_at_every_batch(backend, no_leaks):
    lengths = lengths_of(70, high=30)

    def build():
        return budget_pipe(lengths, backend, 2, keep=lambda s: s["id"] % 5 != 2)

    whole = resume_everywhere(build, convert=lambda b: (b["id"].tolist(), b["tokens"].tolist()))
    assert sorted(i for ids, _ in whole for i in ids) == [i for i in range(70) if i % 5 != 2]


def test_a_sample_longer_than_the_budget_is_named(backend, no_leaks):
    lengths = [3, 50, 2]
    pipe = (fl.from_sequence(list(range(3))).map(lambda i: np.zeros(lengths[i]), backend=backend, workers=1)
            .batch_by_budget(40))
    with pipe, pytest.raises(SampleError, match=r"max_tokens=40.*sample 1\b is 50 long"):
        list(pipe)


def test_budget_counts_what_length_fn_says(no_leaks):
    samples = [{"audio": np.zeros(10 * n), "text": np.arange(n)} for n in (2, 3, 1, 4)]
    pipe = fl.from_sequence(samples).batch_by_budget(6, length_fn=lambda s: len(s["text"]))
    with pipe:
        assert [b["text"].shape for b in pipe] == [(2, 3), (1, 1), (1, 4)]
    assert "batch_by_budget(6, length_fn=" in repr(pipe) and repr(pipe).endswith("<lambda>)")
    with pytest.raises(ValueError, match=r"batch_by_budget\(max_tokens=...\) must be an integer >= 1"):
        fl.from_sequence([[1]]).batch_by_budget(0)
    with pytest.raises(TypeError, match=r"len\(\) is unknown after batch_by_budget"):
        len(fl.from_sequence([[1]]).batch_by_budget(4))


# -------------------------------------------------------------- 6. profile
def test_the_bench_profile_shows_padding_share_and_packing_efficiency(tmp_path):
    script = tmp_path / "packed.py"
    script.write_text(
        "import numpy as np, feedline as fl\n"
        "def build():\n"
        "    docs = [np.arange(n % 7 + 1) for n in range(60)]\n"
        "    return fl.from_sequence(docs).map(lambda d: d, backend='serial').pack(8).batch(2)\n"
    )
    done = subprocess.run([sys.executable, "-m", "feedline.cli", "bench", f"{script}:build"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert re.search(r"padding \d+\.\d% of [\d,]+ item slots; packing efficiency \d+\.\d%", done.stdout), done.stdout
    done = subprocess.run([sys.executable, "-m", "feedline.cli", "bench", f"{script}:build", "--json"],
                          capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout[done.stdout.index("{"):])
    assert 0 < report["packing_efficiency"] < 1 and report["padding_share"] == pytest.approx(1 - report["packing_efficiency"])
