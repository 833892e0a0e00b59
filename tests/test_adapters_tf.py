"""`pipe.tf()`: real TensorFlow (CPU), element specs, a custom training loop.

``model.fit(pipe.tf())`` is tested with Keras on the TensorFlow backend in
tests/test_adapters_keras.py (Keras runs in subprocesses there).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import feedline as fl
from feedline.adapters.tf import to_tf


def regression(n: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 3)).astype(np.float32)
    y = (x @ np.array([1.5, -2.0, 0.5], np.float32) + 0.25).astype(np.float32)
    return x, y, np.arange(n)


def test_custom_loop_trains_two_epochs_seeing_every_sample_once(no_leaks):
    x, y, ids = regression(96)
    pipe = fl.from_arrays(x, y, ids).shuffle(seed=1).map(lambda s: s, backend="process", workers=2).batch(16)
    w, b = tf.Variable(tf.zeros(3)), tf.Variable(0.0)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.linalg.matvec(xb, w) + b - yb) ** 2)
        gw, gb = tape.gradient(loss, [w, b])
        w.assign_sub(0.1 * gw)
        b.assign_sub(0.1 * gb)
        return loss

    history = []
    with pipe:
        ds = pipe.tf()
        for _ in range(2):
            seen, losses = [], []
            for xb, yb, ib in ds:
                losses.append(float(step(xb, yb)))
                seen += ib.numpy().tolist()
            history.append((seen, np.mean(losses)))
        del ds
    assert [sorted(s) for s, _ in history] == [list(range(96))] * 2, "the batch read for the spec must not be lost"
    assert history[0][0] != history[1][0], "each iteration is a new epoch"
    assert history[1][1] < history[0][1]


def test_element_spec_comes_from_the_first_batch():
    images = np.zeros((10, 4, 4, 3), np.uint8)
    pipe = fl.from_arrays({"image": images, "label": np.arange(10)}).batch(4)
    ds = pipe.tf()
    assert ds.element_spec == {
        "image": tf.TensorSpec((None, 4, 4, 3), tf.uint8),
        "label": tf.TensorSpec((None,), tf.int64),
    }
    assert ds.cardinality().numpy() == 3


def test_declared_element_spec_is_used_without_starting_the_pipeline():
    pipe = fl.from_arrays(np.ones((8, 2), np.float32)).batch(4)
    spec = tf.TensorSpec((4, 2), tf.float32)
    ds = pipe.tf(element_spec=spec)
    with pytest.raises(fl.FeedlineError):
        pipe.stats()  # nothing ran yet
    assert ds.element_spec == spec
    assert [b.shape.as_list() for b in ds] == [[4, 2], [4, 2]]


def test_strings_and_lists_travel_as_tf_structures():
    pipe = fl.from_sequence([[np.float32(i), f"f{i}.wav"] for i in range(4)]).batch(2, collate=lambda s: [np.stack([v[0] for v in s]), np.array([v[1] for v in s])])
    ds = pipe.tf()
    assert ds.element_spec == (tf.TensorSpec((None,), tf.float32), tf.TensorSpec((None,), tf.string))
    names = [n.decode() for _, batch_names in ds for n in batch_names.numpy()]
    assert names == ["f0.wav", "f1.wav", "f2.wav", "f3.wav"]


def test_unknown_length_gives_unknown_cardinality():
    pipe = fl.from_arrays(np.arange(10)).filter(lambda v: v % 2 == 0).batch(2)
    ds = pipe.tf()
    assert ds.cardinality().numpy() == tf.data.UNKNOWN_CARDINALITY
    assert sorted(int(v) for b in ds for v in b.numpy()) == [0, 2, 4, 6, 8]


def test_sharded_pipeline_sets_the_even_cardinality():
    ds = fl.from_arrays(np.arange(97)).shard(0, 2).batch(8).tf()
    assert ds.cardinality().numpy() == 6
    assert len(list(ds)) == 6
    assert to_tf(fl.from_arrays(np.arange(97)).shard(0, 2).batch(8), even_batches=False).cardinality().numpy() == 7


def test_object_leaves_are_a_clear_error():
    pipe = fl.from_sequence([{"meta": {"a": 1}} for _ in range(2)]).batch(2, collate=lambda s: np.array([v["meta"] for v in s], dtype=object))
    with pytest.raises(TypeError, match="tf.data cannot carry"):
        pipe.tf()


def test_empty_pipeline_needs_a_declared_spec():
    pipe = fl.from_arrays(np.arange(3)).batch(4, drop_remainder=True)
    with pytest.raises(ValueError, match="pass element_spec="):
        pipe.tf()


def test_without_tensorflow_the_error_names_the_extra():
    script = "import sys; sys.modules['tensorflow'] = None\nimport numpy as np, feedline as fl\ntry:\n    fl.from_arrays(np.arange(4)).batch(2).tf()\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert "pip install 'feedline[tf]'" in out.stdout, out.stdout + out.stderr
