"""Sources: what each one yields, and the mistakes each one reports."""

from __future__ import annotations

import os
import pathlib
import sys

import cloudpickle
import numpy as np
import pytest

import feedline as fl

# Functions defined in this module travel to process workers by value, as a
# notebook's would; by reference, every worker would import this module (and
# pytest) before its first task.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def samples(pipe) -> list:
    """Every sample of one epoch of an unbatched pipeline, closing it afterwards."""
    with pipe:
        return list(pipe)


def rows(pipe) -> list:
    """The rows of every batch of one epoch, as Python values, closing the pipeline."""
    with pipe:
        return [value for batch in pipe for value in np.asarray(batch).tolist()]


# --------------------------------------------------------------- from_sequence
def test_from_sequence_yields_each_item_in_order():
    assert samples(fl.from_sequence(["a", "b", "c"])) == ["a", "b", "c"]


def test_from_sequence_reads_any_object_with_len_and_getitem(backend, no_leaks):
    class Squares:
        def __len__(self):
            return 9

        def __getitem__(self, i):
            return i * i

    pipe = fl.from_sequence(Squares()).map(lambda v: v, backend=backend, workers=2).batch(4)
    assert rows(pipe) == [i * i for i in range(9)]


def test_from_sequence_of_range_is_len_of_range():
    assert len(fl.from_sequence(range(7))) == 7


def test_from_sequence_rejects_an_object_without_len_or_getitem():
    with pytest.raises(TypeError, match="from_generator"):
        fl.from_sequence(object())


def test_from_sequence_rejects_a_generator():
    with pytest.raises(TypeError, match="len"):
        fl.from_sequence(i for i in range(3))


# ----------------------------------------------------------------- from_arrays
def test_from_arrays_single_array_yields_its_rows():
    x = np.arange(12).reshape(6, 2)
    got = samples(fl.from_arrays(x))
    assert len(got) == 6
    for i, row in enumerate(got):
        np.testing.assert_array_equal(row, x[i])


def test_from_arrays_single_array_batches_are_slices(backend, no_leaks):
    x = np.arange(30, dtype=np.float32).reshape(10, 3)
    pipe = fl.from_arrays(x).map(lambda r: r, backend=backend, workers=2).batch(4)
    with pipe:
        batches = list(pipe)
    assert [b.shape for b in batches] == [(4, 3), (4, 3), (2, 3)]
    assert all(b.dtype == np.float32 for b in batches)
    np.testing.assert_array_equal(np.concatenate(batches), x)


def test_from_arrays_tuple_yields_tuples_of_rows():
    x, y = np.arange(10).reshape(5, 2), np.array([10, 11, 12, 13, 14])
    got = samples(fl.from_arrays(x, y))
    assert len(got) == 5
    for i, sample in enumerate(got):
        assert isinstance(sample, tuple) and len(sample) == 2
        np.testing.assert_array_equal(sample[0], x[i])
        assert sample[1] == y[i]


def test_from_arrays_tuple_batches_are_tuples_of_stacked_arrays(backend, no_leaks):
    x, y = np.arange(20).reshape(10, 2), np.arange(100, 110)
    pipe = fl.from_arrays(x, y).map(lambda s: s, backend=backend, workers=2).batch(4)
    with pipe:
        batches = list(pipe)
    assert all(isinstance(b, tuple) and len(b) == 2 for b in batches)
    np.testing.assert_array_equal(np.concatenate([b[0] for b in batches]), x)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), y)


def test_from_arrays_without_per_sample_steps_gathers_batches_in_bulk():
    x, y = np.arange(20).reshape(10, 2), np.arange(100, 110)
    with fl.from_arrays(x, y).batch(4) as pipe:
        batches = list(pipe)
    np.testing.assert_array_equal(batches[1][0], x[4:8])
    np.testing.assert_array_equal(batches[2][1], y[8:])


def test_from_arrays_dict_yields_dicts_with_the_same_keys():
    x, y = np.arange(8).reshape(4, 2), np.array([0, 1, 0, 1])
    got = samples(fl.from_arrays({"x": x, "y": y}))
    assert [sorted(s) for s in got] == [["x", "y"]] * 4
    np.testing.assert_array_equal(got[2]["x"], x[2])
    assert got[3]["y"] == 1


def test_from_arrays_keywords_are_the_same_as_a_dict(backend, no_leaks):
    x, y = np.arange(16).reshape(8, 2), np.arange(8) % 3
    by_dict = fl.from_arrays({"x": x, "y": y}).map(lambda s: s, backend=backend, workers=2).batch(3)
    by_keywords = fl.from_arrays(x=x, y=y).map(lambda s: s, backend=backend, workers=2).batch(3)
    with by_dict, by_keywords:
        a, b = list(by_dict), list(by_keywords)
    assert len(a) == len(b) == 3
    for left, right in zip(a, b):
        assert set(left) == set(right) == {"x", "y"}
        np.testing.assert_array_equal(left["x"], right["x"])
        np.testing.assert_array_equal(left["y"], right["y"])
    np.testing.assert_array_equal(np.concatenate([d["x"] for d in a]), x)


