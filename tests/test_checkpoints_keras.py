"""`LoaderCheckpoint` with real Keras 3: ``fit`` interrupted by an exception from a callback, then resumed.

Each case trains three times in one fresh interpreter (Keras fixes its
backend on import): uninterrupted; interrupted after a backup; resumed
from that backup. A layer records the ids of every batch the model
trains on, so the test sees
exactly what was trained: the first run's batches up to its last backup
followed by the resumed run's must be the uninterrupted run's, each
sample once per epoch, with the same Keras epochs. The steps run eagerly
(PyTorch; JAX with ``run_eagerly``) so that the layer sees concrete ids.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SAMPLES, BATCH = 40, 4  # 10 batches per feedline epoch

SCRIPT = textwrap.dedent(
    """
    import json, os, shutil, sys
    import numpy as np
    import keras
    import feedline as fl
    from feedline.adapters.keras import LoaderCheckpoint

    STEPS, SAVE_FREQ, CRASH_AT, KIND, EPOCHS = json.loads(sys.argv[1])
    folder = sys.argv[2]
    ids = np.arange(40)
    x = np.stack([ids, np.ones(40)], 1).astype("float32")

    def pipeline(workers):
        return fl.from_arrays(x, ids.astype("float32")).shuffle(seed=3).map(lambda s: s, backend="thread", workers=workers).batch(4)

    class Record(keras.layers.Layer):  # the ids of each batch the model trains on
        def call(self, inputs):
            if active:
                trained.append([int(v) for v in keras.ops.convert_to_numpy(inputs[:, 0])])
            return inputs

    class Crash(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = 0
        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == CRASH_AT:
                raise RuntimeError("interrupted")

    active = False

    class Steps(keras.callbacks.Callback):  # batches per Keras epoch, and how many were trained at each backup
        def on_train_begin(self, logs=None):
            self.per_epoch, self.saved_at, self.count = {}, [], 0
        def on_train_batch_begin(self, batch, logs=None):
            global active
            active = True
        def on_train_batch_end(self, batch, logs=None):
            global active
            active = False
            self.count += 1
            self.per_epoch[self.epoch] = self.per_epoch.get(self.epoch, 0) + 1
            if SAVE_FREQ != "epoch" and self.count % SAVE_FREQ == 0:
                self.saved_at.append(len(trained))
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self.per_epoch[epoch] = 0
        def on_epoch_end(self, epoch, logs=None):
            if SAVE_FREQ == "epoch":
                self.saved_at.append(len(trained))

    def model():
        m = keras.Sequential([keras.Input((2,)), Record(), keras.layers.Dense(1)])
        m.compile(optimizer=keras.optimizers.SGD(0.001), loss="mse", jit_compile=False, run_eagerly=True)
        return m

    def fit(workers, callbacks, initial_epoch=0, m=None):
        global trained
        trained = []
        steps = Steps()
        train = pipeline(workers).keras()
        m = m or model()
        cbs = callbacks(train)
        try:
            m.fit(train, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, callbacks=[steps, *cbs], initial_epoch=initial_epoch)
        except RuntimeError as e:
            assert str(e) == "interrupted", e
        return trained, steps, m

    backup = os.path.join(folder, "backup")
    def with_checkpoint(crash):
        def callbacks(train):
            if KIND == "backup":
                own = [keras.callbacks.BackupAndRestore(backup, save_freq=SAVE_FREQ)]
            else:
                own = [keras.callbacks.ModelCheckpoint(os.path.join(backup, "model.weights.h5"), save_weights_only=True)]
            return [*own, LoaderCheckpoint(train, backup, save_freq=SAVE_FREQ)] + ([Crash()] if crash else [])
        return callbacks

    whole, whole_steps, _ = fit(2, lambda train: [])
    first, first_steps, m = fit(2, with_checkpoint(True))
    kept = first_steps.saved_at[-1]
    saved = os.path.join(backup, "feedline_loader.json")
    state_bytes = os.path.getsize(saved)
    if KIND == "backup":
        second, second_steps, _ = fit(3, with_checkpoint(False))
    else:
        resumed_epoch = len(first_steps.saved_at)  # epochs that ended (one save each)
        m2 = model()
        m2.load_weights(os.path.join(backup, "model.weights.h5"))
        second, second_steps, _ = fit(3, with_checkpoint(False), initial_epoch=resumed_epoch, m=m2)
    report = {
        "backend": keras.backend.backend(),
        "whole": whole, "first": first[:kept], "second": second,
        "whole_per_epoch": whole_steps.per_epoch, "second_per_epoch": second_steps.per_epoch,
        "first_per_epoch": first_steps.per_epoch,
        "state_bytes": state_bytes,
    }
    print("REPORT " + json.dumps(report))
    """
)

CASES = {
    # steps_per_epoch shorter than the data (10 batches), not dividing it: Keras epochs of 4, 4, 2 batches
    "batch-backup-short-keras-epochs": (4, 3, 8, "backup", 6),
    "batch-backup-whole-epochs": (None, 7, 13, "backup", 3),
    "epoch-backup-short-keras-epochs": (4, "epoch", 11, "backup", 6),
    "model-checkpoint-initial-epoch": (4, "epoch", 15, "model", 6),
}


RUNS = [("torch", case) for case in sorted(CASES)] + [("jax", "batch-backup-short-keras-epochs")]


@pytest.mark.parametrize(("backend", "case"), RUNS)
def test_keras_fit_resumed_from_a_backup_trains_each_sample_once(backend, case, tmp_path):
    report = _run(tmp_path, CASES[case], backend)
    assert report["backend"] == backend
    whole = report["whole"]
    for start in range(0, len(whole), SAMPLES // BATCH):  # the uninterrupted run: every sample once per feedline epoch
        assert sorted(v for b in whole[start : start + SAMPLES // BATCH] for v in b) == list(range(SAMPLES))
    assert 0 < len(report["first"]) < len(whole)
    assert report["first"] + report["second"] == whole
    resumed = min(report["second_per_epoch"], key=int)
    assert all(n == report["whole_per_epoch"][k] for k, n in report["second_per_epoch"].items() if k != resumed)
    assert report["state_bytes"] > 0


def _run(folder, case, backend) -> dict:
    script = folder / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, KERAS_BACKEND=backend, JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, str(script), json.dumps(case), str(folder)], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("REPORT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(lines[-1][len("REPORT ") :])


REFUSALS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras
    import feedline as fl
    from feedline.adapters.keras import LoaderCheckpoint

    folder = sys.argv[2]
    report = {"backend": keras.backend.backend()}
    train = fl.from_arrays(np.ones((8, 2), "float32"), np.ones(8, "float32")).batch(4).keras()
    for name, make in [("not_keras_data", lambda: LoaderCheckpoint([1, 2], folder)),
                       ("bad_save_freq", lambda: LoaderCheckpoint(train, folder, save_freq=0))]:
        try:
            make()
        except (TypeError, ValueError) as e:
            report[name] = [type(e).__name__, str(e)]
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    try:
        model.fit(train, epochs=1, verbose=0, callbacks=[LoaderCheckpoint(train, folder)])
    except RuntimeError as e:
        report["fit"] = str(e)
    print("REPORT " + json.dumps(report))
    """
)


def test_loader_checkpoint_refuses_bad_arguments_and_the_tensorflow_backend(tmp_path):
    script = tmp_path / "refusals.py"
    script.write_text(REFUSALS)
    env = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, str(script), "-", str(tmp_path)], capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("REPORT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert report["not_keras_data"][0] == "TypeError" and "pipe.keras()" in report["not_keras_data"][1]
    assert report["bad_save_freq"][0] == "ValueError" and "save_freq" in report["bad_save_freq"][1]
    assert "KERAS_BACKEND=jax" in report["fit"]


def test_a_position_missing_for_the_backup_is_refused_naming_both(tmp_path):
    case = (4, 3, 8, "backup", 6)
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "training_metadata.json").write_text(json.dumps({"epoch": 4, "batch": 2}))
    (tmp_path / "backup" / "feedline_loader.json").write_text(json.dumps({"feedline_keras": 1, "records": []}))
    env = dict(os.environ, KERAS_BACKEND="torch")
    run = subprocess.run([sys.executable, str(script), json.dumps(case), str(tmp_path)], capture_output=True, text=True,
                         timeout=300, env=env)
    assert run.returncode != 0
    assert "fit resumes at epoch 4 after batch 2" in run.stderr and "same directory and save_freq" in run.stderr
