"""The pipeline vocabulary users expect (one user's complaint per section).

1. Re-cut batches (after ``filter`` or ``on_error="skip"``) of anything the
   default collate batches: strings, None, nested dicts/tuples/lists,
   object arrays; exactly the batches of the kept samples, with resume.
2. A shape change between re-cut batches names the sample and its file.
3. (``from_keras_sequence``: tests/test_keras_sequence_defaults.py, which
   imports Keras; here it would be imported by every process worker that
   unpickles a function of this module.)
4. ``from_generator(..., samples_per_epoch=n)`` ends endless factories.
5. ``from_files(root, labels="parent")``: ImageFolder labels (real images).

Every behaviour is checked on the serial, thread and process backends.
"""

from __future__ import annotations

import itertools
import os
import warnings

import numpy as np
import pytest

import feedline as fl

# ------------------------------------------------------------ helpers


def assert_same_batch(got, want, where=""):
    """Equal trees: same container types, arrays equal in dtype, shape and values, other leaves ==."""
    if isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), where
        for k in want:
            assert_same_batch(got[k], want[k], f"{where}[{k!r}]")
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same_batch(g, w, f"{where}[{i}]")
    elif isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{where}: {type(got).__name__}"
        assert got.dtype == want.dtype and got.shape == want.shape, f"{where}: {got.dtype}{got.shape} != {want.dtype}{want.shape}"
        if want.dtype == object:
            assert all(a == b or (a is None and b is None) for a, b in zip(got.ravel(), want.ravel())), where
        else:
            np.testing.assert_array_equal(got, want, err_msg=where)
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def assert_same_batches(got: list, want: list):
    assert len(got) == len(want), f"{len(got)} batches, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same_batch(g, w, f"batch {k}")


def expected_batches(samples: list, size: int, drop_remainder: bool = False) -> list:
    """The default collate of the kept samples, ``size`` at a time: whole batches of a serial pipeline, nothing re-cut."""
    with fl.from_sequence(samples).batch(size, drop_remainder=drop_remainder) as pipe:
        return list(pipe)


# ------------------------------------------------ 1. re-cut batches of any sample
BAD = {2, 3, 9, 17, 18, 19, 22}  # load() fails on these: runs of skips across task boundaries
N = 30


def load(i):
    """(image, label, path): the user's case, a path string in the sample."""
    i = int(i)
    if i in BAD:
        raise OSError(f"cannot read sample {i}")
    return np.full((2, 3), i, np.float32), i % 5, f"img/{i:03d}.png"


def rich(i):
    """Every kind of leaf the default collate batches, nested."""
    i = int(i)
    if i in BAD:
        raise OSError(f"cannot read sample {i}")
    return {
        "image": np.full((2, 2), i, np.uint8),
        "meta": {
            "path": f"img/{i:03d}.png",
            "tags": ["a" * (i % 3 + 1), i, None],  # a list in the sample: three columns
            "maybe": i if i % 4 else f"s{i}",  # numbers and strings: a list column in some batches, an array in others
            "object": np.array([i, "x"], dtype=object),  # object arrays become a list column
            "named": (i, f"id{i}"),
        },
        "score": float(i) / 2,
    }


def kept_ids(ids):
    return [int(i) for i in ids if int(i) not in BAD]


@pytest.mark.parametrize("fn", [load, rich], ids=["image-label-path", "nested"])
@pytest.mark.parametrize("how", ["skip", "filter"])
def test_recut_batches_are_the_batches_of_the_kept_samples(backend, fn, how, no_leaks):
    source = fl.from_arrays(np.arange(N)).shuffle(seed=4)
    if how == "skip":
        pipe = source.map(fn, on_error="skip", backend=backend, workers=2).batch(4)
    else:
        pipe = source.filter(lambda i: int(i) not in BAD).map(fn, backend=backend, workers=2).batch(4)
    order = fl.from_arrays(np.arange(N)).shuffle(seed=4).epoch(0)
    order = [int(i) for i in order]
    want = expected_batches([fn(i) for i in kept_ids(order)], 4)
    with pipe, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the skip warning
        got = list(pipe.epoch(0))
    assert_same_batches(got, want)
    assert [len(b[2] if fn is load else b["meta"]["path"]) for b in got] == [4] * (len(want) - 1) + [len(kept_ids(order)) % 4 or 4]


