"""Elastic resume: a checkpoint of W ranks continued on W' ranks delivers the rest of the epoch once, deterministically."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import feedline as fl

N, B = 960, 4


def noisy(x, rng):
    """A sample whose bytes depend on (seed, epoch, index) through the map's rng."""
    return (np.full(6, x, dtype=np.int64) * 1000 + rng.integers(0, 1000, 6)).astype(np.int64)


def pipeline(rank=None, ranks=None, *, backend="serial", workers=None, even=None, n=N, seed=3, batch=B, drop=False):
    pipe = fl.from_arrays(np.arange(n)).shuffle(seed=seed)
    if ranks is not None:
        pipe = pipe.shard(rank, ranks, even=even)
    return pipe.map(noisy, backend=backend, workers=workers).batch(batch, drop_remainder=drop)


def rows(batches) -> list:
    return [row for b in batches for row in np.asarray(b).reshape(len(b), -1)]


def take(pipe, state, batches):
    """``batches`` batches (None: the rest) of ``pipe`` from ``state`` (None: a fresh epoch), then the state; closed."""
    with pipe:
        it = iter(pipe) if state is None else pipe.resume(state)
        got = []
        for b in it:
            got.append(np.array(b))
            if batches is not None and len(got) == batches:
                break
        return rows(got), it.state()


