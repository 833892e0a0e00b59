"""`LoaderCheckpoint`: a Keras callback that saves ``pipe.keras()``'s position beside the model's backup.

Keras 3's ``BackupAndRestore`` restores the weights and the epoch number,
and restarts that epoch at its first step; ``ModelCheckpoint`` plus
``fit(initial_epoch=k)`` does the same at an epoch boundary. Neither knows
where the data stood. This callback writes the loader's position at the
same moments (``save_freq``), and on resume makes the data continue right
after the last batch trained on before the backup, the resumed Keras epoch
ending at its own last step, whatever ``steps_per_epoch`` is. The file
layout and the rules: docs/checkpoints.md, "Keras".
"""

from __future__ import annotations

import functools
import json
import os

from ._common import require

__all__ = ["LoaderCheckpoint"]

FILE_NAME = "feedline_loader.json"
VERSION = 1  # the layout of FILE_NAME; a restore refuses others
BATCH_RECORDS_KEPT = 2  # BackupAndRestore's latest save and the one before (a kill between its write and ours)
_BACKUP_METADATA = "training_metadata.json"  # BackupAndRestore's record of the epoch and batch it saved


def LoaderCheckpoint(data, directory, save_freq="epoch"):  # noqa: N802 (a class to its users, made on first use)
    """A Keras callback that saves where ``data`` (``pipe.keras()``) stands, and restores it when ``fit`` resumes.

    Put it in ``callbacks`` with the model's own checkpoint, with the same
    directory and ``save_freq``::

        train = pipe.keras()
        backup = keras.callbacks.BackupAndRestore("backup", save_freq=100)
        model.fit(train, epochs=5, callbacks=[backup, LoaderCheckpoint(train, "backup", save_freq=100)])

    Run the same lines again after an interruption: the weights come back
    from ``BackupAndRestore``, the data continues right after the last batch
    trained on before its backup, and each sample of the run is trained on
    exactly once. With ``ModelCheckpoint`` (``save_freq="epoch"``), a fit
    started with ``initial_epoch=k`` continues the data where epoch ``k - 1``
    ended.

    Args:
        data: what ``pipe.keras()`` returned, the ``x`` given to ``fit``.
        directory: where to write the position (``feedline_loader.json``):
            ``BackupAndRestore``'s ``backup_dir``, or any folder beside your
            ``ModelCheckpoint`` files.
        save_freq: ``"epoch"`` or a number of batches, as given to
            ``BackupAndRestore`` / ``ModelCheckpoint``.

    Raises:
        TypeError: ``data`` is not ``pipe.keras()``'s result.
        ValueError: ``save_freq`` is neither ``"epoch"`` nor a positive integer.
    """
    return _callback_class()(data, directory, save_freq)


