"""pack(sizes=) and batch_by_budget(sizes=): batches planned from a table of lengths before the map.

The same batches as cutting them from the mapped samples; with shard(), each
rank maps only the samples of its own batches (counted here by the map
function itself), and even="pad" repeats the epoch's first batches.
"""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_packing import as_lists, lengths_of, segments, token_sample
from test_padding_and_generators import resume_everywhere

import feedline as fl
from feedline import SampleError

N = 120
LENGTHS = lengths_of(N, seed=21, high=23)  # some longer than the rows of 16: split in pieces


def counted(make, log):
    """``make``, writing each sample index it maps to ``log`` (one line per call, from any process)."""

    def run(i):
        with open(log, "a") as f:
            f.write(f"{i}\n")
        return make(i)

    return run


def calls(log) -> list[int]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return [int(line) for line in f]


def packed(sizes=None, rank=None, count=1, even="drop", backend="thread", workers=2, log=None, split="split"):
    pipe = fl.from_sequence(list(range(N))).shuffle(seed=7)
    if rank is not None:
        pipe = pipe.shard(rank, count, even=even)
    make = token_sample(LENGTHS) if log is None else counted(token_sample(LENGTHS), log)
    return pipe.map(make, backend=backend, workers=workers).pack(16, buffer=4, too_long=split, sizes=sizes).batch(2)


def budget(sizes=None, rank=None, count=1, even="drop", backend="thread", workers=2, log=None):
    pipe = fl.from_sequence(list(range(N))).shuffle(seed=7)
    if rank is not None:
        pipe = pipe.shard(rank, count, even=even)
    make = token_sample(LENGTHS) if log is None else counted(token_sample(LENGTHS), log)
    return pipe.map(make, backend=backend, workers=workers).batch_by_budget(
        60, length_fn=lambda s: len(s["tokens"]), sizes=sizes)


def batch_samples(batch) -> list[int]:
    """The samples a batch holds a piece of, each once (a packed one: by its segments)."""
    ids = np.asarray(batch["id"])
    if "segment_ids" not in batch:
        return [int(row[0]) for row in ids]
    return sorted({i for i, _ in segments({k: np.asarray(v) for k, v in batch.items()})})


def epoch(pipe) -> list:
    with pipe:
        return [as_lists(b) for b in pipe]


@pytest.mark.parametrize("build", [packed, budget])
def test_planned_batches_are_the_batches_cut_from_the_mapped_samples(build, no_leaks):
    assert epoch(build(sizes=LENGTHS)) == epoch(build())


@pytest.mark.parametrize("build", [packed, budget])
def test_each_rank_maps_only_the_samples_of_its_own_batches(build, tmp_path, no_leaks):
    whole = epoch(build(sizes=LENGTHS))
    for count in (2, 3, 4):
        steps = len(whole) // count
        union, mapped = [], 0
        for rank in range(count):
            log = str(tmp_path / f"{build.__name__}-{count}-{rank}")
            got = epoch(build(sizes=LENGTHS, rank=rank, count=count, log=log))
            assert got == whole[rank : steps * count : count], "the same batches as the single-process plan, dealt"
            assert got == epoch(build(rank=rank, count=count)), "the same batches as dealing without a table"
            union += got
            ran = calls(log)
            assert sorted(ran) == sorted(i for b in got for i in batch_samples(b)), \
                "a rank maps each sample of its batches once per batch that holds it, and no other"
            mapped += len(ran)
        assert sorted(map(json.dumps, union)) == sorted(map(json.dumps, whole[: steps * count]))
        assert mapped <= N + sum(n > 16 for n in LENGTHS), "the ranks together map about one epoch, not count epochs"
    log = str(tmp_path / "unplanned")
    epoch(build(rank=0, count=4, log=log))
    assert len(calls(log)) == N, "without sizes= every rank maps the whole epoch"


@pytest.mark.parametrize("workers", [1, 8])
@pytest.mark.parametrize("build", [packed, budget])
def test_planned_batches_are_the_same_on_every_backend_and_worker_count(build, backend, workers, no_leaks):
    reference = epoch(build(sizes=LENGTHS, rank=1, count=3, backend="serial", workers=None))
    assert epoch(build(sizes=LENGTHS, rank=1, count=3, backend=backend, workers=workers)) == reference


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_a_rank_of_planned_packed_batches_resumes_exactly_at_every_batch(backend, even, no_leaks):
    whole = resume_everywhere(lambda: packed(sizes=LENGTHS, rank=2, count=3, even=even, backend=backend), convert=as_lists)
    assert len(whole) > 3


def test_a_rank_of_planned_budget_batches_resumes_exactly_at_every_batch(backend, no_leaks):
    whole = resume_everywhere(lambda: budget(sizes=LENGTHS, rank=1, count=3, even="pad", backend=backend),
                              convert=as_lists)
    assert len(whole) > 3