def test_from_arrays_reads_a_memory_mapped_array(tmp_path, backend, no_leaks):
    data = np.arange(600, dtype=np.int32).reshape(200, 3)
    np.save(tmp_path / "x.npy", data)
    x = np.load(tmp_path / "x.npy", mmap_mode="r")
    pipe = fl.from_arrays(x).shuffle(seed=1).map(lambda r: r * 2, backend=backend, workers=2).batch(16)
    with pipe:
        got = np.concatenate(list(pipe))
    assert got.shape == (200, 3)
    order = np.argsort(got[:, 0])
    np.testing.assert_array_equal(got[order], data * 2)


def test_from_arrays_memory_mapped_rows_reach_process_workers(tmp_path, no_leaks):
    big = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float32, shape=(512, 1024))
    big[:] = np.arange(512, dtype=np.float32)[:, None]
    big.flush()
    del big
    x = np.load(tmp_path / "big.npy", mmap_mode="r")
    with fl.from_arrays(x).map(lambda r: float(r.sum()), backend="process", workers=2).batch(64) as pipe:
        got = np.concatenate(list(pipe))
    np.testing.assert_array_equal(got, np.arange(512) * 1024.0)


def test_from_arrays_rejects_arrays_of_unequal_length():
    with pytest.raises(ValueError, match="equal length") as info:
        fl.from_arrays(np.zeros((5, 2)), np.zeros(4))
    assert "5" in str(info.value) and "4" in str(info.value)


@pytest.mark.parametrize("pack", [tuple, list])
def test_from_arrays_refuses_its_arrays_in_one_tuple_or_list_saying_to_pass_them_apart(pack):
    x, y = np.zeros((5, 2)), np.ones((5, 2))  # equal shapes: NumPy alone would stack them into two samples
    with pytest.raises(ValueError, match=r"separate arguments, from_arrays\(x, y\)") as info:
        fl.from_arrays(pack([x, y]))
    assert f"one {pack.__name__} of 2 arrays" in str(info.value)
    assert [r.tolist() for r in samples(fl.from_arrays(pack([[1, 2], [3, 4]])))] == [[1, 2], [3, 4]]  # (nested lists: one array)


def test_from_arrays_rejects_dict_arrays_of_unequal_length_naming_them():
    with pytest.raises(ValueError, match="equal length") as info:
        fl.from_arrays({"image": np.zeros((5, 2)), "label": np.zeros(3)})
    assert "image" in str(info.value) and "label" in str(info.value)


def test_from_arrays_rejects_a_0d_array():
    with pytest.raises(ValueError, match="0-d"):
        fl.from_arrays(np.array(3.0))


def test_from_arrays_rejects_no_arrays():
    with pytest.raises(ValueError):
        fl.from_arrays()


def test_from_arrays_rejects_positional_and_keyword_arrays_together():
    with pytest.raises(ValueError):
        fl.from_arrays(np.zeros(3), y=np.zeros(3))


# ------------------------------------------------------------------ from_files
@pytest.fixture
def files(tmp_path) -> pathlib.Path:
    """A folder: cats/{a,b}.txt, dogs/c.txt, and top-level d.txt, e.dat."""
    for rel in ["cats/a.txt", "cats/b.txt", "dogs/c.txt", "d.txt", "e.dat"]:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rel)
    return tmp_path


def test_from_files_glob_pattern_yields_sorted_matching_paths_as_str(files):
    got = samples(fl.from_files(str(files / "*" / "*.txt")))
    assert got == [str(files / "cats" / "a.txt"), str(files / "cats" / "b.txt"), str(files / "dogs" / "c.txt")]
    assert all(type(p) is str for p in got)


def test_from_files_recursive_glob_pattern(files):
    got = samples(fl.from_files(str(files / "**" / "*.txt")))
    assert sorted(got) == sorted(str(files / rel) for rel in ["cats/a.txt", "cats/b.txt", "dogs/c.txt", "d.txt"])


def test_from_files_directory_yields_every_file_below_it(files):
    got = samples(fl.from_files(files))
    assert sorted(got) == sorted(str(files / rel) for rel in ["cats/a.txt", "cats/b.txt", "dogs/c.txt", "d.txt", "e.dat"])
    assert all(type(p) is str for p in got)


def test_from_files_list_keeps_the_given_order_and_gives_str(files):
    paths = [files / "dogs" / "c.txt", files / "cats" / "a.txt"]  # pathlib.Path, unsorted
    got = samples(fl.from_files(paths))
    assert got == [str(p) for p in paths]
    assert all(type(p) is str for p in got)


