"""Generator batches cut across shards; padded batches and length buckets (issue 16).

Every test runs on each backend (the ``backend`` fixture) and compares
exact batch contents with what the rules say, so a change in cutting,
padding or routing fails here, not only a count.
"""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

import feedline as fl
from feedline import SampleError


# ------------------------------------------------------------------ helpers
def stride_factory(total: int):
    """Shard ``s`` of ``n`` yields s, s + n, s + 2n, ... below ``total``."""

    def factory(shard, num_shards):
        yield from range(shard, total, num_shards)

    return factory


def expected_generator_batches(total: int, num_shards: int, size: int, drop_remainder: bool = False, keep=lambda v: True) -> list:
    """The rule: tasks take ``size`` kept items of each shard in turn (shard order); rows are cut into batches across them."""
    shards = [[v for v in range(s, total, num_shards) if keep(v)] for s in range(num_shards)]
    rows = []
    while any(shards):
        for s in range(num_shards):
            rows += shards[s][:size]
            shards[s] = shards[s][size:]
    batches = [rows[i : i + size] for i in range(0, len(rows), size)]
    if drop_remainder and batches and len(batches[-1]) < size:
        batches.pop()
    return batches


def as_lists(batches) -> list:
    return [np.asarray(b).tolist() for b in batches]


def resume_everywhere(build, epoch: int = 1, convert=lambda b: b):
    """Check that resuming from the state after every batch yields exactly the rest of the epoch."""
    with build() as pipe:
        whole = [convert(b) for b in pipe.epoch(epoch)]
    for stop in range(len(whole) + 1):
        with build() as pipe:
            it = pipe.epoch(epoch)
            head = [convert(b) for b in itertools.islice(it, stop)]
            state = json.loads(json.dumps(it.state()))  # a checkpoint goes through JSON
            it.close()
        with build() as pipe:
            tail = [convert(b) for b in pipe.resume(state)]
        assert head + tail == whole, f"resumed after batch {stop}: {state}"
    return whole


# ------------------------------------------------- 1. generators, across shards
@pytest.mark.parametrize("workers", [1, 8])
def test_generator_batches_are_cut_across_shards(backend, workers, no_leaks):
    for num_shards in (1, 3, 8):
        pipe = fl.from_generator(stride_factory(100), num_shards).map(lambda v: v, backend=backend, workers=workers).batch(8)
        with pipe:
            got = as_lists(pipe)
        assert got == expected_generator_batches(100, num_shards, 8), f"{num_shards} shards"
        assert [len(b) for b in got[:-1]] == [8] * 12 and len(got[-1]) == 4, "every batch full but the epoch's last"


@pytest.mark.parametrize("num_shards", [1, 3, 8])
def test_drop_remainder_drops_less_than_one_batch_per_epoch(backend, num_shards, no_leaks):
    pipe = fl.from_generator(stride_factory(100), num_shards).map(lambda v: v, backend=backend, workers=2)
    with pipe.batch(8, drop_remainder=True) as dropping, pipe.batch(8) as keeping:
        dropped, kept = as_lists(dropping), as_lists(keeping)
    assert dropped == expected_generator_batches(100, num_shards, 8, drop_remainder=True)
    assert sum(map(len, dropped)) == 96, "100 samples, batch 8: only the last 4 are dropped (was 36 with 8 shards)"
    assert sum(map(len, kept)) == 100 and len(kept) == 13


def test_generator_with_samples_per_epoch_mixes_shards_in_a_batch(backend, no_leaks):
    def endless(shard, num_shards):
        yield from itertools.count(shard * 1000)

    pipe = fl.from_generator(endless, 3, samples_per_epoch=10).map(lambda v: v, backend=backend, workers=2).batch(3)
    with pipe:
        got = as_lists(pipe)
    # shares 4, 3, 3; tasks of 3 items: shard 0 gives [0, 1, 2] then [3]
    assert got == [[0, 1, 2], [1000, 1001, 1002], [2000, 2001, 2002], [3]]


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_generator_batches_resume_exactly_at_every_batch(backend, drop_remainder, no_leaks):
    def build():
        return (fl.from_generator(stride_factory(40), 3).shuffle(seed=3)
                .map(lambda v: v * 2, backend=backend, workers=2).batch(6, drop_remainder=drop_remainder))

    whole = resume_everywhere(build, convert=lambda b: b.tolist())
    values = [v for b in whole for v in b]
    assert len(values) == len(set(values)) == (36 if drop_remainder else 40)
    assert all(len(b) == 6 for b in whole[:-1])