@pytest.mark.parametrize("build", [packed, budget])
def test_even_pad_repeats_the_epochs_first_batches_on_the_short_ranks(build, no_leaks):
    whole = epoch(build(sizes=LENGTHS))
    count = next(c for c in (3, 4, 5, 7) if len(whole) % c)  # a count that leaves the last round incomplete
    rounds = -(-len(whole) // count)
    padded = whole + whole[: rounds * count - len(whole)]
    for rank in range(count):
        with build(sizes=LENGTHS, rank=rank, count=count, even="pad") as pipe:
            got = [as_lists(b) for b in pipe]
            stats = pipe.stats()
        assert got == padded[rank::count], "every rank takes the same number of batches"
        assert len(got) == rounds
        repeated = int(rank * 1 >= len(whole) % count)
        assert (stats.padded_batches, stats.dropped_batches) == (repeated, 0)
        assert stats.as_dict()["padded_batches"] == repeated
        if repeated:
            assert "repeated 1 batch of the epoch's start" in str(stats)
    seen = [i for r in range(count) for b in padded[r::count] for i, _ in segments({k: np.asarray(v) for k, v in b.items()})] \
        if build is packed else None
    if seen is not None:
        assert set(seen) == set(range(N)), "every sample at least once"


def test_planned_drop_reports_what_it_drops_as_dealing_without_a_table_does(no_leaks):
    whole = epoch(packed(sizes=LENGTHS))
    count = next(c for c in (3, 4, 5, 7) if len(whole) % c)
    lost = len(whole) // count * count
    for rank in range(count):
        reports = []
        for sizes in (LENGTHS, None):
            with packed(sizes=sizes, rank=rank, count=count) as pipe:
                list(pipe)
                reports.append(pipe.stats())
        planned, unplanned = reports
        dropped = rank < len(whole) % count
        assert (planned.dropped_batches, planned.padded_batches) == (int(dropped), 0)
        assert (planned.dropped_batches, planned.dropped_samples) == (unplanned.dropped_batches, unplanned.dropped_samples)
        if dropped:
            assert planned.dropped_samples == len(segments({k: np.asarray(v) for k, v in whole[lost + rank].items()}))
        assert planned.packing_efficiency == unplanned.packing_efficiency


def test_a_mapped_sample_of_another_length_than_sizes_is_named(backend, no_leaks):
    wrong = list(LENGTHS)
    wrong[17] += 1
    with pytest.raises(SampleError, match=r"sample 17 has \d+ items along its first axis after the map, but sizes gives"):
        epoch(packed(sizes=wrong, backend=backend))
    with pytest.raises(SampleError, match=r"sample 17 is \d+ long after the map, but sizes gives"):
        epoch(budget(sizes=wrong, backend=backend))


def test_a_sample_too_long_by_sizes_is_named_before_any_map(tmp_path, no_leaks):
    log = str(tmp_path / "log")
    with pytest.raises(SampleError, match=r"sample (\d+) is (\d+) long, more than a row holds; pass too_long='split'") as e:
        epoch(packed(sizes=LENGTHS, split="raise", log=log))
    assert LENGTHS[e.value.index] > 16 and f"is {LENGTHS[e.value.index]} long" in str(e.value)
    assert calls(log) == [], "refused from the table, before any sample is mapped"


def test_bad_sizes_are_refused_by_name():
    base = fl.from_sequence(list(range(4)))
    for bad, match in (([1, 2, 3], r"pack\(sizes=\.\.\.\) has 3 lengths, but the source has 4 samples"),
                       ([1, -2, 3, 4], r"sample 1 has length -2"),
                       ([1.5, 2, 3, 4], r"one integer per source sample"),
                       ([[1, 2], [3, 4]], r"one integer per source sample"),
                       (7, r"pack\(sizes=7\) must be one length per source sample"),
                       ("abcd", r"must be a sequence of integers")):
        with pytest.raises(ValueError, match=match):
            iter(base.pack(8, sizes=bad))
    with pytest.raises(ValueError, match=r"batch_by_budget\(sizes=\.\.\.\) has 3 lengths"):
        iter(base.batch_by_budget(8, sizes=[1, 2, 3]))
    with pytest.raises(ValueError, match=r"pack\(sizes=\.\.\.\) plans the batches before map\(\) runs.*filter"):
        iter(base.filter(lambda s: True).pack(8, sizes=[1, 1, 1, 1]))
    with pytest.raises(ValueError, match=r"batch_by_budget\(sizes=\.\.\.\) plans the batches before map\(\) runs"):
        iter(base.map(lambda s: [s], on_error="skip").batch_by_budget(8, sizes=[1, 1, 1, 1]))
    stream = fl.from_generator(lambda shard, count: iter([[1]]), 1)
    with pytest.raises(ValueError, match=r"pack\(sizes=\.\.\.\) needs a random-access source"):
        iter(stream.pack(8, sizes=[1]))
    with pytest.raises(ValueError, match=r"pack\(sizes=\.\.\.\) after fl.mix\(\), fl.concatenate\(\) or repeat\(\) is not"):
        iter(fl.concatenate([base, base]).pack(8, sizes=[1] * 8))
    with pytest.raises(ValueError, match=r"give sizes= \(each sample's length\) to pad"):
        iter(base.shard(0, 2, even="pad").pack(8))
    assert "sizes=<4 lengths>" in repr(base.pack(8, sizes=[1, 2, 3, 4]))


def test_a_state_of_planned_batches_resumes_only_the_same_table(no_leaks):
    with packed(sizes=LENGTHS, rank=0, count=2) as pipe:
        it = iter(pipe)
        next(it)
        state = json.loads(json.dumps(it.state()))
        it.close()
    other = list(LENGTHS)
    other[0], other[1] = other[1], other[0]
    with packed(sizes=other, rank=0, count=2) as pipe:
        with pytest.raises(ValueError, match="fingerprint"):
            pipe.resume(state)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(0, 20), min_size=1, max_size=50), fit=st.sampled_from(["first", "best"]),
       buffer=st.integers(1, 6), size=st.integers(1, 3), drop=st.booleans(), count=st.integers(1, 4),
       even=st.sampled_from(["drop", "pad"]), stop=st.integers(0, 12))