def test_recut_matches_the_serial_backend_and_a_pipeline_without_skips(backend, no_leaks):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with fl.from_arrays(np.arange(N)).map(rich, on_error="skip", backend=backend, workers=2).batch(5, drop_remainder=True) as pipe:
            got = list(pipe)
        with fl.from_arrays(np.arange(N)).map(rich, on_error="skip", backend="serial").batch(5, drop_remainder=True) as pipe:
            serial = list(pipe)
    clean = fl.from_sequence(kept_ids(range(N))).map(rich, backend="serial").batch(5, drop_remainder=True)
    assert_same_batches(got, serial)
    assert_same_batches(got, list(clean))


@pytest.mark.parametrize("stop", [1, 2, 4])
def test_recut_resumes_exactly_mid_epoch(backend, stop, no_leaks):
    def build():
        return fl.from_arrays(np.arange(N)).shuffle(seed=9).map(rich, on_error="skip", backend=backend, workers=2).batch(3)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with build() as pipe:
            whole = list(pipe.epoch(1))
        with build() as pipe:
            it = pipe.epoch(1)
            head = list(itertools.islice(it, stop))
            state = it.state()
            it.close()
        with build() as pipe:
            tail = list(pipe.resume(state))
    assert_same_batches(head + tail, whole)


@pytest.mark.parametrize("value", [
    lambda i: "six" if i == 6 else i,  # a string among numbers: that batch is a list, the others arrays
    lambda i: float(i) if i >= 6 else i,  # ints, then floats: int64 batches, then float64 ones
], ids=["string-among-numbers", "int-then-float"])
def test_recut_collates_each_batch_as_its_samples_would_be(backend, value, no_leaks):
    make = lambda i: {"v": value(int(i)), "x": np.full(2, int(i), np.int16)}  # noqa: E731
    pipe = fl.from_arrays(np.arange(12)).filter(lambda i: int(i) != 1).map(make, backend=backend, workers=2).batch(3)
    with pipe:
        got = list(pipe)
    assert_same_batches(got, expected_batches([make(i) for i in range(12) if i != 1], 3))


def test_slice_and_join_leave_a_batch_with_a_list_sample_intact(backend, no_leaks):
    make = lambda i: [np.full(2, int(i)), f"s{int(i)}", (int(i), None)]  # noqa: E731
    pipe = fl.from_arrays(np.arange(12)).filter(lambda i: int(i) != 1).map(make, backend=backend, workers=2).batch(3)
    with pipe:
        got = list(pipe)  # one sample filtered out: every batch after it is cut from two tasks' rows and joined
    assert_same_batches(got, expected_batches([make(i) for i in range(12) if i != 1], 3))


def test_a_custom_collate_without_rows_is_refused_with_what_to_do():
    def collate(samples):
        return {"x": np.stack(samples), "count": len(samples)}  # a per-batch number: no rows to re-cut

    pipe = fl.from_arrays(np.arange(12.0)).filter(lambda v: v != 1).batch(4, collate=collate)
    with pytest.raises(fl.SampleError, match=r"at batch\['count'\].*one row per sample"):
        list(pipe)