def test_a_resume_inside_a_task_keeps_its_offset(no_leaks):
    # batch 3 over two shards of 5 items: tasks [0, 2, 4] [1, 3, 5] [6, 8] [7, 9]; the third batch ends inside the last task
    def build():
        return fl.from_generator(stride_factory(10), 2).map(lambda v: v, backend="serial").batch(3)

    with build() as pipe:
        it = iter(pipe)
        assert [next(it).tolist() for _ in range(3)] == [[0, 2, 4], [1, 3, 5], [6, 8, 7]]
        state = it.state()
        it.close()
    assert state["offset"] == 1, "one of the last task's rows was handed out"
    with build() as pipe:
        assert as_lists(pipe.resume(state)) == [[9]]


def test_map_batch_of_a_generator_sees_full_batches(backend, no_leaks):
    pipe = fl.from_generator(stride_factory(20), 3).map(lambda v: v, backend=backend, workers=2).batch(4).map_batch(lambda b: b * 10)
    with pipe:
        got = as_lists(pipe)
    assert got == [[v * 10 for v in b] for b in expected_generator_batches(20, 3, 4)]


def test_a_generator_that_skips_samples_still_fills_its_batches(backend, no_leaks):
    def check(v):
        if v % 5 == 0:
            raise ValueError("bad sample")
        return v

    pipe = fl.from_generator(stride_factory(30), 3).map(check, backend=backend, workers=2, on_error="skip").batch(4)
    with pipe, pytest.warns(RuntimeWarning, match="skipped 6 samples"):
        got = as_lists(pipe)
    assert got == expected_generator_batches(30, 3, 4, keep=lambda v: v % 5), "a task reads until it holds a batch"


# ------------------------------------------------------- 2. padded batches
def clip_lengths() -> list:
    return [3, 7, 1, 5, 0, 2, 6, 4, 8, 2, 3]


def make_clips() -> list:
    """Audio clips of different lengths (float32), the value of each item encoding (clip, position)."""
    return [np.arange(n, dtype=np.float32) + 100 * i + 1 for i, n in enumerate(clip_lengths())]


def padded(arrays, width, value=0):
    out = np.full((len(arrays), width), value, dtype=arrays[0].dtype)
    for row, a in enumerate(arrays):
        out[row, : len(a)] = a
    return out


def test_padded_batch_pads_audio_to_the_longest_with_lengths_and_mask(backend, no_leaks):
    clips = make_clips()
    pipe = (fl.from_sequence(list(range(len(clips)))).map(lambda i: {"audio": clips[i], "label": i}, backend=backend, workers=2)
            .padded_batch(4, lengths=True, mask=True))
    with pipe:
        got = list(pipe)
    assert len(got) == 3
    for k, batch in enumerate(got):
        rows = clips[4 * k : 4 * k + 4]
        width = max(len(c) for c in rows)
        np.testing.assert_array_equal(batch["audio"], padded(rows, width))
        assert batch["audio"].dtype == np.float32
        assert batch["audio_lengths"].tolist() == [len(c) for c in rows]
        assert batch["audio_mask"].tolist() == [[j < len(c) for j in range(width)] for c in rows]
        assert batch["label"].tolist() == list(range(4 * k, 4 * k + len(rows)))