def test_from_files_paths_are_str_in_process_workers(files, no_leaks):
    pipe = fl.from_files(files).map(lambda p: type(p).__name__ + ":" + p, backend="process", workers=2)
    got = samples(pipe)
    assert all(s.startswith("str:") for s in got)
    assert sorted(s[4:] for s in got) == sorted(str(p) for p in files.rglob("*") if p.is_file())


def test_from_files_labels_sequence_pairs_each_sorted_path_with_its_label(files):
    pipe = fl.from_files(str(files / "*" / "*.txt"), labels=[0, 1, 2])
    got = samples(pipe)
    assert [(p, int(label)) for p, label in got] == [
        (str(files / "cats" / "a.txt"), 0),
        (str(files / "cats" / "b.txt"), 1),
        (str(files / "dogs" / "c.txt"), 2),
    ]


def test_from_files_labels_callable_is_called_with_each_path(files):
    pipe = fl.from_files(str(files / "*" / "*.txt"), labels=lambda p: os.path.basename(os.path.dirname(p)))
    got = samples(pipe)
    assert [(os.path.basename(p), str(label)) for p, label in got] == [("a.txt", "cats"), ("b.txt", "cats"), ("c.txt", "dogs")]


def test_from_files_labelled_batches_stack_labels(files, backend, no_leaks):
    pipe = (
        fl.from_files(str(files / "*" / "*.txt"), labels=[5, 6, 7])
        .map(lambda s: (pathlib.Path(s[0]).read_text(), s[1]), backend=backend, workers=2)
        .batch(2)
    )
    with pipe:
        batches = list(pipe)
    assert [b[0] for b in batches] == [["cats/a.txt", "cats/b.txt"], ["dogs/c.txt"]]
    assert [b[1].tolist() for b in batches] == [[5, 6], [7]]


def test_from_files_rejects_the_wrong_number_of_labels(files):
    with pytest.raises(ValueError, match="2 labels for 3 files"):
        fl.from_files(str(files / "*" / "*.txt"), labels=[0, 1])


def test_from_files_pattern_matching_nothing_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no files match"):
        fl.from_files(str(tmp_path / "*.png"))


def test_from_files_empty_list_raises():
    with pytest.raises(ValueError):
        fl.from_files([])


# -------------------------------------------------------------- from_generator
def shard_items(shard: int, num_shards: int) -> list:
    """What `factory(shard, num_shards)` yields: shard-tagged values, shard i has i + 2 of them."""
    return [shard * 100 + k for k in range(shard + 2)]


def make_factory():
    def factory(shard, num_shards):
        yield from shard_items(shard, num_shards)

    return factory


def test_from_generator_calls_factory_with_shard_and_num_shards(backend, no_leaks):
    def factory(shard, num_shards):
        yield (shard, num_shards)

    pipe = fl.from_generator(factory, num_shards=3).map(lambda v: v, backend=backend, workers=2)
    assert sorted(samples(pipe)) == [(0, 3), (1, 3), (2, 3)]


@pytest.mark.parametrize("num_shards", [5, 1], ids=["more_shards_than_workers", "fewer_shards_than_workers"])
def test_from_generator_yields_every_item_of_every_shard_once(backend, num_shards, no_leaks):
    expected = sorted(v for s in range(num_shards) for v in shard_items(s, num_shards))
    pipe = fl.from_generator(make_factory(), num_shards=num_shards).map(lambda v: v, backend=backend, workers=2).batch(3)
    with pipe:
        got = [int(v) for b in pipe for v in b]
    assert sorted(got) == expected


def test_from_generator_factory_may_return_any_iterable(backend, no_leaks):
    pipe = fl.from_generator(shard_items, num_shards=4).map(lambda v: v + 1, backend=backend, workers=2)
    got = samples(pipe)
    assert sorted(got) == sorted(v + 1 for s in range(4) for v in shard_items(s, 4))


def test_from_generator_rejects_a_generator_object():
    def gen():
        yield from range(3)

    with pytest.raises(TypeError, match="factory"):
        fl.from_generator(gen(), num_shards=2)


def test_from_generator_rejects_a_generator_function_without_shard_arguments():
    def gen():
        yield from range(3)

    with pytest.raises(TypeError, match="factory"):
        fl.from_generator(gen, num_shards=2)


@pytest.mark.parametrize("num_shards", [0, -1, 1.5])
def test_from_generator_rejects_a_bad_shard_count(num_shards):
    with pytest.raises(ValueError, match="num_shards"):
        fl.from_generator(make_factory(), num_shards=num_shards)


def test_from_generator_has_no_len():
    with pytest.raises(TypeError):
        len(fl.from_generator(make_factory(), num_shards=2))