# ---------------------------------------- 2. a shape change between re-cut batches
def test_a_shape_change_between_batches_names_the_sample_and_its_file(backend, tmp_path, no_leaks):
    paths = [str(tmp_path / f"{i:02d}.png") for i in range(12)]

    def decode(sample):
        path, label = sample
        side = 4 if int(os.path.basename(path)[:2]) < 8 else 5  # sample 8 on: 5x5 images
        return np.zeros((side, side), np.float32), label

    pipe = fl.from_files(paths, labels=list(range(12))).filter(lambda s: s[1] != 1).map(decode, backend=backend, workers=2).batch(4)
    with pipe:
        it = iter(pipe)
        first = next(it)  # samples 0, 2, 3, 4: all 4x4
        assert first[1].tolist() == [0, 2, 3, 4]
        with pytest.raises(fl.SampleError) as caught:
            next(it)  # rows 5, 6, 7 (4x4) joined with sample 8 (5x5)
    error = caught.value
    assert error.index == 8 and error.where == paths[8] and error.stage == "batch"
    message = str(error)
    assert "sample 8" in message and paths[8] in message and "sample 5" in message
    assert "(5, 5)" in message and "(4, 4)" in message and "resize or crop in map()" in message
    assert "all the input array dimensions" not in message


def test_a_structure_change_between_batches_names_the_sample(backend, no_leaks):
    def make(i):
        i = int(i)
        return {"x": np.full(2, i)} if i < 6 else {"x": np.full(2, i), "y": i}

    pipe = fl.from_arrays(np.arange(10)).filter(lambda i: int(i) != 0).map(make, backend=backend, workers=2).batch(3)
    with pipe, pytest.raises(fl.SampleError, match=r"sample 6 .*keys \['x', 'y'\]") as caught:
        list(pipe)
    assert caught.value.index == 6


# ---------------------------------------------------- 4. endless generators, bounded
def endless(shard, num_shards):
    """A Keras-style generator: it never ends."""
    i = 0
    while True:
        yield shard * 1000 + i
        i += 1


def test_samples_per_epoch_ends_an_endless_factory_exactly(backend, no_leaks):
    pipe = fl.from_generator(endless, 3, samples_per_epoch=10).map(lambda v: v, backend=backend, workers=2).batch(2)
    with pipe:
        epochs = [[b.tolist() for b in pipe] for _ in range(2)]
    serial = fl.from_generator(endless, 3, samples_per_epoch=10).map(lambda v: v, backend="serial").batch(2)
    assert epochs[0] == epochs[1] == [b.tolist() for b in serial]
    items = sorted(v for b in epochs[0] for v in b)
    assert items == [0, 1, 2, 3, 1000, 1001, 1002, 2000, 2001, 2002], "shares 4, 3, 3: every shard's first items"
    assert [len(b) for b in epochs[0]] == [2] * 5, "batches are cut across shards: every one full"


@pytest.mark.parametrize("stop", [1, 3, 5])
def test_samples_per_epoch_resumes_exactly(backend, stop, no_leaks):
    def build():
        return fl.from_generator(endless, 4, samples_per_epoch=22).shuffle(seed=3).map(lambda v: v * 2, backend=backend, workers=2).batch(3)

    with build() as pipe:
        whole = [b.tolist() for b in pipe.epoch(2)]
    with build() as pipe:
        it = pipe.epoch(2)
        head = [b.tolist() for b in itertools.islice(it, stop)]
        state = it.state()
        it.close()
    with build() as pipe:
        tail = [b.tolist() for b in pipe.resume(state)]
    assert head + tail == whole
    assert sum(len(b) for b in whole) == 22


def test_samples_per_epoch_is_at_most_what_a_finite_factory_gives(backend, no_leaks):
    def short(shard, num_shards):
        return range(shard * 100, shard * 100 + 2)  # two items a shard

    with fl.from_generator(short, 2, samples_per_epoch=7).map(lambda v: v, backend=backend, workers=2) as pipe:
        assert sorted(pipe) == [0, 1, 100, 101]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "10"])
def test_samples_per_epoch_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="samples_per_epoch must be an integer >= 1"):
        fl.from_generator(endless, 2, samples_per_epoch=bad)


def test_samples_per_epoch_is_shown():
    assert "samples_per_epoch=10" in repr(fl.from_generator(endless, 2, samples_per_epoch=10))


# ---------------------------------------------------- 5. ImageFolder labels for files
def write_image(path, value, fmt):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((6, 5, 3), value, np.uint8)).save(path, format=fmt)