def test_padded_batch_of_token_lists(backend, no_leaks):
    sentences = [[5, 3, 9], [7], [], [4, 4, 4, 4, 4], [1, 2]]
    pipe = fl.from_sequence(sentences).map(lambda s: (s, len(s)), backend=backend, workers=2).padded_batch(
        5, pad_value={0: -1}, pad_multiple=4, lengths=True)
    with pipe:
        (tokens, count, lengths), = list(pipe)
    assert tokens.dtype.kind == "i", "an empty sentence does not turn token ids into floats"
    assert tokens.tolist() == [s + [-1] * (8 - len(s)) for s in sentences], "longest 5, rounded up to a multiple of 4"
    assert count.tolist() == lengths.tolist() == [3, 1, 0, 5, 2]


def test_pad_to_a_fixed_length_and_per_field_values(backend, no_leaks):
    samples = [{"tokens": np.array([1, 2]), "frames": np.ones((3, 2), np.float32), "id": "a"},
               {"tokens": np.array([3]), "frames": np.ones((1, 2), np.float32), "id": "b"}]
    pipe = fl.from_sequence(samples).map(lambda s: s, backend=backend, workers=2).padded_batch(
        2, pad_value={"tokens": 0, "frames": -1.0}, pad_to={"tokens": 4})
    with pipe:
        (batch,) = list(pipe)
    assert batch["tokens"].tolist() == [[1, 2, 0, 0], [3, 0, 0, 0]]
    assert batch["frames"].shape == (2, 3, 2) and batch["frames"][1, 1:].tolist() == [[-1, -1], [-1, -1]]
    assert batch["id"] == ["a", "b"]


def test_padding_along_another_axis(no_leaks):
    stereo = [np.ones((2, n), np.int16) for n in (3, 5)]  # (channels, time)
    with fl.from_sequence(stereo).padded_batch(2, axis=-1, mask=True) as pipe:
        (audio, mask), = list(pipe)
    assert audio.shape == (2, 2, 5) and audio[0, :, 3:].sum() == 0
    assert mask.tolist() == [[True] * 3 + [False] * 2, [True] * 5]


def test_a_sample_longer_than_pad_to_is_named(backend, no_leaks):
    pipe = fl.from_sequence([[1], [1, 2, 3], [1, 2]]).map(list, backend=backend, workers=2).padded_batch(3, pad_to=2)
    with pipe, pytest.raises(SampleError, match="sample 1.*more than pad_to allows") as info:
        list(pipe)
    assert info.value.index == 1


def test_bad_padding_arguments_are_refused():
    pipe = fl.from_sequence([[1]])
    with pytest.raises(ValueError, match="pad_value must be a number"):
        pipe.padded_batch(2, pad_value="x")
    with pytest.raises(ValueError, match="pad_to must be an integer >= 1"):
        pipe.padded_batch(2, pad_to=0)
    with pytest.raises(ValueError, match="pad_multiple"):
        pipe.padded_batch(2, pad_multiple=-8)
    with pytest.raises(ValueError, match="3 buckets .* needs 3 sizes"):
        pipe.bucket_by_length(len, [2, 4], [8, 8])
    with pytest.raises(ValueError, match="increase strictly"):
        pipe.bucket_by_length(len, [4, 2], [8, 8, 8])
    with pytest.raises(TypeError, match="length_fn"):
        pipe.bucket_by_length(None, [4], [8, 8])


def test_a_pad_value_that_does_not_fit_the_dtype_is_named(no_leaks):
    with fl.from_sequence([np.array([1], np.uint8)]).padded_batch(1, pad_value=-1) as pipe:
        with pytest.raises(SampleError, match="pad value -1 does not fit"):
            list(pipe)


def test_padded_batches_after_filter_are_re_padded(backend, no_leaks):
    """A batch re-cut from several tasks is padded as if its samples had been batched directly."""
    clips = make_clips()
    keep = [i for i in range(len(clips)) if i % 3 != 1]
    pipe = (fl.from_sequence(list(range(len(clips)))).map(lambda i: (clips[i], i), backend=backend, workers=2)
            .filter(lambda s: s[1] % 3 != 1).padded_batch(3, lengths=True))
    with pipe:
        got = list(pipe)
    assert [b[1].tolist() for b in got] == [keep[i : i + 3] for i in range(0, len(keep), 3)]
    for audio, ids, lengths in got:
        rows = [clips[i] for i in ids]
        np.testing.assert_array_equal(audio, padded(rows, max(map(len, rows))))
        assert lengths.tolist() == [len(r) for r in rows]