@functools.cache
def _callback_class():
    keras = require("keras", "keras", "LoaderCheckpoint")
    from .keras import _adapter_class

    class LoaderCheckpoint(keras.callbacks.Callback):
        """See `feedline.adapters.keras.LoaderCheckpoint`."""

        def __init__(self, data, directory, save_freq):
            super().__init__()
            if not isinstance(data, _adapter_class()):
                raise TypeError(
                    f"LoaderCheckpoint(data=...) takes what pipe.keras() returned (the x given to fit), "
                    f"got {type(data).__name__}; build it once, train = pipe.keras(), and pass train to both"
                )
            if save_freq != "epoch" and (isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1):
                raise ValueError(f"LoaderCheckpoint(save_freq=...) must be 'epoch' or a number of batches >= 1, got {save_freq!r}")
            self.epochs = data._epochs
            self.path = os.path.join(os.fspath(directory), FILE_NAME)
            self.directory = os.fspath(directory)
            self.save_freq = save_freq
            self.records: list[dict] = []
            self.since_save = 0
            # BackupAndRestore's epoch count, the key it writes with a batch save_freq: epochs ended
            # while this callback object lived (it does not start from the restored epoch).
            self.backup_epoch = 0
            self.restore_pending = True

        def on_train_begin(self, logs=None):
            if keras.backend.backend() == "tensorflow":
                raise RuntimeError(
                    "LoaderCheckpoint needs Keras's JAX or PyTorch backend: on TensorFlow, fit reads "
                    "pipe.keras() through a tf.data.Dataset that runs ahead of the step, so the position "
                    "at a backup is not the last batch trained on. Set KERAS_BACKEND=jax or torch"
                )
            self.records = _read(self.path)
            self.since_save = 0
            self.restore_pending = True

        def on_epoch_begin(self, epoch, logs=None):
            if self.restore_pending:  # the first epoch of this fit: the data's iterator opens after this call
                self.restore_pending = False
                self._restore(epoch)

        def on_train_batch_end(self, batch, logs=None):
            if self.save_freq == "epoch":
                return
            self.since_save += 1
            if self.since_save >= self.save_freq:
                self.since_save = 0
                steps = self.params.get("steps")
                take = None if steps is None else steps - batch - 1  # the Keras epoch's steps still to run
                self._save({"epoch": self.backup_epoch, "batch": batch, "take": take})

        def on_epoch_end(self, epoch, logs=None):
            self.backup_epoch = epoch + 1
            if self.save_freq == "epoch":
                self._save({"epoch": epoch + 1, "batch": None, "take": None})

        def _save(self, record: dict) -> None:
            record["state"] = self.epochs.position.state_dict()
            mid_epoch = [r for r in self.records if r["batch"] is not None]
            ends = [r for r in self.records if r["batch"] is None and r["epoch"] != record["epoch"]]
            if record["batch"] is None:
                ends.append(record)
            else:
                mid_epoch = [*mid_epoch, record][-BATCH_RECORDS_KEPT:]
            self.records = ends + mid_epoch
            _write(self.path, self.records)

        def _restore(self, epoch: int) -> None:
            key = _wanted(self.directory, self.save_freq, epoch)
            if key is None:
                return
            found = [r for r in self.records if (r["epoch"], r["batch"]) == key]
            if not found:
                saved = [(r["epoch"], r["batch"]) for r in self.records]
                raise ValueError(
                    f"LoaderCheckpoint: fit resumes at epoch {key[0]}"
                    + ("" if key[1] is None else f" after batch {key[1]}")
                    + f" but {self.path} holds the data's position for (epoch, batch) {saved or 'nothing'}; "
                    "give LoaderCheckpoint the same directory and save_freq as the model's checkpoint, or "
                    "delete both to start over"
                )
            self.epochs.resume(found[0]["state"], found[0]["take"])

    return LoaderCheckpoint


def _wanted(directory: str, save_freq, epoch: int):
    """The (epoch, batch) of the record this fit resumes from, or None for a fresh start.

    ``BackupAndRestore`` writes ``{"epoch": e, "batch": b}``: after batch
    ``b`` of epoch ``e`` with a batch ``save_freq``, at the end of epoch
    ``e - 1`` with ``"epoch"``. Without it, a fit that starts at epoch
    ``k > 0`` (``initial_epoch``) resumes where epoch ``k - 1`` ended.
    """
    path = os.path.join(directory, _BACKUP_METADATA)
    if os.path.exists(path):
        with open(path) as f:
            saved = json.load(f)
        return (saved["epoch"], None) if save_freq == "epoch" else (saved["epoch"], saved["batch"])
    return (epoch, None) if epoch > 0 else None


def _read(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    try:
        with open(path) as f:
            saved = json.load(f)
    except ValueError as e:
        raise ValueError(f"LoaderCheckpoint: {path} is not the JSON it writes ({e}); delete it with the model's backup to start over") from e
    if not isinstance(saved, dict) or saved.get("feedline_keras") != VERSION or not isinstance(saved.get("records"), list):
        raise ValueError(
            f"LoaderCheckpoint: {path} is not a layout-{VERSION} file of LoaderCheckpoint; delete it with the model's backup to start over"
        )
    return saved["records"]


def _write(path: str, records: list[dict]) -> None:
    """Write atomically: a reader sees the previous file or the new one, never half of one."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "w") as f:
        json.dump({"feedline_keras": VERSION, "records": records}, f)
    os.replace(temporary, path)