def index_of(row) -> int:
    return int(row[0] // 1000)


@pytest.fixture(scope="module")
def uninterrupted():
    """index -> bytes of one serial, unsharded epoch 0, and its order."""
    got = rows(iter(pipeline()))
    return {index_of(r): r.tobytes() for r in got}, [index_of(r) for r in got]


def check_segment(got_by_rank, delivered, order, ranks, fresh, even=None):
    """Rank r's samples are the undelivered positions of the epoch's order dealt r, r + ranks, ...; bytes as fresh."""
    left = [i for i in order if i not in delivered]
    for r, got in enumerate(got_by_rank):
        expected = left[r::ranks]
        assert [index_of(x) for x in got] == expected[: len(got)], f"rank {r} of {ranks}"
        for x in got:
            assert x.tobytes() == fresh[index_of(x)]
            assert index_of(x) not in delivered, f"sample {index_of(x)} delivered twice"
            delivered.add(index_of(x))


@pytest.mark.parametrize("layouts", [
    [("serial", None), ("thread", 8), ("process", 1)],
    [("process", 8), ("serial", None), ("thread", 1)],
], ids=["serial-thread8-process1", "process8-serial-thread1"])
def test_four_then_three_then_five_ranks_deliver_the_epoch_once_with_the_bytes_of_an_uninterrupted_run(layouts, uninterrupted):
    fresh, order = uninterrupted
    delivered: set = set()
    (b1, w1), (b2, w2), (b3, w3) = layouts
    # 4 ranks, 10 batches each (lock step); rank 2's state alone stands for all of them
    first = [take(pipeline(r, 4, backend=b1, workers=w1), None, 10) for r in range(4)]
    check_segment([g for g, _ in first], delivered, order, 4, fresh)
    state = json.loads(json.dumps(first[2][1]))
    # 3 ranks from that one state, 20 batches each; then every rank's state combined
    second = [take(pipeline(r, 3, backend=b2, workers=w2), state, 20) for r in range(3)]
    check_segment([g for g, _ in second], delivered, order, 3, fresh)
    combined = json.loads(json.dumps(fl.combine_states([s for _, s in reversed(second)])))
    # 5 ranks to the end of the epoch
    third = [take(pipeline(r, 5, backend=b3, workers=w3), combined, None) for r in range(5)]
    check_segment([g for g, _ in third], delivered, order, 5, fresh)
    assert delivered == set(range(N))


def test_the_next_epoch_after_an_elastic_resume_is_the_new_ranks_own_epoch():
    states = [take(pipeline(r, 2), None, 7)[1] for r in range(2)]
    combined = fl.combine_states(states)
    for r in range(3):
        with pipeline(r, 3) as pipe:
            rest = list(pipe.resume(combined))
            after = rows(iter(pipe))
        with pipeline(r, 3) as fresh:
            fresh.set_epoch(1)
            assert [x.tobytes() for x in after] == [x.tobytes() for x in rows(iter(fresh))]
        assert rest


def test_ranks_a_batch_apart_are_combined_exactly(uninterrupted):
    fresh, order = uninterrupted
    delivered: set = set()
    first = [take(pipeline(r, 3), None, 5 + r) for r in range(3)]  # ranks stopped 0, 1 and 2 batches apart
    for r, (got, _) in enumerate(first):
        assert [index_of(x) for x in got] == order[r::3][: len(got)]
        delivered |= {index_of(x) for x in got}
    combined = fl.combine_states([s for _, s in first])
    rest = [take(pipeline(r, 2), combined, None)[0] for r in range(2)]
    left = [i for i in order if i not in delivered]
    for r, got in enumerate(rest):
        assert [index_of(x) for x in got] == left[r::2]
    assert sorted(index_of(x) for got in rest for x in got) == sorted(set(range(N)) - delivered)


def test_an_elastic_rank_restarted_on_the_same_ranks_resumes_exactly():
    state = take(pipeline(0, 4), None, 9)[1]
    whole, _ = take(pipeline(1, 3), state, None)
    part, mid = take(pipeline(1, 3), state, 11)
    rest, _ = take(pipeline(1, 3, backend="thread", workers=2), mid, None)
    assert "elastic" in mid
    assert [x.tobytes() for x in part + rest] == [x.tobytes() for x in whole]


@pytest.mark.parametrize("even", ["drop", "pad"])
def test_even_shares_on_the_new_ranks_drop_or_repeat_only_what_does_not_divide(even):
    n = 1001
    order = [index_of(x) for x in rows(iter(pipeline(n=n)))]
    first = [take(pipeline(r, 4, even=even, n=n), None, 3) for r in range(4)]
    rest = [take(pipeline(r, 3, even=even, n=n), first[0][1], None)[0] for r in range(3)]
    assert len({len(got) for got in rest}) == 1  # every new rank the same number of samples: no rank waits
    seen = [index_of(x) for got, _ in first for x in got] + [index_of(x) for got in rest for x in got]
    if even == "drop":  # at most ranks - 1 left out at each layout, none twice
        assert len(seen) == len(set(seen)) and n - len(seen) <= 3 + 2
    else:  # everything; again only the order's first (padding 4 ranks) and the rest's first (padding 3)
        assert set(seen) == set(range(n)) and len(seen) - n <= 3 + 2
        assert {i for i in seen if seen.count(i) > 1} <= set(order[:3]) | {order[48]}


@pytest.mark.parametrize("kind", ["batched", "unbatched", "padded_batch"])
def test_batched_unbatched_and_padded_pipelines_resume_on_other_ranks_exactly_once(kind):
    def pipe(rank, ranks):
        p = fl.from_arrays(np.arange(203)).shuffle(seed=1).shard(rank, ranks)
        if kind == "padded_batch":
            return p.map(lambda x: np.full(x % 5 + 1, x)).padded_batch(4, pad_value=-1, lengths=True)
        return p.batch(4) if kind == "batched" else p

    def ids(item) -> list:
        if kind == "padded_batch":
            padded, lengths = item
            assert all(row[n - 1] == row[0] and (n == padded.shape[1] or row[n] == -1) for row, n in zip(padded, lengths))
            return padded[:, 0].tolist()
        return np.asarray(item).reshape(-1).tolist()

    first, states = [], []
    for r in range(2):
        with pipe(r, 2) as p:
            it = iter(p)
            first += [v for _ in range(6) for v in ids(next(it))]
            states.append(it.state())
    combined = fl.combine_states(states)
    rest = []
    for r in range(3):
        with pipe(r, 3) as p:
            rest += [v for item in p.resume(combined) for v in ids(item)]
    assert sorted(first + rest) == list(range(203))


@pytest.mark.parametrize("combine", ["mix", "concatenate", "repeat"])
def test_mix_concatenate_and_repeat_resume_on_other_ranks_exactly_once(combine):
    a, b = fl.from_arrays(np.arange(0, 60)), fl.from_arrays(np.arange(1000, 1050))
    whole = {"mix": lambda: fl.mix([a, b], seed=5, stop="all"), "concatenate": lambda: fl.concatenate([a, b]),
             "repeat": lambda: a.shuffle(seed=2).repeat(2)}[combine]

    def pipe(rank, ranks):
        return whole().shard(rank, ranks).batch(3)

    epoch = sorted(v for bt in whole().batch(3) for v in bt.tolist())
    first, states = [], []
    for r in range(3):
        with pipe(r, 3) as p:
            it = iter(p)
            first += [v for _ in range(4) for v in next(it).tolist()]
            states.append(it.state())
    rest = [v for r in range(2) for bt in pipe(r, 2).resume(states[1]) for v in bt.tolist()]
    assert sorted(first + rest) == epoch


def test_a_four_rank_checkpoint_resumes_on_one_machine_and_back(uninterrupted):
    fresh, order = uninterrupted
    states = [take(pipeline(r, 4), None, 6)[1] for r in range(4)]
    got, state = take(pipeline(), fl.combine_states(states), 50)  # an unsharded pipeline: one rank takes the rest
    assert [index_of(x) for x in got] == order[96:96 + 200]
    rest = [take(pipeline(r, 2), state, None)[0] for r in range(2)]
    assert sorted(index_of(x) for g in rest for x in g) == sorted(order[296:])


def test_a_checkpoint_between_epochs_resumes_on_any_number_of_ranks():
    with pipeline(0, 4) as pipe:
        list(pipe)
        saved = pipe.state_dict()
    with pipeline(2, 3) as pipe:
        pipe.load_state_dict(saved)
        with pipeline(2, 3) as fresh:
            fresh.set_epoch(1)
            assert [x.tobytes() for x in rows(iter(pipe))] == [x.tobytes() for x in rows(iter(fresh))]


def test_state_dict_of_one_rank_loads_on_other_ranks():
    with pipeline(1, 4) as pipe:
        it = iter(pipe)
        for _ in range(5):
            next(it)
        saved = pipe.state_dict()
    with pipeline(0, 2) as pipe:
        pipe.load_state_dict(saved)
        got = rows(iter(pipe))
    assert len(got) == (N - 4 * 5 * B) // 2


# ------------------------------------------------------------------ refusals
def refusal(pipe, state) -> str:
    with pytest.raises(ValueError) as info, pipe:
        pipe.resume(state)
    return str(info.value)


def test_filter_skip_and_buckets_refuse_other_ranks_saying_why():
    base = fl.from_arrays(np.arange(40)).shuffle(seed=0)
    builds = {
        "filter": lambda p: p.filter(lambda x: x % 3).batch(4),
        "skip": lambda p: p.map(lambda x: x, on_error="skip").batch(4),
        "buckets": lambda p: p.map(lambda x: [1] * (x % 7 + 1)).bucket_by_length(len, [4], [2, 2]),
    }
    for name, build in builds.items():
        with build(base.shard(0, 2)) as p:
            it = iter(p)
            next(it)
            state = it.state()
        text = refusal(build(base.shard(0, 3)), state)
        assert "state['shard']" in text and "filter()" in text and "same number of ranks" in text, name
        with pytest.raises(ValueError, match="cannot be combined"):
            fl.combine_states([state])


def test_a_generator_source_refuses_other_ranks_saying_why():
    def gen(shard, shards):
        yield from range(shard, 48, shards)

    def pipe(rank, ranks):
        return fl.from_generator(gen, 6).shuffle(seed=1, window=4).shard(rank, ranks).map(abs, backend="serial").batch(2)

    with pipe(0, 2) as p:
        it = iter(p)
        next(it)
        state = it.state()
    text = refusal(pipe(0, 3), state)
    assert "generator" in text
    with pytest.raises(ValueError, match="no 'shard'"):
        fl.combine_states([state])


def test_take_after_shard_refuses_other_ranks():
    def pipe(rank, ranks):
        return fl.from_arrays(np.arange(100)).shard(rank, ranks).batch(2).take(10)

    with pipe(0, 2) as p:
        it = iter(p)
        next(it)
        state = it.state()
    assert "take(" in refusal(pipe(0, 3), state) and "before shard()" in refusal(pipe(0, 3), state)


def lock_step_states(ranks=3, batches=4, **kw):
    return [take(pipeline(r, ranks, **kw), None, batches)[1] for r in range(ranks)]


def test_rank_states_that_do_not_fit_together_are_refused_naming_the_rank():
    states = lock_step_states()
    with pytest.raises(ValueError, match=r"rank 1 has no state"):
        fl.combine_states([states[0], states[2]])
    with pytest.raises(ValueError, match=r"rank 2 has two"):
        fl.combine_states([states[0], states[1], states[2], states[2]])
    with pipeline(1, 3) as pipe:
        list(pipe)
        it = iter(pipe)
        next(it)
        later = it.state()
    with pytest.raises(ValueError, match=r"states\[1\]\['epoch'\] is 1"):
        fl.combine_states([states[0], later, states[2]])
    other = take(pipeline(1, 3, seed=4), None, 4)[1]
    with pytest.raises(ValueError, match=r"\['shard'\]\['base'\]"):
        fl.combine_states([states[0], other, states[2]])
    with pytest.raises(ValueError, match="a list of every rank"):
        fl.combine_states(states[0])


def test_an_edited_or_truncated_state_is_refused_naming_the_field():
    states = lock_step_states()
    edited = dict(states[1], shard=dict(states[1]["shard"], taken=8))
    with pytest.raises(ValueError, match="digest"):
        fl.combine_states([states[0], edited, states[2]])
    truncated = {k: v for k, v in states[1].items() if k != "task"}
    with pytest.raises(ValueError, match=r"state\['task'\] is missing"):
        fl.combine_states([states[0], truncated, states[2]])
    combined = fl.combine_states(states)
    forged = dict(combined, shard=dict(combined["shard"], taken=[0, 0, 0]))
    assert "state['digest']" in refusal(pipeline(0, 2), forged)
    assert "state['shard']" in refusal(pipeline(0, 2), {k: v for k, v in combined.items() if k != "shard"})
    assert "state['digest']" in refusal(pipeline(0, 2), dict(states[1], task=5))  # one rank's state, edited


def test_a_state_of_another_pipeline_seed_or_dataset_length_is_refused():
    states = lock_step_states()
    combined = fl.combine_states(states)
    text = refusal(pipeline(0, 2, seed=9), combined)
    assert "state['fingerprint']" in text and "shuffle(seed=3)" in text
    text = refusal(pipeline(0, 2, seed=9), states[0])
    assert "state['fingerprint']" in text and "[3]" in text
    assert "state['fingerprint']" in refusal(pipeline(0, 2, n=N - 8), combined)
    assert "state['fingerprint']" in refusal(pipeline(0, 2, batch=8), states[0])


def test_states_of_sharded_pipelines_stay_small_and_exact_on_their_own_ranks():
    state = lock_step_states(ranks=2, batches=3)[1]
    assert set(state["shard"]) == {"index", "count", "even", "base", "taken"} and state["shard"]["taken"] == 12
    assert len(json.dumps(fl.combine_states(lock_step_states(ranks=2, batches=3)))) < 400
    got, _ = take(pipeline(1, 2), state, None)
    whole, _ = take(pipeline(1, 2), None, None)
    assert [x.tobytes() for x in got] == [x.tobytes() for x in whole[12:]]


def test_a_torch_loader_state_dict_of_one_rank_loads_on_other_ranks_and_delivers_its_whole_share():
    pytest.importorskip("torch")
    first, saved = set(), None
    for r in range(2):
        loader = pipeline(r, 2).torch()
        it = iter(loader)
        first |= {index_of(row) for _ in range(3) for row in next(it).numpy()}
        saved = loader.state_dict()
    rest = []
    for r in range(3):
        loader = pipeline(r, 3).torch()
        loader.load_state_dict(json.loads(json.dumps(saved)))
        rest += [index_of(row) for batch in loader for row in batch.numpy()]
    assert sorted(rest) == sorted(set(range(N)) - first)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 120), batch=st.integers(1, 7), layouts=st.lists(st.integers(1, 5), min_size=2, max_size=3),
       even=st.sampled_from([None, "drop", "pad"]), drop=st.booleans(), data=st.data())