def test_any_planned_packing_deals_the_rows_cut_from_the_mapped_samples(lengths, fit, buffer, size, drop, count, even,
                                                                        stop):
    def build(rank=None, sizes=None):
        pipe = fl.from_sequence(list(range(len(lengths)))).shuffle(seed=1)
        if rank is not None:
            pipe = pipe.shard(rank, count, even=even)
        return (pipe.map(token_sample(lengths), backend="serial")
                .pack(12, fit=fit, buffer=buffer, too_long="split", sizes=sizes).batch(size, drop_remainder=drop))

    whole = epoch(build())
    assert epoch(build(sizes=lengths)) == whole
    rounds = len(whole) // count if even == "drop" else -(-len(whole) // count)
    dealt = [whole[s % len(whole)] for s in range(rounds * count)]  # slot s: batch s of the epoch, from its start again
    for rank in range(count):
        got = epoch(build(rank, lengths))
        assert got == dealt[rank::count]
    rank = count - 1
    with build(rank, lengths) as pipe:
        it = iter(pipe)
        head = [as_lists(b) for b in itertools.islice(it, stop)]
        state = json.loads(json.dumps(it.state()))
        it.close()
    with build(rank, lengths) as pipe:
        assert head + [as_lists(b) for b in pipe.resume(state)] == dealt[rank::count]


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 20), min_size=1, max_size=50), max_tokens=st.integers(20, 60),
       count=st.integers(1, 4), even=st.sampled_from(["drop", "pad"]), stop=st.integers(0, 12))
def test_any_planned_budget_deals_the_batches_cut_from_the_mapped_samples(lengths, max_tokens, count, even, stop):
    def build(rank=None, sizes=None):
        pipe = fl.from_sequence(list(range(len(lengths)))).shuffle(seed=1)
        if rank is not None:
            pipe = pipe.shard(rank, count, even=even)
        return pipe.map(token_sample(lengths), backend="serial").batch_by_budget(max_tokens, sizes=sizes)

    whole = epoch(build())
    assert epoch(build(sizes=lengths)) == whole
    rounds = len(whole) // count if even == "drop" else -(-len(whole) // count)
    dealt = [whole[s % len(whole)] for s in range(rounds * count)]
    for rank in range(count):
        assert epoch(build(rank, lengths)) == dealt[rank::count]
    with build(0, lengths) as pipe:
        it = iter(pipe)
        head = [as_lists(b) for b in itertools.islice(it, stop)]
        state = json.loads(json.dumps(it.state()))
        it.close()
    with build(0, lengths) as pipe:
        assert head + [as_lists(b) for b in pipe.resume(state)] == dealt[0::count]


@pytest.mark.parametrize("sizes", [LENGTHS, None])
def test_the_torch_loader_of_a_rank_of_dealt_batches_yields_the_ranks_batches(sizes, no_leaks):
    pytest.importorskip("torch")
    count = 3
    for rank in range(count):
        expected = epoch(packed(sizes=sizes, rank=rank, count=count))
        with packed(sizes=sizes, rank=rank, count=count) as pipe:
            got = [{k: v.tolist() for k, v in b.items()} for b in pipe.torch()]
        assert got == expected, "every rank takes the same number of batches by construction: nothing to cap"
