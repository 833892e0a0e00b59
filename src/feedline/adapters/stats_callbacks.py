"""Loader statistics beside training metrics: a Keras callback and a Lightning callback.

Each logs, at the end of every epoch, how long the training step waited for
data (``input_stall``: share of the consumer's time), the input throughput
(``input_samples_per_s``) and the verdict, next to the loss, so a stalling
input pipeline shows up where people already look. For a plain PyTorch or
JAX loop, log ``pipe.stats().as_dict()`` yourself.
"""

from __future__ import annotations

__all__ = ["keras_stats_callback", "lightning_stats_callback"]


def _epoch_metrics(pipe, prefix: str) -> dict:
    stats = pipe.stats().as_dict()
    return {
        f"{prefix}stall": float(stats["input_bound_share"] or 0.0),
        f"{prefix}samples_per_s": float(stats["samples_per_second"] or 0.0),
    }


def keras_stats_callback(pipe, *, prefix: str = "input_", verbose: bool = False):
    """A ``keras.callbacks.Callback`` adding the loader's numbers to each epoch's logs.

    ``model.fit(pipe.keras(), callbacks=[keras_stats_callback(pipe)])``: the
    History then holds ``input_stall`` and ``input_samples_per_s`` per epoch;
    with ``verbose=True`` the verdict is printed too.

    >>> import keras
    >>> import numpy as np, feedline as fl
    >>> x, y = np.zeros((64, 4), np.float32), np.zeros(64, np.float32)
    >>> pipe = fl.from_arrays(x, y).batch(16)
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> history = model.fit(pipe.keras(), epochs=2, verbose=0, callbacks=[keras_stats_callback(pipe)])
    >>> sorted(history.history), len(history.history["input_stall"])
    (['input_samples_per_s', 'input_stall', 'loss'], 2)
    >>> pipe.close()
    """
    try:
        import keras
    except ImportError as e:
        raise ImportError("keras_stats_callback() needs Keras 3: pip install 'feedline[keras]'") from e

    class FeedlineStats(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            metrics = _epoch_metrics(pipe, prefix)
            if logs is not None:
                logs.update(metrics)
            if verbose:
                print(f"feedline: {pipe.stats().verdict().summary}")

    return FeedlineStats()


def lightning_stats_callback(pipe, *, prefix: str = "input_"):
    """A Lightning ``Callback`` that logs the loader's numbers at the end of each training epoch.

    >>> import lightning, torch
    >>> import numpy as np, feedline as fl
    >>> x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
    >>> pipe = fl.from_arrays(x, x.sum(axis=1, keepdims=True)).batch(16)
    >>> class Regression(lightning.LightningModule):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.layer = torch.nn.Linear(4, 1)
    ...     def training_step(self, batch, index):
    ...         x, y = batch
    ...         return torch.nn.functional.mse_loss(self.layer(x), y)
    ...     def configure_optimizers(self):
    ...         return torch.optim.SGD(self.parameters(), lr=0.1)
    >>> trainer = lightning.Trainer(max_epochs=1, callbacks=[lightning_stats_callback(pipe)], logger=False,
    ...                             enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    >>> trainer.fit(Regression(), train_dataloaders=pipe.torch())
    >>> sorted(trainer.callback_metrics)
    ['input_samples_per_s', 'input_stall']
    >>> pipe.close()
    """
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:
        try:
            from pytorch_lightning.callbacks import Callback
        except ImportError as e:
            raise ImportError("lightning_stats_callback() needs PyTorch Lightning: pip install lightning") from e

    class FeedlineStats(Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            pl_module.log_dict(_epoch_metrics(pipe, prefix), on_epoch=True)

    return FeedlineStats()
