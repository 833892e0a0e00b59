"""Property-based fuzzing (Hypothesis): resume states, batch(), the store, bad arguments, damaged files.

Each property is the contract of an example-based test, checked over
random inputs: a genuine state resumes exactly and an edited one is
refused naming its field; random nested samples batch the same on every
backend; a store round-trips exactly and damage is never read back as
different data under ``verify=True``; wrong arguments are refused with a
message naming them, never with a bare internal exception; a damaged
JPEG, PNG or WAV raises ``fl.DecodeError`` naming the file or decodes to
the right layout. The bugs these properties found are kept as plain
examples too (section "the bugs fuzzing found").

Runs are reproducible (``derandomize=True``, no example database) and
small (tens of examples a property), so CI stays fast; set
``FEEDLINE_FUZZ_SCALE=20`` (examples x 20) to search harder on your machine.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import feedline as fl  # noqa: E402

SCALE = float(os.environ.get("FEEDLINE_FUZZ_SCALE", "1"))  # e.g. 20 for a longer search on your machine


def fuzz(max_examples: int):
    """Settings of every property: reproducible, no deadline (the machine is shared), no saved examples."""
    return settings(max_examples=max(1, round(max_examples * SCALE)), deadline=None, derandomize=True, database=None, print_blob=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def canonical(tree):
    """A comparable form of a batch: arrays as (dtype, shape, bytes), containers as lists, dicts sorted."""
    if isinstance(tree, dict):
        return ("dict", [(str(k), canonical(tree[k])) for k in sorted(tree, key=str)])
    if isinstance(tree, (tuple, list)):
        return (type(tree).__name__, [canonical(v) for v in tree])
    if isinstance(tree, np.ndarray) and tree.dtype != object:
        return ("array", tree.dtype.str, tree.shape, np.ascontiguousarray(tree).tobytes())
    if isinstance(tree, np.generic):
        return ("scalar", tree.dtype.str, tree.tobytes())
    return ("value", type(tree).__name__, tree)


# ====================================================================== 1. resume state
def fails_on(bad: frozenset):
    """A map that raises for the values in ``bad`` (picklable by cloudpickle: a closure)."""
    def fn(x):
        if int(x) in bad:
            raise ValueError(f"bad sample {int(x)}")
        return x * 3
    return fn


def keeps(kept: frozenset):
    return lambda x: int(x) in kept


def shard_items(sizes: tuple):
    """A generator factory: shard ``s`` yields ``sizes[s]`` values 100 * s + i."""
    def factory(shard, num_shards):
        for i in range(sizes[shard]):
            yield np.int64(100 * shard + i)
    return factory


@st.composite
def pipelines(draw):
    """A description of a random pipeline over an indexed or a generator source: (builder, label)."""
    sizes = tuple(draw(st.lists(st.integers(0, 9), min_size=1, max_size=4))) if draw(st.integers(0, 3)) == 0 else None
    n = draw(st.integers(1, 40))
    values = [100 * s + i for s, size in enumerate(sizes) for i in range(size)] if sizes else list(range(n))
    seed = draw(st.integers(0, 2**32))
    unbatched = draw(st.booleans())
    size = draw(st.integers(1, 9))
    drop = draw(st.booleans())
    kept = frozenset(draw(st.sets(st.sampled_from(values)))) if values and draw(st.booleans()) else None
    bad = frozenset(draw(st.sets(st.sampled_from(values), max_size=5))) if values and draw(st.booleans()) else None

    def build():
        if sizes:
            pipe = fl.from_generator(shard_items(sizes), num_shards=len(sizes)).shuffle(seed=seed)
        else:
            pipe = fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=seed)
        if kept is not None:
            pipe = pipe.filter(keeps(kept))
        if bad is not None:
            pipe = pipe.map(fails_on(bad), backend="serial", on_error="skip")
        return pipe if unbatched else pipe.batch(size, drop_remainder=drop)

    label = f"{f'shards {sizes}' if sizes else f'n={n}'} seed={seed} batch={None if unbatched else (size, drop)} filter={kept and sorted(kept)} skip={bad and sorted(bad)}"
    return build, label


def run_with_states(pipe, epoch: int):
    """Every output of the epoch and the JSON round trip of the state before each output (and at the end)."""
    it = pipe.epoch(epoch)
    states = [json.loads(json.dumps(it.state()))]
    outputs = []
    for out in it:
        outputs.append(canonical(out))
        states.append(json.loads(json.dumps(it.state())))
    return outputs, states


def resumed(pipe, state) -> list:
    return [canonical(out) for out in pipe.resume(state)]


@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
@fuzz(60)
@given(spec=pipelines(), epoch=st.integers(0, 2), where=st.floats(0, 1))
def test_a_json_round_tripped_state_resumes_exactly_the_remaining_outputs(spec, epoch, where):
    build, label = spec
    with build() as pipe:
        outputs, states = run_with_states(pipe, epoch)
        k = round(where * (len(states) - 1))
        assert resumed(pipe, states[k]) == outputs[k:], f"{label}: after {k} of {len(outputs)} outputs"


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=5,
)


@st.composite
def edits(draw, state: dict):
    """One random edit of ``state``: (field it touches, edited copy, what was done)."""
    edited = json.loads(json.dumps(state))
    kind = draw(st.sampled_from(["remove", "add", "retype", "number", "shuffle", "item"]))
    field = draw(st.sampled_from(sorted(state)))
    value = state[field]
    if kind == "remove":
        del edited[field]
    elif kind == "add":
        field = draw(st.text(min_size=1, max_size=8).filter(lambda k: k not in state))
        edited[field] = draw(JSON_VALUES)
    elif kind == "number" or (kind == "retype" and isinstance(value, int) and draw(st.booleans())):
        kind = "number"
        edited[field] = draw(st.integers(-(10**12), 10**12) | st.sampled_from([-1, 0, 1, 2**63, value - 1 if isinstance(value, int) else 0]))
    elif kind == "retype":
        edited[field] = draw(JSON_VALUES.filter(lambda v: type(v) is not type(value)))
    elif kind == "shuffle" and isinstance(value, list) and len(value) > 1:
        edited[field] = draw(st.permutations(value))
    elif kind == "item" and isinstance(value, list) and value:
        position = draw(st.integers(0, len(value) - 1))
        edited[field] = [*value[:position], draw(JSON_VALUES), *value[position + 1 :]]
    elif kind == "item" and isinstance(value, dict) and value:  # state['streams']: one of its entries
        key = draw(st.sampled_from(sorted(value)))
        edited[field][key] = draw(JSON_VALUES | st.integers(-3, 12))
    else:
        kind = "retype"
        edited[field] = draw(JSON_VALUES.filter(lambda v: type(v) is not type(value)))
    return field, edited, f"{kind} {field!r}: {state.get(field)!r} -> {edited.get(field, '<removed>')!r}"


@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
@fuzz(60)
@given(spec=pipelines(), where=st.floats(0, 1), data=st.data())
def test_an_edited_state_is_refused_naming_its_field_or_resumes_exactly(spec, where, data):
    build, label = spec
    with build() as pipe:
        outputs, states = run_with_states(pipe, 1)
        k = round(where * (len(states) - 1))
        field, edited, what = data.draw(edits(states[k]))
        try:
            result = resumed(pipe, edited)
        except (fl.FeedlineError, ValueError, TypeError) as e:
            message = str(e)
            event(f"refused naming {'the digest' if 'digest' in message else 'the field'}")
            named = f"state[{field!r}]" in message or "state['digest']" in message
            assert named, f"{label}; {what}: the refusal does not name the field: {type(e).__name__}: {message}"
        else:  # accepted: only an edit that changes nothing that matters (a dropped digest, a no-op) may pass
            event("accepted")
            assert result == outputs[k:], f"{label}; {what}: accepted, and delivered other outputs than the state's"


# ====================================================================== 2. samples through batch()
DTYPES = ["u1", "i1", "<u2", "<i2", "<i4", "<u4", "<i8", "<f2", "<f4", "<f8", "<c8", "?"]


@st.composite
def schemas(draw, depth: int = 0):
    """The layout of a random nested sample: a leaf kind, or a dict / tuple of layouts."""
    leaves = st.one_of(
        st.tuples(st.just("array"), st.sampled_from(DTYPES), st.lists(st.integers(0, 3), max_size=3).map(tuple)),
        st.sampled_from([("str",), ("none",), ("int",), ("bytes",)]),
    )
    if depth >= 2 or draw(st.integers(0, 2)) == 0:
        return draw(leaves)
    if draw(st.booleans()):
        keys = draw(st.lists(st.from_regex(r"[a-z]{1,4}", fullmatch=True), min_size=1, max_size=3, unique=True))
        return ("dict", {k: draw(schemas(depth + 1)) for k in keys})
    return ("tuple", tuple(draw(schemas(depth + 1)) for _ in range(draw(st.integers(1, 3)))))


def make(schema, index: int, rng, odd_shape: bool = False):
    """The value of ``schema`` for sample ``index``; ``odd_shape``: its first array gets one more row."""
    kind = schema[0]
    if kind == "dict":
        out = {}
        for k, sub in schema[1].items():
            out[k] = make(sub, index, rng, odd_shape)
            odd_shape = odd_shape and not has_array(sub)
        return out
    if kind == "tuple":
        out = []
        for sub in schema[1]:
            out.append(make(sub, index, rng, odd_shape))
            odd_shape = odd_shape and not has_array(sub)
        return tuple(out)
    if kind == "array":
        shape = (schema[2][0] + 1, *schema[2][1:]) if odd_shape and schema[2] else schema[2] + ((1,) if odd_shape else ())
        return (rng.standard_normal(shape) * 100).astype(schema[1])
    return {"str": f"s{index}", "none": None, "int": index * 7 - 3, "bytes": bytes([index % 256]) * (index % 4)}[kind]


def has_array(schema) -> bool:
    if schema[0] == "dict":
        return any(has_array(s) for s in schema[1].values())
    if schema[0] == "tuple":
        return any(has_array(s) for s in schema[1])
    return schema[0] == "array"


def identity_or_fail(bad: frozenset):
    def fn(sample):
        if sample[0] in bad:
            raise ValueError(f"sample {sample[0]} fails on purpose")
        return sample
    return fn


def sample_pipeline(samples, size, drop, kept, bad, backend, workers=2):
    pipe = fl.from_sequence(samples)
    if kept is not None:
        pipe = pipe.filter(lambda s: s[0] in kept)
    if bad is not None or backend != "serial":
        pipe = pipe.map(identity_or_fail(bad or frozenset()), backend=backend, workers=1 if backend == "serial" else workers,
                        on_error="skip" if bad is not None else "raise")
    return pipe.batch(size, drop_remainder=drop)


@st.composite
def sample_sets(draw):
    schema = draw(schemas())
    n = draw(st.integers(1, 24))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    samples = [(i, make(schema, i, rng)) for i in range(n)]
    kept = frozenset(draw(st.sets(st.integers(0, n - 1)))) if draw(st.booleans()) else None
    bad = frozenset(draw(st.sets(st.integers(0, n - 1), max_size=4))) if draw(st.booleans()) else None
    return schema, samples, draw(st.integers(1, 6)), draw(st.booleans()), kept, bad


def check_same_batches(case, backend):
    schema, samples, size, drop, kept, bad = case
    delivered = [i for i, _ in samples if (kept is None or i in kept) and (bad is None or i not in bad)]
    whole = len(delivered) - len(delivered) % size if drop else len(delivered)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with sample_pipeline(samples, size, drop, kept, bad, "serial") as pipe:
            reference = [canonical(b) for b in pipe]
            ids = [int(v) for b in pipe for v in b[0]]
        assert ids == delivered[:whole], f"{schema}: serial delivered {ids}, expected {delivered[:whole]}"
        with sample_pipeline(samples, size, drop, kept, bad, backend) as pipe:
            got = [canonical(b) for b in pipe]
    assert got == reference, f"{backend} differs from serial for {schema}, batch {size}, drop {drop}, filter {kept}, skip {bad}"


@fuzz(40)
@given(case=sample_sets())
@pytest.mark.parametrize("backend", ["serial", "thread"])
def test_random_nested_samples_batch_like_the_serial_reference(backend, case, no_leaks):
    check_same_batches(case, backend)


@fuzz(4)
@given(case=sample_sets())
def test_random_nested_samples_batch_like_the_serial_reference_in_processes(case, no_leaks):
    check_same_batches(case, "process")


@fuzz(40)
@given(case=sample_sets(), data=st.data())
@pytest.mark.parametrize("backend", ["serial", "thread"])
def test_a_sample_of_another_shape_raises_sample_error_naming_it(backend, case, data, no_leaks):
    schema, samples, size, drop, kept, bad = case
    assume(has_array(schema))
    odd = data.draw(st.integers(0, len(samples) - 1), label="odd sample")
    samples = list(samples)
    samples[odd] = (odd, make(schema, odd, np.random.default_rng(odd), odd_shape=True))
    delivered = [i for i, _ in samples if (kept is None or i in kept) and (bad is None or i not in bad)]
    assume(odd in delivered)
    position = delivered.index(odd)
    start = position - position % size
    group = delivered[start : start + size]
    alone = len(group) == 1 or (drop and len(group) < size)  # nothing to compare with, or a remainder that is dropped
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with sample_pipeline(samples, size, drop, kept, bad, backend) as pipe:
            try:
                list(pipe)
            except fl.SampleError as e:
                event("refused")
                assert re.search(rf"\bsample {odd}\b", str(e)), f"{schema}: the error does not name sample {odd}: {e}"
            else:
                event("batched alone or dropped")
                assert alone, f"{schema}: sample {odd} of another shape was batched with others without an error"


# ====================================================================== 3. the store
from feedline.store import StoreError, StoreWriter, open_store, verify_store  # noqa: E402  (pyarrow is imported on first use)

try:
    import pyarrow  # noqa: F401
    import xxhash  # noqa: F401
except ImportError:
    HAVE_STORE = False
else:
    HAVE_STORE = True
needs_store = pytest.mark.skipif(not HAVE_STORE, reason="the store needs pyarrow and xxhash: pip install 'feedline[store]'")

STORE_DTYPES = ["u1", "i1", "<u2", "<i2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8", "?"]


@st.composite
def stores(draw):
    """Random fields, rows, rows per file and write sizes: (data, encodings, cuts, rows_per_file, variable fields).

    A field is fixed-shape (an array of ``rows`` rows: random dtype, shape
    and encoding) or variable-size (a list, one value a row: arrays of
    varying shape, bytes or str).
    """
    names = draw(st.lists(st.from_regex(r"[a-z]{1,5}", fullmatch=True), min_size=1, max_size=4, unique=True))
    rows = draw(st.integers(1, 60))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    data, encodings, variable = {}, {}, []
    for name in names:
        kind = draw(st.sampled_from(["array", "array", "array", "ragged", "bytes", "str"]))
        dtype = draw(st.sampled_from(STORE_DTYPES))
        if kind == "array":
            shape = tuple(draw(st.lists(st.integers(1, 5), max_size=3)))
            data[name] = (rng.standard_normal((rows, *shape)) * 1000).astype(dtype)
        elif kind == "ragged":
            ndim = draw(st.integers(1, 2))
            data[name] = [(rng.standard_normal(tuple(rng.integers(0, 4, ndim))) * 1000).astype(dtype) for _ in range(rows)]
            variable.append(name)
        elif kind == "bytes":
            data[name] = [rng.bytes(int(rng.integers(0, 12))) for _ in range(rows)]
        else:
            data[name] = ["".join(chr(int(c)) for c in rng.integers(32, 0x3000, int(rng.integers(0, 6)))) for _ in range(rows)]
        encodings[name] = draw(st.sampled_from(["raw", "zstd", "lz4"]))
    cuts = sorted(set(draw(st.lists(st.integers(1, rows - 1), max_size=4)))) if rows > 1 else []
    rows_per_file = draw(st.none() | st.integers(1, rows + 5))
    return data, encodings, cuts, rows_per_file, tuple(variable)


def write(path, case) -> None:
    data, encodings, cuts, rows_per_file, variable = case
    with StoreWriter(path, encodings=encodings, rows_per_file=rows_per_file, variable_shape=variable) as w:
        for start, stop in zip([0, *cuts], [*cuts, len(next(iter(data.values())))]):
            w.write({k: v[start:stop] for k, v in data.items()})


def rows_equal(store, data) -> bool:
    """Whether every row of ``store`` holds exactly the values of ``data`` (same dtypes, shapes, bytes)."""
    for i in range(len(store)):
        row = store[i]
        for name, column in data.items():
            value = row[name]
            if isinstance(column, np.ndarray) or isinstance(column[i], np.ndarray):
                value, expected = np.asarray(value), column[i]
                if value.dtype != expected.dtype or value.shape != expected.shape or value.tobytes() != expected.tobytes():
                    return False
            elif type(value) is not type(column[i]) or value != column[i]:
                return False
    return len(store) == len(next(iter(data.values())))


@needs_store
@fuzz(30)
@given(case=stores(), batch=st.integers(1, 16))
def test_a_random_store_round_trips_exactly(case, batch):
    data = case[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.store")
        write(path, case)
        assert verify_store(path).ok
        assert rows_equal(open_store(path, verify=True), data)
        with fl.from_store(path).batch(batch) as pipe:
            read = {name: [b[name] for b in pipe] for name in data}
    for name, column in data.items():
        if isinstance(column, np.ndarray):
            joined = np.concatenate(read[name])
            assert joined.dtype == column.dtype and joined.shape == column.shape and joined.tobytes() == column.tobytes(), name
        else:  # variable-size: one value a row, in lists
            assert canonical([v for part in read[name] for v in part]) == canonical(list(column)), name


@needs_store
@fuzz(40)
@given(case=stores(), flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)), min_size=1, max_size=3),
       data=st.data())
def test_flipped_bytes_are_detected_or_change_nothing_read_with_verify(case, flips, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.store")
        write(path, case)
        files = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
        target = data.draw(st.sampled_from(files), label="damaged file")
        damaged = bytearray(open(os.path.join(path, target), "rb").read())
        masks = {int(where * len(damaged)): mask for where, mask in flips}  # one flip a byte: two could cancel
        for position, mask in masks.items():
            damaged[position] ^= mask
        with open(os.path.join(path, target), "wb") as f:
            f.write(bytes(damaged))
        named = "manifest" if target == "manifest.json" else os.path.basename(target)  # "the manifest of the store ..."
        try:
            report = verify_store(path)
        except StoreError as e:
            event("verify_store: refused")
            assert named in str(e), f"{target}: {e}"
        else:
            event(f"verify_store: {'ok' if report.ok else 'damage found'}")
            if report.ok:  # every byte of a part file is covered; the manifest is compared as JSON (whitespace may change)
                assert not target.endswith(".arrow"), f"bytes flipped in {target} pass verify_store"
                assert rows_equal(open_store(path), case[0]), f"bytes flipped in {target} pass verify_store but change the data"
            else:
                assert named in str(report), f"{target} not named in: {report}"
        try:
            store = open_store(path, verify=True)
            intact = rows_equal(store, case[0])
        except (StoreError, fl.FeedlineError) as e:
            event("verify=True: refused")
            assert named in str(e), f"{target}: the error does not name the file: {e}"
        else:
            event("verify=True: read back intact")
            assert intact, f"bytes flipped in {target}: verify=True read back different data without an error"


@needs_store
@fuzz(30)
@given(case=stores(), cut=st.floats(0, 1, exclude_max=True), junk=st.binary(max_size=40), grow=st.booleans(), data=st.data())
def test_a_store_file_cut_short_or_grown_is_refused_naming_it(case, cut, junk, grow, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "s.store")
        write(path, case)
        files = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) for f in fs)
        target = data.draw(st.sampled_from(files), label="damaged file")
        content = open(os.path.join(path, target), "rb").read()
        with open(os.path.join(path, target), "wb") as f:
            f.write(content + b"x" + junk if grow else content[: int(cut * len(content))])
        named = "manifest" if target == "manifest.json" else os.path.basename(target)
        try:
            report = verify_store(path)
        except StoreError as e:
            assert named in str(e), f"{target}: {e}"
        else:
            assert not report.ok and named in str(report), f"{target} {'grown' if grow else 'cut'}: {report}"
        with pytest.raises((StoreError, fl.FeedlineError)) as info:  # the sizes are in the manifest: no verify needed
            store = open_store(path)
            rows_equal(store, case[0])
        assert named in str(info.value), f"{target}: the error does not name the file: {info.value}"


# ====================================================================== 4. bad arguments
ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4), st.binary(max_size=4),
    st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.just(object()), st.just(np.float64(2.5)), st.just(np.array([1, 2])), st.just(np.int64(-1)),
)
NOT_A_COUNT = st.one_of(  # never a valid size, seed or count: refused, naming the argument
    st.none(), st.booleans(), st.integers(-(2**70), 0), st.floats(), st.text(max_size=4), st.lists(st.integers(), max_size=2),
    st.just(object()), st.just(np.float64(2.0)),
)
INTERNAL = (AttributeError, KeyError, IndexError, ZeroDivisionError, UnboundLocalError, NameError, AssertionError)


def outcome(call):
    """``call()`` and one pass over the pipeline it returns: None if both work, else the exception."""
    try:
        pipe = call()
        with pipe:
            for _ in pipe:
                pass
    except Exception as e:  # noqa: BLE001 - the property is about which exceptions
        return e
    return None


def refused_naming(call, *names: str):
    error = outcome(call)
    assert error is not None, f"accepted: {call}"
    assert isinstance(error, (TypeError, ValueError, fl.FeedlineError)) and not isinstance(error, INTERNAL), repr(error)
    assert any(n in str(error) for n in names), f"{names} not named in {type(error).__name__}: {error}"


def never_internal(call) -> None:
    error = outcome(call)
    assert error is None or (isinstance(error, (TypeError, ValueError, fl.FeedlineError)) and not isinstance(error, INTERNAL)), repr(error)


ARRAY = np.arange(10)


@fuzz(50)
@given(value=NOT_A_COUNT)
def test_batch_size_and_shuffle_seed_that_are_not_counts_are_refused_naming_them(value):
    refused_naming(lambda: fl.from_arrays(ARRAY).batch(value), "size")
    if value is not None and not (isinstance(value, int) and value == 0):
        refused_naming(lambda: fl.from_arrays(ARRAY).shuffle(seed=value), "seed")


@fuzz(50)
@given(index=ANYTHING, count=ANYTHING)
def test_shard_arguments_are_refused_naming_them_or_work(index, count):
    ok = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (index, count)) and 0 <= index < count
    if ok:
        never_internal(lambda: fl.from_arrays(ARRAY).shard(index, count))
    else:
        refused_naming(lambda: fl.from_arrays(ARRAY).shard(index, count), "index", "count")


@fuzz(50)
@given(fn=ANYTHING, workers=ANYTHING, backend=ANYTHING, on_error=ANYTHING)
def test_map_arguments_are_refused_naming_them(fn, workers, backend, on_error, no_leaks):
    refused_naming(lambda: fl.from_arrays(ARRAY).map(fn), "map() needs a function")
    if backend is not None and not (isinstance(backend, str) and backend in ("serial", "thread", "process", "ray")):
        refused_naming(lambda: fl.from_arrays(ARRAY).map(abs, backend=backend), "backend")
    if not callable(on_error) and not (isinstance(on_error, str) and on_error in ("raise", "skip")):
        refused_naming(lambda: fl.from_arrays(ARRAY).map(abs, on_error=on_error), "on_error")
    if workers is not None and not (isinstance(workers, (int, np.integer)) and not isinstance(workers, bool) and workers >= 0):
        refused_naming(lambda: fl.from_arrays(ARRAY).map(abs, workers=workers), "workers")


@fuzz(50)
@given(args=st.lists(ANYTHING, min_size=1, max_size=3), named=st.dictionaries(st.from_regex(r"[a-z]{1,3}", fullmatch=True), ANYTHING, max_size=2))
def test_from_arrays_and_from_sequence_never_fail_with_an_internal_error(args, named):
    never_internal(lambda: fl.from_arrays(*args).batch(2))
    if named:
        never_internal(lambda: fl.from_arrays(**named))
        never_internal(lambda: fl.from_arrays(*args, **named))
    never_internal(lambda: fl.from_sequence(args[0]).batch(2))
    refused_naming(lambda: fl.from_arrays(*args, np.arange(len(args) + 7)), "argument", "length", "0-d")


NOT_A_FUNCTION = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.just(np.array([1, 2])), st.lists(st.integers(), max_size=2))
NOT_A_FLAG = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.just(np.array([1, 0])), st.lists(st.booleans(), max_size=2))
STEPS = {  # what a step is given -> (values it must refuse, words of the message)
    "batch(drop_remainder=)": (lambda v: fl.from_arrays(ARRAY).batch(3, drop_remainder=v), NOT_A_FLAG, "drop_remainder"),
    "batch(collate=)": (lambda v: fl.from_arrays(ARRAY).batch(3, collate=v), NOT_A_FUNCTION.filter(lambda v: v is not None), "collate"),
    "filter()": (lambda v: fl.from_arrays(ARRAY).filter(v), NOT_A_FUNCTION, "filter()"),
    "map_batch()": (lambda v: fl.from_arrays(ARRAY).batch(2).map_batch(v), NOT_A_FUNCTION, "map_batch()"),
    "prefetch()": (lambda v: fl.from_arrays(ARRAY).prefetch(v), NOT_A_COUNT.filter(lambda v: v is not None), "depth"),
    "take()": (lambda v: fl.from_arrays(ARRAY).take(v), NOT_A_COUNT.filter(lambda v: not isinstance(v, int) or v < 0), "take(n)"),
    "skip()": (lambda v: fl.from_arrays(ARRAY).skip(v), NOT_A_COUNT.filter(lambda v: not isinstance(v, int) or v < 0), "skip(n)"),
    "repeat()": (lambda v: fl.from_arrays(ARRAY).repeat(v), NOT_A_COUNT.filter(lambda v: v is not None), "count"),
    "map(timeout=)": (lambda v: fl.from_arrays(ARRAY).map(abs, timeout=v),
                      NOT_A_COUNT.filter(lambda v: v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < float("inf"))),
                      "timeout"),
    "shard(even=)": (lambda v: fl.from_arrays(ARRAY).shard(0, 2, even=v), ANYTHING.filter(lambda v: v is not None), "even"),
    "epoch()": (lambda v: fl.from_arrays(ARRAY).epoch(v), NOT_A_COUNT.filter(lambda v: v is not False and v != 0), "epoch(k)"),
}


@fuzz(25)
@given(data=st.data())
@pytest.mark.parametrize("step", sorted(STEPS))
def test_wrong_step_arguments_are_refused_naming_them(step, data):
    call, values, name = STEPS[step]
    value = data.draw(values, label=step)
    if step == "epoch()":
        error = None
        try:
            call(value)
        except Exception as e:  # noqa: BLE001 - the property is about which exceptions
            error = e
        assert isinstance(error, (TypeError, ValueError)) and not isinstance(error, INTERNAL), repr(error)
        assert name in str(error), str(error)
        return
    refused_naming(lambda: call(value), name)


# ====================================================================== the bugs fuzzing found, as examples
def test_a_number_then_an_array_in_one_field_is_a_shape_change_naming_the_sample(backend, no_leaks):
    # Was: the batch silently became a list [np.uint8(12), array([243])] instead of an error.
    samples = [(0, np.uint8(12)), (1, np.array([243], np.uint8)), (2, np.uint8(5))]
    with fl.from_sequence(samples).map(lambda s: s, backend=backend, workers=2).batch(3) as pipe:
        with pytest.raises(fl.SampleError, match=r"cannot batch sample 1: an array of shape \(1,\) where sample 0 has a number"):
            list(pipe)


@pytest.mark.parametrize("call, name", [
    (lambda: fl.from_arrays(ARRAY).map(abs, backend=np.array(["thread", "serial"])), "map(backend="),
    (lambda: fl.from_arrays(ARRAY).map(abs, on_error=np.array([1, 2])), "map(on_error="),
    (lambda: fl.from_arrays(ARRAY).shard(0, 2, even=np.array([1, 2])), "shard(even="),
    (lambda: fl.from_arrays(ARRAY).batch(2, drop_remainder="no"), "batch(drop_remainder="),  # was: truthy, so it dropped
    (lambda: fl.from_arrays(ARRAY).batch(2, drop_remainder=np.array([1, 0])), "batch(drop_remainder="),
    (lambda: fl.from_arrays(ARRAY).take(None), "take(n)"),  # was: TypeError: unsupported operand type(s) for *: 'NoneType' and 'int'
    (lambda: fl.from_arrays(ARRAY).skip(None), "skip(n)"),
])
def test_the_arguments_fuzzing_found_are_refused_naming_them(call, name):
    # Was: NumPy's "truth value of an array ... is ambiguous", or a string accepted as True.
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    assert str(info.value).startswith(name), str(info.value)


def test_two_fields_that_disagree_after_an_edit_also_report_the_digest(no_leaks):
    # Was: removing state['chunk'] was reported as a wrong state['task'] only; the digest says the state was edited.
    with fl.from_arrays(np.arange(2)).shuffle(seed=0) as pipe:
        it = pipe.epoch(1)
        list(it)
        state = it.state()
    with fl.from_arrays(np.arange(2)).shuffle(seed=0) as pipe:
        with pytest.raises(ValueError, match=r"state\['task'\] is 2.*state\['digest'\] does not match the other fields either"):
            pipe.resume({k: v for k, v in state.items() if k != "chunk"})
        with pytest.raises(ValueError, match=r"state\['batches'\] is 2, more than.*state\['digest'\] does not match"):
            pipe.resume({**state, "task": 0})


# ====================================================================== 5. damaged image and audio files
def encoded_files(folder: str, seed: int) -> dict:
    """A small JPEG, PNG and 16-bit WAV written by the test: {kind: (path, bytes, what a clean decode gives)}."""
    import io

    from PIL import Image

    rng = np.random.default_rng(seed)
    image = np.clip(128 + 60 * np.sin(np.arange(24 * 32 * 3).reshape(24, 32, 3) / 9.0) + rng.normal(0, 8, (24, 32, 3)), 0, 255)
    image = image.astype(np.uint8)
    out = {}
    for kind, fmt in (("jpeg", "JPEG"), ("png", "PNG")):
        buf = io.BytesIO()
        Image.fromarray(image).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
        out[kind] = buf.getvalue()
    pcm = (rng.normal(0, 3000, (400, 2))).astype("<i2")
    header = b"RIFF" + (36 + pcm.nbytes).to_bytes(4, "little") + b"WAVEfmt " + (16).to_bytes(4, "little")
    header += (1).to_bytes(2, "little") + (2).to_bytes(2, "little") + (8000).to_bytes(4, "little") + (32000).to_bytes(4, "little")
    header += (4).to_bytes(2, "little") + (16).to_bytes(2, "little") + b"data" + pcm.nbytes.to_bytes(4, "little")
    out["wav"] = header + pcm.tobytes()
    files = {}
    for kind, data in out.items():
        path = os.path.join(folder, f"clean.{kind}")
        with open(path, "wb") as f:
            f.write(data)
        files[kind] = (path, data, decode_file(kind, path))
    return files


def decode_file(kind: str, path: str) -> np.ndarray:
    import feedline.audio as fa
    import feedline.vision as fv

    return fa.load_audio(path, dtype="int16") if kind == "wav" else fv.decode(path)


@st.composite
def damage(draw, data: bytes):
    """Random damage: bytes flipped, the file cut short, or garbage spliced in; (damaged bytes, what was done)."""
    how = draw(st.sampled_from(["flip", "flip", "truncate", "splice"]))
    out = bytearray(data)
    if how == "flip":
        positions = draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=4, unique=True))
        for p in positions:
            out[p] ^= draw(st.integers(1, 255))
        return bytes(out), f"flip at {positions}"
    if how == "truncate":
        keep = draw(st.integers(0, len(data) - 1))
        return bytes(out[:keep]), f"cut to {keep} of {len(data)} bytes"
    at = draw(st.integers(0, len(data)))
    junk = draw(st.binary(min_size=1, max_size=32))
    return bytes(out[:at] + junk + out[at:]), f"{len(junk)} bytes spliced in at {at}"


needs_decoders = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in ("PIL", "cv2", "simplejpeg", "soundfile")),
    reason="needs feedline[vision] and feedline[audio]")


@needs_decoders
@fuzz(60)
@given(kind=st.sampled_from(["jpeg", "png", "wav"]), data=st.data())
def test_a_damaged_file_raises_decode_error_naming_it_or_decodes_to_the_right_shape(kind, data):
    with tempfile.TemporaryDirectory() as tmp:
        path, clean, expected = encoded_files(tmp, 0)[kind]
        damaged, what = data.draw(damage(clean), label="damage")
        target = os.path.join(tmp, f"damaged-{kind}.bin")
        with open(target, "wb") as f:
            f.write(damaged)
        try:
            got = decode_file(kind, target)
        except fl.DecodeError as e:
            event(f"{kind}: DecodeError")
            assert target in str(e), f"{kind}, {what}: the error does not name the file: {e}"
        except Exception as e:  # noqa: BLE001 - the property is about which exceptions
            raise AssertionError(f"{kind}, {what}: {type(e).__name__} instead of fl.DecodeError: {e}") from e
        else:
            event(f"{kind}: decoded")
            # JPEG and PCM carry no checksum: damage inside the data can decode to other values, of the same layout.
            assert got.dtype == expected.dtype and got.ndim == expected.ndim, f"{kind}, {what}: {got.dtype} {got.shape}"
            if kind == "png":  # zlib and CRC checks: a PNG that decodes holds its pixels
                assert got.shape == expected.shape and np.array_equal(got, expected), f"png, {what}: other pixels, no error"
            if what.startswith("cut") and kind != "png":
                raise AssertionError(f"{kind}, {what}: a truncated file decoded without an error")


# ====================================================================== 6. Parquet and Arrow files with nulls and drifting schemas
ARROW_KINDS = ["int64", "float32", "string", "list<float32>", "list<int64>", "list<list<int32>>"]


def arrow_type(kind: str):
    import pyarrow as pa

    return {"int64": pa.int64(), "float32": pa.float32(), "string": pa.string(), "list<float32>": pa.list_(pa.float32()),
            "list<int64>": pa.list_(pa.int64()), "list<list<int32>>": pa.list_(pa.list_(pa.int32())), "null": pa.null()}[kind]


def arrow_value(kind: str, rng):
    """A random value of ``kind``, with nulls among list items now and then."""
    item = lambda value: None if rng.random() < 0.15 else value  # noqa: E731
    if kind == "int64":
        return int(rng.integers(-2**40, 2**40))
    if kind == "float32":
        return float(np.float32(rng.standard_normal()))
    if kind == "string":
        return "".join(chr(int(c)) for c in rng.integers(32, 0x3000, int(rng.integers(0, 5))))
    if kind == "list<float32>":
        return [item(float(np.float32(v))) for v in rng.standard_normal(int(rng.integers(0, 4)))]
    if kind == "list<int64>":
        return [item(int(v)) for v in rng.integers(-100, 100, int(rng.integers(0, 4)))]
    return [item([int(v) for v in rng.integers(0, 9, int(rng.integers(0, 3)))]) for _ in range(int(rng.integers(0, 3)))]


@st.composite
def arrow_file_sets(draw):
    """Files of one table (kinds per column, random rows and nulls), and perhaps one file whose schema differs.

    Returns (format, kinds of each file's columns, rows of each file, the changed file or None, how).
    """
    names = draw(st.lists(st.from_regex(r"[a-z]{1,4}", fullmatch=True), min_size=1, max_size=3, unique=True))
    kinds = {name: draw(st.sampled_from(ARROW_KINDS)) for name in names}
    files = draw(st.sampled_from([1, 2, 2, 3]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32)))
    null_share = draw(st.sampled_from([0.0, 0.3, 1.0]))
    per_file = [dict(kinds) for _ in range(files)]
    changed, how = None, draw(st.sampled_from(["none", "type", "missing", "extra", "all-null"]) if files > 1 else st.just("none"))
    if how != "none":
        changed, column = draw(st.integers(0, files - 1)), draw(st.sampled_from(names))
        if how == "type":
            per_file[changed][column] = draw(st.sampled_from([k for k in ARROW_KINDS if k != kinds[column]]))
        elif how == "missing":
            del per_file[changed][column]
        elif how == "extra":
            per_file[changed]["zz" + column] = "int64"
        else:
            per_file[changed][column] = "null"
    rows = []
    for layout in per_file:
        count = int(rng.integers(1, 7))
        rows.append({name: [None if kind == "null" or rng.random() < null_share else arrow_value(kind, rng) for _ in range(count)]
                     for name, kind in layout.items()})
    return draw(st.sampled_from(["parquet", "arrow"])), per_file, rows, changed, how


def write_arrow_files(folder: str, case) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    form, per_file, rows, _, _ = case
    paths = []
    for number, (layout, values) in enumerate(zip(per_file, rows)):
        table = pa.table({name: pa.array(values[name], arrow_type(kind)) for name, kind in layout.items()})
        path = os.path.join(folder, f"part-{number}.{form}")
        if form == "parquet":
            pq.write_table(table, path, row_group_size=int(1 + number * 2))
        else:  # what datasets' save_to_disk writes: the Arrow IPC stream format
            with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=3)
        paths.append(path)
    return paths


def as_python(value):
    """A delivered value as pyarrow's ``to_pylist`` gives it: arrays and NumPy scalars as lists and numbers, None as None."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    if isinstance(value, list):
        return [as_python(v) for v in value]
    return value


needs_pyarrow = pytest.mark.skipif(not HAVE_STORE, reason="needs pyarrow: pip install 'feedline[store]'")


@needs_pyarrow
@fuzz(40)
@given(case=arrow_file_sets(), seed=st.integers(0, 3))
def test_arrow_and_parquet_files_read_every_row_once_as_pyarrow_does_or_refuse_naming_the_file(case, seed):
    import pyarrow.parquet as pq
    from pyarrow import ipc

    from feedline.store import StoreError

    form, _, _, changed, how = case
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_arrow_files(tmp, case)
        factory = fl.from_parquet if form == "parquet" else fl.from_hf_dataset
        if how in ("type", "missing", "extra"):
            event(f"{form}: a schema change ({how}), refused")
            with pytest.raises(StoreError) as caught:
                factory(tmp)
            assert paths[changed] in str(caught.value), str(caught.value)
            assert sum(p in str(caught.value) for p in paths) == 2, str(caught.value)
            return
        event(f"{form}: {how}")
        expected = []
        for path in paths:  # pyarrow's reading of each file: a null is None, as feedline documents
            table = pq.read_table(path) if form == "parquet" else ipc.open_stream(path).read_all()
            expected.extend(table.to_pylist())
        pipe = factory(tmp)
        in_order = [{k: as_python(v) for k, v in sample.items()} for sample in pipe]
        assert in_order == expected
        with pipe.shuffle(seed=seed).map(lambda s: s, backend="thread", workers=2) as shuffled:
            delivered = [{k: as_python(v) for k, v in sample.items()} for sample in shuffled]
    assert sorted(map(repr, delivered)) == sorted(map(repr, expected))