def test_padded_batches_of_a_generator_resume_exactly(backend, no_leaks):
    def sentences(shard, num_shards):
        for i in range(shard, 23, num_shards):
            yield {"tokens": list(range(i % 6)), "id": i}

    def build():
        return fl.from_generator(sentences, 3).map(lambda s: s, backend=backend, workers=2).padded_batch(4, mask=True)

    whole = resume_everywhere(build, convert=lambda b: (b["tokens"].tolist(), b["id"].tolist(), b["tokens_mask"].tolist()))
    ids = [i for _, batch_ids, _ in whole for i in batch_ids]
    assert sorted(ids) == list(range(23)) and all(len(b[1]) == 4 for b in whole[:-1])
    for tokens, batch_ids, mask in whole:
        width = max(i % 6 for i in batch_ids)
        assert tokens == [list(range(i % 6)) + [0] * (width - i % 6) for i in batch_ids], "re-padded to the batch's longest"
        assert mask == [[j < i % 6 for j in range(width)] for i in batch_ids]


# ------------------------------------------------------------- 3. buckets
BOUNDARIES, SIZES = [3, 6], [4, 3, 2]


def bucket_of(length: int) -> int:
    return int(np.searchsorted(BOUNDARIES, length, side="right"))


def expected_buckets(lengths_in_order: list, drop_remainder: bool = False) -> list:
    """The rule: route in order, hand a bucket out when full, remainders last in bucket order."""
    held = [[] for _ in SIZES]
    out = []
    for i in lengths_in_order:
        b = bucket_of(i[1])
        held[b].append(i[0])
        if len(held[b]) == SIZES[b]:
            out.append(held[b])
            held[b] = []
    out += [h for h in held if h and not drop_remainder]
    return out


def sentence_lengths(n: int = 60) -> list:
    return [int(v) for v in np.random.default_rng(7).integers(0, 10, n)]


@pytest.mark.parametrize("drop_remainder", [False, True])
def test_buckets_hold_each_sample_once_in_batches_of_their_size(backend, drop_remainder, no_leaks):
    lengths = sentence_lengths()
    pipe = (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=11)
            .map(lambda i: {"tokens": np.full(lengths[i], i, np.int32), "id": i}, backend=backend, workers=3)
            .bucket_by_length(lambda s: len(s["tokens"]), BOUNDARIES, SIZES, lengths=True, drop_remainder=drop_remainder))
    with pipe:
        order = [int(i) for i in pipe.plan.epoch_indices(0)]
        got = list(pipe)
    assert [b["id"].tolist() for b in got] == expected_buckets([(i, lengths[i]) for i in order], drop_remainder)
    ids = [i for b in got for i in b["id"].tolist()]
    assert len(ids) == len(set(ids))
    if not drop_remainder:
        assert sorted(ids) == list(range(len(lengths)))
    for batch in got:
        buckets = {bucket_of(lengths[i]) for i in batch["id"].tolist()}
        assert len(buckets) == 1, "a batch holds one bucket"
        width = max(lengths[i] for i in batch["id"].tolist())
        assert batch["tokens"].shape == (len(batch["id"]), width)
        assert batch["tokens_lengths"].tolist() == [lengths[i] for i in batch["id"].tolist()]


def test_buckets_are_the_same_for_any_backend_and_worker_count(no_leaks):
    lengths = sentence_lengths()

    def run(backend, workers):
        pipe = (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=2)
                .map(lambda i: list(range(lengths[i])), backend=backend, workers=workers)
                .bucket_by_length(len, BOUNDARIES, SIZES, mask=True))
        with pipe:
            return [[(x.tolist(), m.tolist()) for x, m in pipe] for _ in range(2)]

    serial = run("serial", None)
    assert serial[0] != serial[1], "each epoch has its own order"
    for backend, workers in (("thread", 1), ("thread", 8), ("process", 1), ("process", 8)):
        assert run(backend, workers) == serial, (backend, workers)


