"""take / skip / repeat / fl.concatenate / fl.mix: the steps tf.data and Grain users expect.

Each is checked against its definition in terms of plain epochs of the
pipelines it is made of (``take(n)`` is the first ``n`` samples of the
epoch, ``repeat(c)`` is ``c`` epochs one after another, ...), on serial,
thread and process, with 1 and 8 workers, and resumed from every position.
"""

from __future__ import annotations

import itertools
import json
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import feedline as fl
from feedline import SampleError


def ident(x):
    return x


def jitter(x, rng):
    """A random draw per sample: shows which rng a sample was given."""
    return np.int64(int(x) * 1000 + int(rng.integers(1000)))


def plus_half_million(x):
    return x + 500_000


def fail_on_3(x):
    if int(x) == 3:
        raise ValueError("sample three is bad")
    return x


def values(pipe_or_iterator) -> list:
    """Every sample (or every row of every batch) as Python ints, in delivery order."""
    out = []
    for item in pipe_or_iterator:
        out.extend(int(v) for v in np.asarray(item).reshape(-1))
    return out


def epoch_values(pipe, epoch: int) -> list:
    """Epoch ``epoch`` of ``pipe`` on its own; its workers closed after (an automatic map's trial may start some)."""
    with pipe:
        return values(pipe.epoch(epoch))


def arange(n: int, start: int = 0):
    return fl.from_arrays(np.arange(start, start + n, dtype=np.int64))


def run_on(pipe, backend: str, workers: int):
    """The same pipeline, its per-sample work on ``backend`` with ``workers``."""
    return pipe.map(ident, backend=backend, workers=workers)


# ------------------------------------------------------------ take / skip
@pytest.mark.parametrize("workers", [1, 8])
def test_take_and_skip_cut_each_epochs_order(backend, workers, no_leaks):
    base = arange(50).shuffle(seed=4)
    full = [epoch_values(base, e) for e in (0, 1)]
    with run_on(base.skip(7).take(20), backend, workers).batch(6) as pipe:
        assert len(pipe) == 4
        assert [values(pipe), values(pipe)] == [full[0][7:27], full[1][7:27]]


def test_take_after_shuffle_is_a_new_subset_each_epoch_and_before_it_the_same_subset(no_leaks):
    after = arange(100).shuffle(seed=1).take(10)
    before = arange(100).take(10).shuffle(seed=1)
    assert set(epoch_values(after, 0)) != set(epoch_values(after, 1))
    assert set(epoch_values(before, 0)) == set(epoch_values(before, 1)) == set(range(10))
    assert epoch_values(before, 0) != epoch_values(before, 1)


