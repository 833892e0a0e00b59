"""Epochs a framework stops reading without closing stop at once: Keras's ``validation_steps`` / ``evaluate(steps=)``,
Lightning's ``limit_val_batches`` / ``limit_train_batches`` (with `close_left_epochs`).

A validation pipeline on process workers logs each sample it begins
(`sample_log`); when the framework's pass ends, the test's callback counts
the log, gives the workers a second, and counts again: a left epoch whose
queued tasks were not cancelled would run them meanwhile. The batches each
pass reads are those of the pipeline's own epochs, every sample once, and
Keras's ``steps_per_epoch`` still goes on through the same feedline epoch.
"""

from __future__ import annotations

import textwrap
import time

import numpy as np
import pytest
from keras_script import run_keras_script
from sample_log import logged_slow, samples_begun

import feedline as fl

pytestmark = pytest.mark.timeout(300)

WORKERS, BATCH = 2, 8


def first_batches(pipe, epochs: int, taken: int) -> list[list[list[int]]]:
    """The ids of the first ``taken`` batches of each of the next ``epochs`` epochs of ``pipe``."""
    found = []
    for _ in range(epochs):
        it = iter(pipe)
        found.append([np.asarray(next(it)).tolist() for _ in range(taken)])
        it.close()
    return found


def reference_ids(n: int, seed: int):
    return fl.from_arrays(np.arange(n)).shuffle(seed=seed).batch(BATCH)