def test_pad_to_boundary_pads_each_bucket_to_its_boundary(no_leaks):
    lengths = [1, 4, 7, 2, 5, 9, 0, 3]
    pipe = fl.from_sequence([list(range(n)) for n in lengths]).bucket_by_length(len, BOUNDARIES, [2, 2, 2], pad_to_boundary=True)
    with pipe:
        shapes = [b.shape for b in pipe]
    # buckets 0, 1, 2, 0 (full), 1 (full), 2 (full), then the remainders [0] and [3]:
    # bucket 0 pads to 2, bucket 1 to 5, the last bucket to its longest
    assert shapes == [(2, 2), (2, 5), (2, 9), (1, 2), (1, 5)]
    too_long = fl.from_sequence([[1, 2, 3, 4, 5, 6]]).bucket_by_length(lambda s: 1, BOUNDARIES, SIZES, pad_to_boundary=True)
    with too_long, pytest.raises(SampleError, match="sample 0.*its bucket's boundary"):
        list(too_long)


def test_buckets_resume_exactly_at_every_batch(backend, no_leaks):
    lengths = sentence_lengths(40)

    def build():
        return (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=5)
                .map(lambda i: (np.full(lengths[i], i), i), backend=backend, workers=2)
                .bucket_by_length(lambda s: len(s[0]), BOUNDARIES, SIZES))

    whole = resume_everywhere(build, convert=lambda b: (b[0].tolist(), b[1].tolist()))
    assert sorted(i for _, ids in whole for i in ids) == list(range(len(lengths)))


def test_buckets_of_a_generator_resume_exactly(backend, no_leaks):
    lengths = sentence_lengths(31)

    def texts(shard, num_shards):
        for i in range(shard, len(lengths), num_shards):
            yield {"tokens": list(range(lengths[i])), "id": i}

    def build():
        return (fl.from_generator(texts, 4).shuffle(seed=1).map(lambda s: s, backend=backend, workers=2)
                .bucket_by_length(lambda s: len(s["tokens"]), BOUNDARIES, SIZES))

    whole = resume_everywhere(build, convert=lambda b: b["id"].tolist())
    assert sorted(i for ids in whole for i in ids) == list(range(len(lengths)))


def test_bucket_state_is_checked(no_leaks):
    lengths = sentence_lengths(20)
    pipe = fl.from_sequence([list(range(n)) for n in lengths]).bucket_by_length(len, BOUNDARIES, SIZES)
    with pipe:
        it = iter(pipe)
        next(it)
        state = it.state()
        it.close()
        assert len(state["buckets"]) == 3
        with pytest.raises(ValueError, match=r"state\['buckets'\] has 2 counts, but this pipeline has 3 buckets"):
            pipe.resume({**state, "buckets": [0, 0]})
        with pytest.raises(ValueError, match=r"state\['buckets'\] must be a list of row counts"):
            pipe.resume({**state, "buckets": [0, -1, 0]})
    with pytest.raises(TypeError, match="bucket_by_length"):
        len(pipe)


def test_steps_print_as_written():
    pipe = fl.from_sequence([[1]]).padded_batch(8, pad_value=-1, pad_multiple=8, lengths=True)
    assert "padded_batch(8, pad_value=-1, pad_multiple=8, lengths=True)" in repr(pipe)
    pipe = fl.from_sequence([[1]]).bucket_by_length(len, [4], [8, 4], drop_remainder=True)
    assert "bucket_by_length(len, boundaries=[4], batch_sizes=[8, 4], drop_remainder=True)" in repr(pipe)


