"""Nothing outlives its pipeline: after Keras ``fit`` returns, or once a ``pipe.tf()`` dataset and its pipeline are
dropped, their process workers exit; only the fork server (`feedline.testing.helper_pids`) stays for the next pipeline.

Real Keras and TensorFlow, in a script run with ``KERAS_BACKEND`` set (Keras
fixes its backend when first imported); the script counts this process's
descendants with psutil, waiting a bounded time for workers to exit.
"""

from __future__ import annotations

import textwrap

import pytest
from keras_script import run_keras_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = textwrap.dedent(
    """
    import gc, json, time
    import numpy as np, psutil
    import keras
    import feedline as fl
    from feedline import testing

    def workers_left():
        # Descendants that are not helpers (fork server, zygotes), waited for up to 20 s (exits are not instant).
        deadline = time.monotonic() + 20
        while True:
            gc.collect()
            helpers = set(testing.helper_pids())
            left = [c.pid for c in psutil.Process().children(recursive=True)
                    if c.pid not in helpers and c.status() != psutil.STATUS_ZOMBIE]
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def twice(sample):
        x, y = sample
        return x * 2.0, y

    x = np.random.default_rng(0).normal(size=(96, 3)).astype("float32")
    y = x.sum(1, keepdims=True)

    def pipeline():
        return fl.from_arrays(x, y).map(twice, backend="process", workers=2).batch(16)

    report = {"backend": keras.backend.backend()}
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    model.fit(pipeline().keras(), epochs=2, validation_data=pipeline().keras(), validation_steps=2, verbose=0)
    report["after_fit"] = workers_left()
    report["helpers"] = len(testing.helper_pids())
    if report["backend"] == "tensorflow":
        pipe = pipeline()
        dataset = pipe.tf()
        report["batches"] = sum(1 for _ in dataset)
        report["while_held"] = len(testing.worker_pids(pipe))
        del dataset, pipe
        report["after_del"] = workers_left()
    print("REPORT " + json.dumps(report))
    """
)


def run_script(backend: str, folder) -> dict:
    return run_keras_script(SCRIPT, backend, folder / f"exit_{backend}.py", timeout=280)


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_workers_of_keras_fit_exit_when_fit_returns_and_only_the_fork_server_stays(backend, tmp_path):
    report = run_script(backend, tmp_path)
    assert report["after_fit"] == [], f"worker processes still alive after fit ({backend}): {report['after_fit']}"
    assert report["helpers"] >= 1  # the fork server stays, idle, for the next pipeline
    if backend == "tensorflow":
        assert report["batches"] == 6 and report["while_held"] == 2
        assert report["after_del"] == [], f"workers of a pipe.tf() pipeline alive after del + gc: {report['after_del']}"
