"""Keras ``fit`` with a PyDataset-style source.

A ``keras.utils.PyDataset`` (or the older ``Sequence``) returns a whole batch
from ``__getitem__``; here it augments in plain Python, which holds the GIL,
so Keras's own ``workers=`` threads give it no parallelism.
``fl.from_keras_sequence(ds)`` runs the same object's ``__getitem__`` in
feedline's workers instead, shuffles the batch order per epoch from a seed,
and ``pipe.keras()`` hands the batches to ``model.fit`` on any Keras backend
(TensorFlow, JAX or PyTorch: ``KERAS_BACKEND``).

Run (makes its own data; ``pip install 'feedline[keras]'`` plus a backend):

    python examples/keras_pydataset.py
    python examples/keras_pydataset.py --samples 4096 --epochs 3
"""

import argparse

import keras
import numpy as np

import feedline as fl


class NoisyShapes(keras.utils.PyDataset):
    """Batches of 16x16 grey images, each a bright square (class 0) or a bright bar (class 1), with Python-level noise."""

    def __init__(self, samples: int, batch_size: int, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.samples, self.batch_size, self.seed = samples, batch_size, seed

    def __len__(self) -> int:
        return self.samples // self.batch_size

    def __getitem__(self, index: int):
        rng = np.random.default_rng([self.seed, index])  # the same batch for the same index, in any worker
        labels = rng.integers(0, 2, self.batch_size)
        images = rng.normal(0, 0.3, (self.batch_size, 16, 16, 1)).astype("float32")
        for image, label in zip(images, labels):  # per-sample Python: the work that holds the GIL
            r, c = rng.integers(2, 10, 2)
            if label == 0:
                image[r:r + 5, c:c + 5] += 1.0
            else:
                image[r:r + 1, 1:15] += 1.0
        return images, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()

    train = fl.from_keras_sequence(NoisyShapes(args.samples, args.batch_size), seed=0)
    val = fl.from_keras_sequence(NoisyShapes(args.samples // 4, args.batch_size, seed=1), shuffle=False)
    model = keras.Sequential([
        keras.Input((16, 16, 1)),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.GlobalMaxPooling2D(),
        keras.layers.Dense(2),
    ])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    with train, val:
        history = model.fit(train.keras(), validation_data=val.keras(), epochs=args.epochs, verbose=2)
        print(train)
    print(f"validation accuracy after {args.epochs} epochs: {history.history['val_accuracy'][-1]:.2f}")


if __name__ == "__main__":
    main()