# ------------------------------------------------------------------ 4. Ray
def test_generators_padding_and_buckets_on_ray_match_serial():
    ray = pytest.importorskip("ray")
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    lengths = sentence_lengths(30)

    def texts(shard, num_shards):
        for i in range(shard, len(lengths), num_shards):
            yield {"tokens": list(range(lengths[i])), "id": i}

    builds = [
        lambda backend: fl.from_generator(stride_factory(50), 4).map(lambda v: v, backend=backend, workers=2).batch(8),
        lambda backend: fl.from_generator(texts, 3).map(lambda s: s, backend=backend, workers=2).padded_batch(4, mask=True),
        lambda backend: (fl.from_sequence(list(range(len(lengths)))).shuffle(seed=4)
                         .map(lambda i: list(range(lengths[i])), backend=backend, workers=2)
                         .bucket_by_length(len, BOUNDARIES, SIZES, lengths=True)),
    ]

    def run(pipe):
        with pipe:
            return [[str(b) for b in pipe] for _ in range(2)]

    try:
        for build in builds:
            assert run(build("ray")) == run(build("serial"))
    finally:
        if started:
            ray.shutdown()


def test_a_tuple_sample_gets_every_length_then_every_mask(no_leaks):
    samples = [([1, 2], np.zeros(3), 7), ([3], np.zeros(1), 8)]
    with fl.from_sequence(samples).padded_batch(2, lengths=True, mask=True) as pipe:
        (tokens, audio, label, tokens_lengths, audio_lengths, tokens_mask, audio_mask), = list(pipe)
    assert tokens.tolist() == [[1, 2], [3, 0]] and audio.shape == (2, 3) and label.tolist() == [7, 8]
    assert tokens_lengths.tolist() == [2, 1] and audio_lengths.tolist() == [3, 1]
    assert tokens_mask.tolist() == [[True, True], [True, False]] and audio_mask.sum() == 4


def test_a_dict_field_named_like_an_added_one_is_refused(no_leaks):
    with fl.from_sequence([{"x": [1], "x_lengths": 0}]).padded_batch(1, lengths=True) as pipe:
        with pytest.raises(SampleError, match="already has a field 'x_lengths'"):
            list(pipe)


def test_a_length_fn_that_returns_no_integer_is_named(backend, no_leaks):
    pipe = fl.from_sequence([[1], [1, 2], [1, 2, 3]]).map(list, backend=backend, workers=2).bucket_by_length(
        lambda s: len(s) / 2 if len(s) == 3 else len(s), [2], [2, 2])
    with pipe, pytest.raises(SampleError, match="sample 2.*length_fn returned 1.5") as info:
        list(pipe)
    assert info.value.index == 2


def test_buckets_of_an_epoch_that_filters_everything_are_empty(backend, no_leaks):
    pipe = fl.from_sequence([[1], [1, 2]]).map(list, backend=backend, workers=2).filter(lambda s: False).bucket_by_length(
        len, [2], [2, 2])
    with pipe:
        assert list(pipe) == []


def test_a_field_left_unpadded_that_differs_is_named(backend, no_leaks):
    samples = [{"tokens": [1, 2], "image": np.zeros((2, 2))}, {"tokens": [3], "image": np.zeros((3, 3))}]
    pipe = fl.from_sequence(samples).map(dict, backend=backend, workers=2).padded_batch(2, pad_value={"tokens": 0})
    with pipe, pytest.raises(SampleError, match="sample 1.*field 'image', which is not padded") as info:
        list(pipe)
    assert info.value.index == 1


def test_a_float_pad_value_is_rounded_to_a_float32_field_as_tf_data_does(no_leaks):
    rows = [np.array([1.0], np.float32), np.array([1.0, 2.0], np.float32)]
    with fl.from_sequence(rows).padded_batch(2, pad_value=0.1) as pipe:
        (batch,) = list(pipe)
    assert batch.dtype == np.float32
    assert batch[0, 1] == np.float32(0.1)


@pytest.mark.parametrize("dtype, value, why", [(np.int64, 0.5, "not one of its values"),
                                               (np.uint8, 300, "not one of its values"),
                                               (np.float32, 1e300, "beyond its range")])
def test_a_pad_value_the_field_cannot_hold_is_refused_naming_why(dtype, value, why, no_leaks):
    rows = [np.array([1], dtype), np.array([1, 2], dtype)]
    with fl.from_sequence(rows).padded_batch(2, pad_value=value) as pipe:
        with pytest.raises(SampleError, match=re.escape(f"pad value {value!r} does not fit field (the sample) of dtype {np.dtype(dtype)} ({why})")):
            list(pipe)