def test_take_and_skip_after_batch_count_batches(no_leaks):
    pipe = arange(23).batch(4)
    assert [b.tolist() for b in pipe.take(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [b.tolist() for b in pipe.skip(4)] == [[16, 17, 18, 19], [20, 21, 22]]
    assert len(pipe.skip(1).take(3)) == 3
    assert [b.tolist() for b in arange(10).batch(4, drop_remainder=True).take(5)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_take_after_padded_batch_counts_batches(no_leaks):
    pipe = fl.from_sequence([[1], [2, 2], [3], [4, 4, 4], [5]]).padded_batch(2).take(2)
    assert [b.tolist() for b in pipe] == [[[1, 0], [2, 2]], [[3, 0, 0], [4, 4, 4]]]


def test_take_more_than_the_epoch_and_take_zero(no_leaks):
    assert values(arange(5).take(99)) == [0, 1, 2, 3, 4]
    assert values(arange(5).take(0)) == []
    assert values(arange(5).skip(99)) == []
    assert len(arange(5).skip(2)) == 3


# ---------------------------------------------------------------- repeat
@pytest.mark.parametrize("workers", [1, 8])
def test_repeat_is_count_epochs_of_the_pipeline_before_it(backend, workers, no_leaks):
    base = arange(13).shuffle(seed=2)
    passes = [epoch_values(base, k) for k in range(6)]
    with run_on(base.repeat(3), backend, workers).batch(5) as pipe:
        assert len(pipe) == 8  # 39 samples
        assert values(pipe) == passes[0] + passes[1] + passes[2]
        assert values(pipe) == passes[3] + passes[4] + passes[5]


def test_repeat_gives_each_pass_its_own_random_draws_on_every_backend(backend, no_leaks):
    with arange(20).map(jitter, backend=backend, workers=2).repeat(2).batch(8) as pipe:
        got = values(pipe.epoch(0))
    first, second = got[:20], got[20:]
    assert [v // 1000 for v in first] == [v // 1000 for v in second] == list(range(20))
    assert first != second  # the same sample, another pass: another draw
    with arange(20).map(jitter, backend="serial").repeat(2).batch(8) as serial:
        assert values(serial.epoch(0)) == got


def test_repeat_keeps_filter_and_skips_working(no_leaks):
    pipe = arange(10).filter(lambda x: int(x) % 2 == 0).repeat(2).batch(4)
    assert values(pipe) == [0, 2, 4, 6, 8] * 2
    with pytest.warns(RuntimeWarning, match="skipped 2 samples"):
        skipped = values(arange(6).map(fail_on_3, on_error="skip").repeat(2))
    assert skipped == [0, 1, 2, 4, 5] * 2


def test_endless_repeat_runs_pass_after_pass_and_resumes_across_passes(backend, no_leaks):
    with arange(5).shuffle(seed=3).map(ident, backend=backend, workers=2).repeat() as pipe:
        with pytest.raises(TypeError, match="never ends"):
            len(pipe)
        it = iter(pipe)
        got = [int(x) for x in itertools.islice(it, 13)]
        assert got == sum((epoch_values(arange(5).shuffle(seed=3), k) for k in range(3)), [])[:13]
        assert it.epoch == 2
        state = json.loads(json.dumps(it.state()))
        rest = [int(x) for x in itertools.islice(it, 9)]
        it.close()
        assert [int(x) for x in itertools.islice(pipe.resume(state), 9)] == rest


def test_endless_repeat_batches_across_passes_and_resumes(backend, no_leaks):
    base = arange(10).shuffle(seed=1)
    stream = sum((epoch_values(base, k) for k in range(8)), [])
    with base.map(ident, backend=backend, workers=2).repeat().batch(4, drop_remainder=True) as pipe:
        it = iter(pipe)
        batches = [b.tolist() for b in itertools.islice(it, 9)]
        assert all(len(b) == 4 for b in batches) and sum(batches, []) == stream[:36]
        state = it.state()
        rest = [b.tolist() for b in itertools.islice(it, 5)]
        it.close()
        assert [b.tolist() for b in itertools.islice(pipe.resume(state), 5)] == rest == [stream[36 + 4 * k: 40 + 4 * k] for k in range(5)]


def test_repeat_then_take_makes_epochs_of_n_samples(no_leaks):
    base = arange(5).shuffle(seed=3)
    pipe = base.repeat().take(12).batch(5)
    assert len(pipe) == 3
    assert values(pipe.epoch(0)) == (epoch_values(base, 0) + epoch_values(base, 1) + epoch_values(base, 2))[:12]
    assert values(pipe.epoch(1)) == (epoch_values(base, 3) + epoch_values(base, 4) + epoch_values(base, 5))[:12]
    steps = base.repeat().batch(4).take(3)  # tf.data's ds.repeat().batch(b).take(steps)
    assert len(steps) == 3 and values(steps.epoch(1)) == (epoch_values(base, 3) + epoch_values(base, 4) + epoch_values(base, 5))[:12]


# ------------------------------------------------------------ concatenate
@pytest.mark.parametrize("workers", [1, 8])
def test_concatenate_is_each_inputs_epoch_in_turn_with_its_own_steps(backend, workers, no_leaks):
    a = arange(11).shuffle(seed=5).map(jitter)
    b = arange(7, start=100).map(plus_half_million)
    with run_on(fl.concatenate([a, b]), backend, workers).batch(4) as pipe:
        assert len(pipe) == 5
        for epoch in (0, 1):
            # each input's samples are exactly what it gives alone in that epoch, rng draws included
            assert values(pipe) == epoch_values(a, epoch) + epoch_values(b, epoch)


def test_shuffle_after_concatenate_mixes_the_inputs(no_leaks):
    pipe = fl.concatenate([arange(10), arange(10, start=10)]).shuffle(seed=0)
    got = epoch_values(pipe, 0)
    assert sorted(got) == list(range(20)) and got != list(range(20))
    assert epoch_values(pipe, 1) != got


# ------------------------------------------------------------------- mix
def subsequence(got: list, wanted: set) -> list:
    return [v for v in got if v in wanted]


@pytest.mark.parametrize("workers", [1, 8])
def test_mix_draws_from_each_input_in_its_own_order_on_every_backend(backend, workers, no_leaks):
    a, b = arange(40).shuffle(seed=1), arange(20, start=1000).shuffle(seed=2)
    mixed = fl.mix([a, b], weights=[2, 1], seed=9, stop="all")
    serial = [epoch_values(mixed, e) for e in (0, 1)]
    with run_on(mixed, backend, workers).batch(7) as pipe:
        got = [values(pipe), values(pipe)]
    assert got == serial
    for epoch, epoch_got in enumerate(got):
        assert subsequence(epoch_got, set(range(40))) == epoch_values(a, epoch)
        assert subsequence(epoch_got, set(range(1000, 1020))) == epoch_values(b, epoch)
    assert got[0] != got[1]


def test_mix_stop_first_ends_when_an_input_runs_out_in_exact_proportion(no_leaks):
    a, b = arange(100), arange(30, start=1000)
    pipe = fl.mix([a, b], weights=[0.75, 0.25], seed=3, stop="first")
    got = values(pipe)
    assert len(pipe) == len(got) == 120  # b (30 samples, a quarter) limits the epoch to 120
    assert subsequence(got, set(range(100))) == list(range(90))
    assert subsequence(got, set(range(1000, 1030))) == list(range(1000, 1030))


def test_mix_stop_never_cycles_the_shorter_input_in_a_new_order(no_leaks):
    a, b = arange(30), arange(4, start=1000).shuffle(seed=6)
    pipe = fl.mix([a, b], seed=3, stop="never")
    got = values(pipe)
    assert len(got) == 60 and subsequence(got, set(range(30))) == list(range(30))
    from_b = subsequence(got, set(range(1000, 1004)))
    passes = [epoch_values(b, k) for k in range(8)]  # epoch 0 reads b's epochs 0..7
    assert from_b == sum(passes, [])[:30]
    assert len(set(map(tuple, passes))) > 1


def test_mix_proportions_hold_over_many_samples(no_leaks):
    children = [arange(6000, start=k * 10_000) for k in range(3)]
    pipe = fl.mix(children, weights=[0.5, 0.3, 0.2], seed=11, stop="all").batch(500)
    got = np.array(values(pipe)) // 10_000
    assert np.bincount(got).tolist() == [6000, 6000, 6000]
    head = np.bincount(got[:6000], minlength=3) / 6000  # before any input runs out
    assert np.allclose(head, [0.5, 0.3, 0.2], atol=0.03), head
    for window in np.split(got[:6000], 6):
        assert abs(np.mean(window == 0) - 0.5) < 0.08


def test_mix_is_deterministic_across_runs_and_differs_by_seed(no_leaks):
    script = textwrap.dedent("""
        import numpy as np, feedline as fl
        a = fl.from_arrays(np.arange(30)).shuffle(seed=1)
        b = fl.from_arrays(np.arange(100, 120))
        pipe = fl.mix([a, b], weights=[1, 2], seed=5, stop="all").batch(4)
        print(json.dumps([int(v) for batch in pipe.epoch(3) for v in batch]))
        it = pipe.epoch(3)
        next(it), next(it)
        print(json.dumps(it.state()))
    """)
    out = subprocess.run([sys.executable, "-c", "import json\n" + script], capture_output=True, text=True, timeout=120,
                         check=True).stdout.splitlines()
    a, b = arange(30).shuffle(seed=1), arange(20, start=100)
    here = fl.mix([a, b], weights=[1, 2], seed=5, stop="all").batch(4)
    assert json.loads(out[0]) == values(here.epoch(3))
    assert values(here.resume(json.loads(out[1]))) == json.loads(out[0])[8:]  # a checkpoint from another process
    assert values(fl.mix([a, b], weights=[1, 2], seed=6, stop="all").epoch(3)) != values(here.epoch(3))


def test_mix_without_seed_draws_one_and_prints_it(no_leaks):
    pipe = fl.mix([arange(3), arange(3, start=10)])
    assert f"seed={pipe.source.seed}" in repr(pipe) and "stop='first'" in repr(pipe)
    again = fl.mix([arange(3), arange(3, start=10)], seed=pipe.source.seed)
    assert [epoch_values(pipe, e) for e in (0, 1)] == [epoch_values(again, e) for e in (0, 1)]


def test_inputs_may_be_caches(tmp_path, no_leaks):
    pytest.importorskip("pyarrow")
    a = arange(6).map(plus_half_million).cache(tmp_path / "a")
    pipe = fl.mix([a, arange(4, start=100)], seed=2, stop="all").batch(4)
    got = values(pipe)
    assert sorted(got) == [100, 101, 102, 103] + [500_000 + i for i in range(6)]
    assert values(pipe.epoch(0)) == got and (tmp_path / "a" / "manifest.json").exists()


def test_nested_composites_and_pickling(no_leaks):
    inner = fl.mix([arange(6), arange(6, start=100)], seed=1, stop="all")
    outer = fl.concatenate([inner.repeat(2), arange(3, start=900)])
    assert values(outer) == epoch_values(inner, 0) + epoch_values(inner, 1) + [900, 901, 902]
    again = pickle.loads(pickle.dumps(outer))
    assert values(again.epoch(1)) == values(outer.epoch(1))
    batched = outer.batch(4)
    assert batched.plan.part.bulk_read and values(batched.epoch(1)) == values(outer.epoch(1))  # nested bulk reads


def test_bulk_reads_of_a_mix_equal_sample_by_sample_reads(no_leaks):
    def inputs():
        a = fl.from_arrays({"x": np.arange(30), "y": np.arange(60.0).reshape(30, 2)}).shuffle(seed=1)
        b = fl.from_arrays({"x": np.arange(100, 110), "y": -np.ones((10, 2))})
        return [a, b]
    bulk = fl.mix(inputs(), weights=[1, 1], seed=2, stop="all").batch(6)
    per_sample = fl.mix(inputs(), weights=[1, 1], seed=2, stop="all").map(ident, backend="serial").batch(6)
    assert bulk.plan.part.bulk_read and not per_sample.plan.part.bulk_read
    for epoch in (0, 1):
        got, want = list(bulk.epoch(epoch)), list(per_sample.epoch(epoch))
        assert [(b["x"].tolist(), b["y"].tolist()) for b in got] == [(b["x"].tolist(), b["y"].tolist()) for b in want]
    mixed_dtypes = fl.concatenate([arange(3), fl.from_arrays(np.arange(5, dtype=np.float32))])
    with pytest.raises(TypeError, match="input 0 and input 1 differ in the sample: int64 in input 0, float32 in input 1"):
        list(mixed_dtypes.batch(4))  # bulk reads refuse them as reads one by one do, not upcast to float64


# ---------------------------------------------------------------- resume
def composites():
    a = arange(17).shuffle(seed=1).map(jitter)
    b = arange(9, start=100)
    return {
        "take": arange(40).shuffle(seed=2).skip(3).take(21),
        "repeat": arange(9).shuffle(seed=2).map(jitter).repeat(3),
        "concatenate": fl.concatenate([a, b]),
        "mix": fl.mix([a, b], weights=[1, 3], seed=4, stop="never"),
    }


@pytest.mark.parametrize("kind", ["take", "repeat", "concatenate", "mix"])
@pytest.mark.parametrize("batch", [None, 4])
def test_resume_at_every_position_gives_the_rest_exactly(kind, batch, no_leaks):
    pipe = composites()[kind]
    pipe = pipe.batch(batch) if batch else pipe
    with pipe:
        full = [np.asarray(item).tolist() for item in pipe.epoch(2)]
        for k in range(len(full) + 1):
            it = pipe.epoch(2)
            for _ in range(k):
                next(it)
            state = json.loads(json.dumps(it.state()))
            assert [np.asarray(item).tolist() for item in pipe.resume(state)] == full[k:], (kind, k)


@pytest.mark.parametrize("kind", ["repeat", "mix"])
def test_resume_mid_epoch_on_worker_backends(backend, kind, no_leaks):
    with run_on(composites()[kind], backend, 3).batch(4) as pipe:
        full = values(pipe.epoch(1))
        it = pipe.epoch(1)
        head = values(itertools.islice(it, 3))
        state = it.state()
        it.close()
        assert head + values(pipe.resume(state)) == full


def test_a_state_of_another_mix_is_refused(no_leaks):
    a, b = arange(10), arange(10, start=100)
    it = fl.mix([a, b], seed=1).batch(2).epoch(0)
    next(it)
    with pytest.raises(ValueError, match="fingerprint"):
        fl.mix([a, b], seed=2).batch(2).resume(it.state())
    with pytest.raises(ValueError, match="fingerprint"):
        fl.mix([a, b.shuffle(seed=3)], seed=1).batch(2).resume(it.state())


# ----------------------------------------------------------- what is said
def test_errors_in_an_inputs_map_name_the_input_and_sample(backend, no_leaks):
    pipe = fl.concatenate([arange(4), arange(5).map(fail_on_3)]).map(ident, backend=backend, workers=2).batch(3)
    with pipe, pytest.raises(SampleError, match=r"concatenate\(\) input 1, sample 3") as info:
        values(pipe)
    assert "sample three is bad" in str(info.value.__cause__)


def test_stats_count_the_samples_of_a_mix(no_leaks):
    pipe = fl.mix([arange(30), arange(10, start=100)], weights=[3, 1], seed=0).batch(8)
    it = iter(pipe)
    values(it)
    assert it.stats().samples == 40 and it.stats().batches == 5


def test_print_shows_the_inputs(no_leaks):
    text = repr(fl.mix([arange(3).shuffle(seed=7), arange(2)], weights=[2, 1], seed=5, stop="all").batch(2))
    assert "mix(weights=[2, 1], seed=5, stop='all') of:" in text and "shuffle(seed=7)" in text and ".batch(2)" in text
    assert repr(arange(3).take(2).skip(1)).endswith(".take(2)\n  .skip(1)")


@pytest.mark.parametrize("make, words", [
    (lambda: arange(5).take(-1), "take(n) must be an integer >= 0"),
    (lambda: arange(5).skip(1.5), "skip(n) must be an integer >= 0"),
    (lambda: arange(5).take("3"), "take(n)"),
    (lambda: arange(5).repeat(0), "repeat(count=0) must be an integer >= 1"),
    (lambda: arange(5).batch(2).repeat(2), "put repeat() before batch()"),
    (lambda: arange(5).repeat().shuffle(seed=1), "shuffle(seed=1) after repeat() without a count"),
    (lambda: arange(5).repeat().repeat(2), "already repeats without end"),
    (lambda: arange(5).filter(bool).batch(2).take(1), "take() after batch() counts batches"),
    (lambda: fl.from_sequence([[1], [2, 2]]).bucket_by_length(len, [2], [1, 1]).skip(1), "skip() after bucket_by_length()"),
    (lambda: fl.from_generator(lambda s, n: iter(range(3)), num_shards=1).take(2), "take() needs a random-access source"),
    (lambda: fl.from_generator(lambda s, n: iter(range(3)), num_shards=1).repeat(2), "repeat(count) needs a random-access"),
    (lambda: fl.mix(arange(3)), "mix(pipes) takes a list of pipelines"),
    (lambda: fl.mix([]), "at least one pipeline"),
    (lambda: fl.mix([arange(3), np.arange(3)]), "mix(pipes[1]) must be a feedline pipeline"),
    (lambda: fl.mix([arange(3), arange(3)], weights=[1]), "one weight per pipeline (2)"),
    (lambda: fl.mix([arange(3), arange(3)], weights=[1, -2]), "weights[1] is -2"),
    (lambda: fl.mix([arange(3), arange(3)], weights=[1, 0]), "weights[1] is 0"),
    (lambda: fl.mix([arange(3)], stop="longest"), "mix(stop='longest')"),
    (lambda: fl.mix([arange(3)], seed=-1), "mix(seed=-1)"),
    (lambda: fl.mix([arange(3), arange(3).batch(2)]), "mix(pipes[1]) has batch(2); mix() combines samples"),
    (lambda: fl.concatenate([arange(3).filter(bool)]), "concatenate(pipes[0]) has filter(bool)"),
    (lambda: fl.concatenate([arange(3).map(ident, on_error="skip")]), "can drop samples"),
    (lambda: fl.concatenate([arange(3).map(ident, workers=2)]), "give backend= or workers= on a map() after"),
    (lambda: fl.mix([fl.from_generator(lambda s, n: iter(range(3)), num_shards=1)]), "mix(pipes[0]) reads a generator"),
    (lambda: fl.mix([arange(3), arange(0)], stop="never").batch(2).epoch(0), "mix() input 1 has no samples"),
    (lambda: fl.mix([arange(3)]).cache("unused"), "cache each input before combining them"),
    (lambda: fl.mix([arange(3).repeat(), arange(3)]), "mix(pipes[0]) repeats without end"),
    (lambda: len(fl.mix([arange(3), arange(10**6)], weights=[1, 1e-6], stop="never")), "would make epochs of"),
    (lambda: arange(3).repeat(2).cache("unused"), "cache() after fl.mix(), fl.concatenate() or repeat()"),
])
def test_bad_arguments_are_refused_naming_them(make, words, no_leaks):
    with pytest.raises((ValueError, TypeError)) as info:
        make()
    assert words in str(info.value)


def test_concatenate_of_int64_and_float64_inputs_is_refused_naming_both_and_the_fix(backend, no_leaks):
    ints, floats = fl.from_arrays(np.arange(10)), fl.from_arrays(np.arange(10, dtype=np.float64))
    pipe = fl.concatenate([ints, floats]).map(lambda x: x, backend=backend, workers=2).batch(4)
    with pipe, pytest.raises(SampleError) as caught:
        list(pipe)
    message = str(caught.value.__cause__)
    assert "concatenate() input 0 and input 1 differ in the sample: int64 in input 0, float64 in input 1" in message
    assert "pipes[1].map(" in message


def test_mix_of_inputs_whose_field_dtypes_differ_is_refused_naming_the_field(no_leaks):
    a = fl.from_arrays({"x": np.zeros(8, np.float32), "y": np.arange(8)})
    b = fl.from_arrays({"x": np.zeros(8, np.float64), "y": np.arange(8)})
    with pytest.raises(TypeError, match=r"mix\(\) input \d and input \d differ in field \['x'\]: float(32|64) in input"):
        list(fl.mix([a, b], seed=0).batch(4))


def test_concatenate_of_inputs_with_the_same_dtypes_still_batches_them(no_leaks):
    pipe = fl.concatenate([fl.from_arrays(np.arange(3)), fl.from_arrays(np.arange(3, 6))]).map(lambda x: x).batch(6)
    with pipe:
        (batch,) = list(pipe)
    assert batch.dtype == np.int64 and batch.tolist() == list(range(6))