def test_any_stops_on_any_ranks_continue_on_any_ranks_without_repeating_a_sample(n, batch, layouts, even, drop, data):
    def pipe(r, w):
        return fl.from_arrays(np.arange(n)).shuffle(seed=n).shard(r, w, even=even).batch(batch, drop_remainder=drop)

    def run(p, start, stop):
        it = iter(p) if start is None else p.resume(start)
        got = []
        while stop is None or len(got) < stop * batch:
            b = next(it, None)
            if b is None:
                break
            got += b.tolist()
        return got, it.state()

    seen, state = [], None
    for hop, ranks in enumerate(layouts):
        last = hop == len(layouts) - 1
        lock = data.draw(st.booleans())  # lock step: every rank as many batches, and one rank's state for all
        stops = [None if last else data.draw(st.integers(0, len(pipe(r, ranks)))) for r in range(ranks)]
        stops = [stops[0]] * ranks if lock else stops
        runs = [run(pipe(r, ranks), state, k) for r, k in enumerate(stops)]
        seen += [i for got, _ in runs for i in got]
        state = runs[data.draw(st.integers(0, ranks - 1))][1] if lock else fl.combine_states([s for _, s in runs])
        if lock and not last:
            try:
                with pipe(0, layouts[hop + 1]) as p:
                    p.resume(state).close()
            except ValueError as refusal:  # a rank at the end of a shorter share: the others may have gone on
                assert "fl.combine_states" in str(refusal) and "state['batches']" in str(refusal)
                state = fl.combine_states([s for _, s in runs])
    if even == "pad":  # padding repeats samples; without drop_remainder every sample comes
        assert drop or set(seen) == set(range(n))
    else:
        assert len(seen) == len(set(seen)), "a sample delivered twice"
        if even is None and not drop:
            assert sorted(seen) == list(range(n))


def test_one_rank_at_the_end_of_a_shorter_share_is_refused_and_the_combined_states_resume():
    def pipe(r, w):
        return fl.from_arrays(np.arange(10)).shard(r, w).batch(2)  # shares of 3, 3, 2, 2 samples: 2, 2, 1, 1 batches

    runs = [take(pipe(r, 4), None, 1) for r in range(4)]
    text = refusal(pipe(0, 2), runs[3][1])
    assert "state['batches']" in text and "fl.combine_states" in text and "even='drop'" in text
    rest = [take(pipe(r, 2), fl.combine_states([s for _, s in runs]), None)[0] for r in range(2)]
    seen = [int(x[0]) for got, _ in runs for x in got] + [int(x[0]) for got in rest for x in got]
    assert sorted(seen) == list(range(10))