@pytest.fixture
def image_tree(tmp_path):
    root = tmp_path / "train"
    layout = {
        "dog/d0.png": 10, "dog/d1.jpg": 20, "cat/c0.jpeg": 30, "cat/nested/c1.png": 40,
        "bird/b0.png": 50, "bird/b1.JPG": 60,
    }
    for rel, value in layout.items():
        write_image(root / rel, value, "PNG" if rel.lower().endswith(".png") else "JPEG")
    write_image(root / ".cache" / "x.png", 1, "PNG")  # hidden folder: skipped
    (root / "cat" / ".DS_Store").write_bytes(b"\0")  # hidden file: skipped
    (root / "README.txt").write_text("a note next to the class folders")  # not an image, at the root: ignored
    return root, layout


def read_image(sample):
    from PIL import Image

    path, label = sample
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB")), label, os.path.basename(path)


def test_labels_from_parent_folders(backend, image_tree, no_leaks):
    root, layout = image_tree
    pipe = fl.from_files(root, labels="parent")
    assert pipe.source.class_names == ["bird", "cat", "dog"]
    names = {"bird": 0, "cat": 1, "dog": 2}
    files = sorted(layout, key=str)
    with pipe.map(read_image, backend=backend, workers=2).batch(6) as loaded:
        (images, labels, basenames), = list(loaded)
    assert list(basenames) == [os.path.basename(f) for f in files]
    assert labels.tolist() == [names[f.split("/")[0]] for f in files]
    assert images.shape == (6, 6, 5, 3) and images.dtype == np.uint8
    assert [int(round(img.mean())) for img in images] == [layout[f] for f in files]  # each file, its own pixels


def test_labels_from_parent_folders_are_those_of_feedline_convert(image_tree, tmp_path, no_leaks):
    pytest.importorskip("pyarrow")
    from feedline.store import open_store
    from feedline.testing import convert

    root, _ = image_tree
    convert(root, tmp_path / "s", backend="serial", progress=False)
    store = open_store(tmp_path / "s")
    pipe = fl.from_files(root, labels="parent")
    assert store.meta["classes"] == pipe.source.class_names
    assert [int(store[i]["label"]) for i in range(len(store))] == [int(y) for _, y in pipe]


def test_a_stray_image_at_the_root_is_refused_by_name(image_tree):
    root, _ = image_tree
    write_image(root / "lost.png", 0, "PNG")
    write_image(root / "also_lost.jpg", 0, "JPEG")
    with pytest.raises(ValueError, match=r"2 file\(s\) lie directly in .*: also_lost\.jpg, lost\.png\. Move them"):
        fl.from_files(root, labels="parent")


def test_files_left_out_of_class_folders_are_named(image_tree):
    root, layout = image_tree
    (root / "dog" / "notes.txt").write_text("not an image")
    (root / "cat" / "c9.webp").write_bytes(b"RIFF")
    with pytest.warns(UserWarning, match=r"left out 2 file\(s\).*c9\.webp.*notes\.txt"):
        pipe = fl.from_files(root, labels="parent")
    assert len(pipe.source) == len(layout)


def test_integer_class_folders_keep_their_number(tmp_path):
    for name in ("0", "1", "10"):
        write_image(tmp_path / name / "a.png", 0, "PNG")
    pipe = fl.from_files(tmp_path, labels="parent")
    assert [int(y) for _, y in pipe] == [0, 1, 10]
    assert pipe.source.class_names == ["0", "1", "10"]


def test_parent_labels_need_the_root_folder(image_tree):
    root, _ = image_tree
    with pytest.raises(ValueError, match="root folder"):
        fl.from_files(str(root / "*" / "*.png"), labels="parent")
    with pytest.raises(ValueError, match="'parent'"):
        fl.from_files(root, labels="folder")
    empty = root.parent / "empty"
    (empty / "cat").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="no image or audio files"):
        fl.from_files(empty, labels="parent")