KERAS_SCRIPT = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, {tests!r})
    import numpy as np
    import keras
    import feedline as fl
    from sample_log import logged_slow, samples_begun

    LOG = {log!r}
    seen = {{"train": [], "test": []}}
    passes = []

    class Recording(keras.Model):  # the torch backend runs these eagerly: each batch's ids are read
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            x, y, ids = data
            seen["train"].append(keras.ops.convert_to_numpy(ids).tolist())
            return super().train_step((x, y))

        def test_step(self, data):
            x, y, ids = data
            seen["test"].append(keras.ops.convert_to_numpy(ids).tolist())
            return super().test_step((x, y))

    class Watch(keras.callbacks.Callback):
        def on_test_end(self, logs=None):
            at_end = samples_begun(LOG)
            time.sleep(1.0)  # room for the left epoch's queued tasks to run, were they not cancelled
            passes.append({{"at_end": at_end, "after": samples_begun(LOG)}})

    x = np.random.default_rng(0).normal(size=(96, 3)).astype("float32")

    def with_id(i):
        return x[i], x[i].sum(keepdims=True), np.int64(i)

    def val_sample(i):
        logged_slow(i, LOG, 0.02)
        return with_id(int(i))

    val = fl.from_arrays(np.arange(96)).shuffle(seed=4).map(val_sample, backend="process", workers={workers}).batch({batch})
    train = fl.from_arrays(np.arange(48)).shuffle(seed=5).map(with_id, backend="thread", workers=2).batch({batch})
    model = Recording()
    model.compile("sgd", "mse", run_eagerly=True)
    model.fit(train.keras(), epochs=2, steps_per_epoch=3, validation_data=val.keras(), validation_steps=2, verbose=0, callbacks=[Watch()])
    model.evaluate(val.keras(), steps=2, verbose=0, callbacks=[Watch()])
    print("REPORT " + json.dumps({{"backend": keras.backend.backend(), "seen": seen, "passes": passes}}))
    """
)


@pytest.fixture(scope="module")
def keras_report(tmp_path_factory):
    pytest.importorskip("keras")
    pytest.importorskip("torch")
    folder = tmp_path_factory.mktemp("left_keras")
    tests = str(__import__("pathlib").Path(__file__).parent)
    text = KERAS_SCRIPT.format(tests=tests, log=str(folder / "begun.log"), workers=WORKERS, batch=BATCH)
    return run_keras_script(text, "torch", folder / "left.py", timeout=280)


def test_keras_validation_and_evaluate_with_steps_run_nothing_more_once_the_pass_ends(keras_report):
    passes = keras_report["passes"]
    assert len(passes) == 3  # two validation passes in fit, one evaluate
    for k, seen in enumerate(passes):
        assert seen["after"] - seen["at_end"] <= WORKERS, f"pass {k}: {seen['after'] - seen['at_end']} samples ran after it ended"


def test_keras_passes_with_steps_read_the_first_batches_of_new_epochs(keras_report):
    expected = first_batches(reference_ids(96, seed=4), epochs=3, taken=2)
    passes = keras_report["seen"]["test"]
    assert [passes[2 * k : 2 * k + 2] for k in range(3)] == expected


def test_keras_steps_per_epoch_goes_on_through_the_same_feedline_epoch_every_sample_once(keras_report):
    # Keras's epochs of 3 steps read one 6-batch feedline epoch: the pause at the end of the first resumes exactly.
    reference = [np.asarray(b).tolist() for b in reference_ids(48, seed=5)]
    assert keras_report["seen"]["train"] == reference
    assert sorted(v for b in keras_report["seen"]["train"] for v in b) == list(range(48))


# ------------------------------------------------------------------ Lightning
def test_lightning_limited_passes_run_nothing_more_once_they_end_and_read_new_epochs(tmp_path):
    lightning = pytest.importorskip("lightning")
    import torch

    from feedline.adapters.lightning import close_left_epochs

    log = tmp_path / "begun.log"
    x = np.random.default_rng(0).normal(size=(96, 3)).astype("float32")
    seen: dict[str, list] = {"train": [], "val": []}
    passes: list[dict] = []

    def with_id(i):
        return x[i], x[i].sum(keepdims=True), np.int64(i)

    def val_sample(i):
        logged_slow(i, str(log), 0.02)
        return with_id(int(i))

    class Module(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)

        def training_step(self, batch, index):
            xb, yb, ids = batch
            seen["train"].append(ids.tolist())
            return torch.nn.functional.mse_loss(self.layer(xb), yb)

        def validation_step(self, batch, index):
            seen["val"].append(batch[2].tolist())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class Watch(lightning.Callback):  # after close_left_epochs() in the list: runs once the epoch was closed
        def on_validation_epoch_end(self, trainer, module):
            at_end = samples_begun(log)
            time.sleep(1.0)  # room for the left epoch's queued tasks to run, were they not cancelled
            passes.append({"at_end": at_end, "after": samples_begun(log)})

    val = fl.from_arrays(np.arange(96)).shuffle(seed=4).map(val_sample, backend="process", workers=WORKERS).batch(BATCH)
    train = fl.from_arrays(np.arange(48)).shuffle(seed=5).map(with_id, backend="thread", workers=2).batch(BATCH)
    trainer = lightning.Trainer(
        max_epochs=2, limit_val_batches=2, limit_train_batches=3, num_sanity_val_steps=0, accelerator="cpu",
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=tmp_path, callbacks=[close_left_epochs(), Watch()],
    )
    with val, train:
        trainer.fit(Module(), train_dataloaders=train.torch(), val_dataloaders=val.torch())
    assert len(passes) == 2
    for k, pass_ in enumerate(passes):
        assert pass_["after"] - pass_["at_end"] <= WORKERS, f"pass {k}: {pass_['after'] - pass_['at_end']} samples ran after it ended"
    assert [seen["val"][2 * k : 2 * k + 2] for k in range(2)] == first_batches(reference_ids(96, seed=4), epochs=2, taken=2)
    assert [seen["train"][3 * k : 3 * k + 3] for k in range(2)] == first_batches(reference_ids(48, seed=5), epochs=2, taken=3)


def test_close_epoch_between_epochs_does_nothing_and_mid_epoch_ends_the_iterator(no_leaks):
    pytest.importorskip("torch")
    with fl.from_arrays(np.arange(40)).map(lambda v: v + 1, backend="thread", workers=2).batch(4) as pipe:
        loader = pipe.torch()
        loader.close_epoch()  # nothing live: no error
        it = iter(loader)
        next(it)
        loader.close_epoch()
        assert list(it) == []
        assert sorted(v for b in loader for v in b.tolist()) == list(range(1, 41))  # the next epoch is whole
