"""PyTorch Lightning: a callback that stops the epochs Lightning leaves open.

Lightning stops reading a loader after ``limit_val_batches`` (or
``limit_train_batches``, ``limit_test_batches``, ``limit_predict_batches``)
batches without closing its iterator, and drops it only when the next pass
starts: until then feedline's workers would go on preparing batches nobody
reads, on the cores the next pass needs. ``Trainer(callbacks=[close_left_epochs()])``
closes them when Lightning's epoch ends. Each pass starts a new epoch of the
loader, as without it.
"""

from __future__ import annotations

import functools

from ._common import require

__all__ = ["close_left_epochs"]


@functools.cache
def _callback_class():
    """Define the callback class on first use (it subclasses Lightning's, so Lightning must be imported)."""
    lightning = require("lightning", "lightning", "close_left_epochs()")

    class CloseLeftEpochs(lightning.Callback):
        """Closes the live epoch of each `TorchLoader` of a pass when Lightning's epoch of that pass ends."""

        def on_train_epoch_end(self, trainer, module):
            _close(trainer.train_dataloader)

        def on_validation_epoch_end(self, trainer, module):
            _close(trainer.val_dataloaders)

        def on_test_epoch_end(self, trainer, module):
            _close(trainer.test_dataloaders)

        def on_predict_epoch_end(self, trainer, module):
            _close(trainer.predict_dataloaders)

    return CloseLeftEpochs


def _close(loaders) -> None:
    """``close_epoch()`` on every `TorchLoader` in ``loaders`` (one, or lists, tuples and dicts of them)."""
    from .torch import TorchLoader

    if isinstance(loaders, TorchLoader):
        loaders.close_epoch()
    elif isinstance(loaders, (list, tuple)):
        for loader in loaders:
            _close(loader)
    elif isinstance(loaders, dict):
        for loader in loaders.values():
            _close(loader)


def close_left_epochs():
    """A Lightning callback: the epochs of ``pipe.torch()`` loaders stop when Lightning's epoch ends.

    ``Trainer(limit_val_batches=k, callbacks=[close_left_epochs()])``: when a
    validation (test, predict, training) epoch ends, the queued tasks of the
    loader epoch Lightning stopped reading are cancelled and its running
    ones stop at their next sample, so the next pass starts on free workers.

    Returns:
        A ``lightning.Callback``.

    Raises:
        ImportError: Lightning is not installed (``pip install lightning``).
    """
    return _callback_class()()
