"""Loader statistics logged beside training metrics (Keras and Lightning callbacks)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

KERAS_SCRIPT = textwrap.dedent(
    """
    import json
    import numpy as np, keras, feedline as fl
    from feedline.adapters.stats_callbacks import keras_stats_callback

    x = np.random.default_rng(0).random((256, 4)).astype("float32")
    y = (x.sum(1) > 2).astype("float32")
    pipe = fl.from_arrays(x, y).shuffle(seed=0).batch(32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    history = model.fit(pipe.keras(), epochs=2, verbose=0, callbacks=[keras_stats_callback(pipe)])
    print(json.dumps(history.history))
    """
)


def test_keras_callback_puts_input_stall_and_throughput_in_the_history():
    pytest.importorskip("keras")
    pytest.importorskip("torch")
    env = dict(os.environ, KERAS_BACKEND="torch")
    done = subprocess.run([sys.executable, "-c", KERAS_SCRIPT], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    history = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(history["input_stall"]) == 2 and len(history["input_samples_per_s"]) == 2
    assert all(0.0 <= v <= 1.0 for v in history["input_stall"])
    assert all(v > 0 for v in history["input_samples_per_s"])
