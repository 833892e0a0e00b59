"""`pipe.keras()` and `from_keras_sequence`: real Keras 3 on the TensorFlow, JAX and PyTorch backends.

Keras fixes its backend when first imported, so each backend runs one
script in a subprocess with ``KERAS_BACKEND`` set; the script records what
happened as JSON and the tests below check one behaviour each. The script
is a plain file run as ``__main__`` with no ``if __name__ == "__main__":``
guard and a lambda in its Sequence, as a user's script would be.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from keras_script import run_keras_script

import feedline as fl
from feedline.adapters.keras import from_keras_sequence

BACKENDS = ["tensorflow", "jax", "torch"]
SAMPLES, BATCH, EPOCHS = 96, 16, 2

SCRIPT = textwrap.dedent(
    """
    import json, os, sys, threading
    import numpy as np
    import keras
    import feedline as fl
    from feedline.adapters.keras import from_keras_sequence

    report = {"backend": keras.backend.backend()}
    WEIGHTS = np.array([1.5, -2.0, 0.5], "float32")

    # ---- fit / evaluate / predict on pipe.keras() -------------------------
    produced, lock = [], threading.Lock()

    def record(sample):  # runs in feedline's threads: records the order work was done in
        with lock:
            produced.append(int(sample["id"]))
        return sample["x"], sample["y"]

    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 3)).astype("float32")
    y = (x @ WEIGHTS + 0.25)[:, None].astype("float32")
    train = fl.from_arrays({"x": x, "y": y, "id": np.arange(96)}).shuffle(seed=1).map(record, backend="thread", workers=2).batch(16)
    val = fl.from_arrays(x[:32], y[:32]).batch(8)

    class Probe(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            report["steps_param"] = self.params["steps"]
            report["batches_per_epoch"] = []

        def on_epoch_begin(self, epoch, logs=None):
            report["batches_per_epoch"].append(0)

        def on_train_batch_end(self, batch, logs=None):
            report["batches_per_epoch"][-1] += 1

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(train.keras(), epochs=2, validation_data=val.keras(), verbose=0, callbacks=[Probe()])
    report["loss"] = history.history["loss"]
    report["val_loss"] = history.history["val_loss"]
    report["produced"] = produced
    report["train_epochs_started"] = train.stats().epoch + 1
    report["val_epochs_started"] = val.stats().epoch + 1
    report["evaluate"] = float(model.evaluate(val.keras(), verbose=0))
    prediction = model.predict(val.keras(), verbose=0)
    report["predict_shape"] = list(prediction.shape)
    report["predict_matches_model"] = bool(np.allclose(prediction, keras.ops.convert_to_numpy(model(x[:32])), atol=1e-5))

    if report["backend"] == "tensorflow":  # tf.data straight into fit
        tf_model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        tf_model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        report["tf_data_loss"] = tf_model.fit(fl.from_arrays(x, y).shuffle(seed=2).batch(16).tf(), epochs=2, verbose=0).history["loss"]

    # ---- a user's keras.utils.Sequence, run in feedline's processes -------
    halve = lambda a: a / 2.0  # a lambda, in a script without a __main__ guard

    class SequenceData(keras.utils.Sequence):
        def __init__(self, batches, batch_size, debug=False, **kwargs):
            super().__init__(**kwargs)
            self.batches, self.batch_size, self.debug = batches, batch_size, debug

        def __len__(self):
            return self.batches

        def __getitem__(self, i):
            r = np.random.default_rng(i)
            xb = r.normal(size=(self.batch_size, 3)).astype("float32")
            yb = (xb @ WEIGHTS)[:, None].astype("float32")
            if self.debug:
                n = self.batch_size
                return {"batch": np.full(n, i), "pid": np.full(n, os.getpid()), "keras_imported": np.full(n, "keras" in sys.modules)}
            return halve(2.0 * xb), yb

    seq_pipe = from_keras_sequence(SequenceData(6, 16), shuffle=True, seed=0, backend="process", workers=2)
    seq_model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    seq_model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    report["sequence_loss"] = seq_model.fit(seq_pipe.keras(), epochs=2, verbose=0).history["loss"]
    report["sequence_len"] = len(seq_pipe)

    debug = from_keras_sequence(SequenceData(6, 16, debug=True), shuffle=True, seed=0, backend="process", workers=2)
    report["sequence_epochs"] = []
    for _ in range(2):
        batches = list(debug)
        report["sequence_epochs"].append({
            "order": [int(b["batch"][0]) for b in batches],
            "pids": sorted({int(b["pid"][0]) for b in batches}),
            "keras_imported": any(bool(b["keras_imported"][0]) for b in batches),
        })
    report["consumer_pid"] = os.getpid()
    print("REPORT " + json.dumps(report))
    """
)


_REPORTS: dict[str, dict] = {}


def run_script(backend: str, folder) -> dict:
    """Run the script once per Keras backend (cached for the session); its JSON record."""
    if backend not in _REPORTS:
        _REPORTS[backend] = run_keras_script(SCRIPT, backend, folder / f"train_{backend}.py", timeout=240)
    data = _REPORTS[backend]
    return data


@pytest.fixture(scope="module", params=BACKENDS)
def report(request, tmp_path_factory):
    return run_script(request.param, tmp_path_factory.mktemp("keras"))


def epochs_of(report) -> list[list[int]]:
    produced = report["produced"]
    return [produced[k * SAMPLES : (k + 1) * SAMPLES] for k in range(len(produced) // SAMPLES)]


def test_fit_sees_every_sample_once_per_epoch(report):
    assert len(report["produced"]) == EPOCHS * SAMPLES, "no batch read twice, no epoch started and dropped"
    assert [sorted(e) for e in epochs_of(report)] == [list(range(SAMPLES))] * EPOCHS
    assert report["batches_per_epoch"] == [SAMPLES // BATCH] * EPOCHS


def test_each_keras_epoch_is_one_new_feedline_epoch(report):
    first, second = epochs_of(report)
    assert first != second
    assert report["train_epochs_started"] == EPOCHS
    assert report["val_epochs_started"] == EPOCHS  # one validation pass per epoch


def test_progress_bar_knows_the_steps_per_epoch(report):
    assert report["steps_param"] == SAMPLES // BATCH


def test_loss_goes_down(report):
    assert report["loss"][1] < report["loss"][0]
    assert report["val_loss"][1] < report["val_loss"][0]


def test_evaluate_and_predict_use_the_pipeline(report):
    assert report["evaluate"] == pytest.approx(report["val_loss"][-1], rel=1e-5)
    assert report["predict_shape"] == [32, 1]
    assert report["predict_matches_model"], "predictions come back in pipeline order"


def test_tf_data_from_pipe_tf_trains_on_the_tensorflow_backend(tmp_path_factory):
    tf_report = run_script("tensorflow", tmp_path_factory.mktemp("keras"))
    assert tf_report["tf_data_loss"][1] < tf_report["tf_data_loss"][0]


def test_keras_sequence_trains_from_worker_processes(report):
    assert report["sequence_len"] == 6
    assert report["sequence_loss"][1] < report["sequence_loss"][0]
    for epoch in report["sequence_epochs"]:
        assert sorted(epoch["order"]) == list(range(6))
        assert epoch["pids"] and report["consumer_pid"] not in epoch["pids"]
        assert not epoch["keras_imported"], "a plain __getitem__ must not drag Keras into the workers"
    assert report["sequence_epochs"][0]["order"] != report["sequence_epochs"][1]["order"]


# ------------------------------------------------------- without Keras itself
class Batches:
    """A Sequence-like object (``__getitem__`` returns whole batches)."""

    def __init__(self, count: int, fail_at: int | None = None):
        self.count, self.fail_at = count, fail_at

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if i == self.fail_at:
            raise OSError(f"corrupt batch {i}")
        return np.full((4, 2), i, np.float32), np.full(4, i)


def test_sequence_batches_pass_through_whole():
    pipe = from_keras_sequence(Batches(5), shuffle=False, backend="serial")
    batches = list(pipe)
    assert len(pipe) == 5
    assert [b[0].shape for b in batches] == [(4, 2)] * 5
    assert [int(b[1][0]) for b in batches] == [0, 1, 2, 3, 4]


def test_sequence_batch_errors_follow_on_error():
    with pytest.warns(RuntimeWarning, match="skipped 1"):
        kept = [int(y[0]) for _, y in from_keras_sequence(Batches(5, fail_at=2), shuffle=False, backend="thread", workers=2, on_error="skip")]
    assert kept == [0, 1, 3, 4]
    with pytest.raises(fl.SampleError, match="corrupt batch 2"):
        list(from_keras_sequence(Batches(5, fail_at=2), backend="serial"))


def test_sequence_epoch_hooks_are_reported_as_not_called():
    class Reshuffling(Batches):
        def on_epoch_end(self):
            pass

    with pytest.warns(UserWarning, match="does not call"):
        from_keras_sequence(Reshuffling(3))


def test_seed_without_shuffle_is_refused():
    with pytest.raises(ValueError, match="shuffle=True"):
        from_keras_sequence(Batches(3), shuffle=False, seed=1)


def test_without_keras_the_error_names_the_extra():
    script = "import sys; sys.modules['keras'] = None\nimport numpy as np, feedline as fl\ntry:\n    fl.from_arrays(np.arange(4)).batch(2).keras()\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert "pip install 'feedline[keras]'" in out.stdout, out.stdout + out.stderr


# ------------------------------------------------- detaching from keras.utils.Sequence
def test_sequence_copies_sent_to_workers_do_not_inherit_from_keras():
    import keras  # in the test extra; imported in-process on its default backend (fit runs in subprocesses)

    class Plain(keras.utils.Sequence):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.scale = 3

        def __len__(self):
            return 2

        def __getitem__(self, i):  # the batch, and what the copy that workers index is
            return np.full(2, i * self.scale), np.array([isinstance(self, keras.utils.Sequence), type(self).__name__])

    class UsesSuper(Plain):
        def __getitem__(self, i):
            x, what = super().__getitem__(i)
            return x + 1, what

    def batches(seq):
        with from_keras_sequence(seq, shuffle=False, backend="serial") as pipe:
            return [(x.tolist(), what.tolist()) for x, what in pipe]

    assert batches(Plain()) == [([0, 0], ["False", "Plain"]), ([3, 3], ["False", "Plain"])]
    assert batches(UsesSuper()) == [([1, 1], ["True", "UsesSuper"]), ([4, 4], ["True", "UsesSuper"])], (
        "zero-argument super() needs the real class: the original is indexed")


def test_pydataset_with_num_batches_and_no_len_is_accepted():
    import keras

    class Counted(keras.utils.PyDataset):
        @property
        def num_batches(self):
            return 3

        def __getitem__(self, i):
            return np.full((2, 1), i, np.float32), np.full(2, i)

    class Endless(Counted):
        @property
        def num_batches(self):
            return None

    assert [int(y[0]) for _, y in from_keras_sequence(Counted(), shuffle=False, backend="serial")] == [0, 1, 2]
    with pytest.raises(TypeError, match="needs a finite sequence"):
        from_keras_sequence(Endless())
