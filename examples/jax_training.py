"""A JAX training loop fed by feedline.

``pipe.jax()`` yields ``jax.Array`` batches, put on the device two batches
ahead of the step. Two things a JAX user should know, both handled here:
``batch(n, drop_remainder=True)`` keeps every batch the same shape, so the
``jit``-compiled step compiles once (a short last batch would retrace it);
and int64 arrays become int32 unless ``jax_enable_x64`` is set, so labels
are made int32 from the start.

Run (makes its own data; ``pip install 'feedline[jax]'``):

    python examples/jax_training.py
    python examples/jax_training.py --samples 20000 --epochs 5
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np

import feedline as fl


def make_data(samples: int, features: int):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(features, 3)).astype(np.float32)
    x = rng.normal(size=(samples, features)).astype(np.float32)
    y = np.argmax(x @ w, axis=1).astype(np.int32)  # int32: what JAX keeps without jax_enable_x64
    return x, y


def jitter(sample, rng):
    x, y = sample
    return x + rng.normal(0, 0.05, x.shape).astype(np.float32), y


@jax.jit
def train_step(params, x, y):
    def loss_fn(p):
        logits = x @ p["w"] + p["b"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    loss, grads = jax.value_and_grad(loss_fn)(params)
    return jax.tree.map(lambda p, g: p - 0.5 * g, params, grads), loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    x, y = make_data(args.samples, features=16)
    pipe = fl.from_arrays(x, y).shuffle(seed=0).map(jitter).batch(args.batch_size, drop_remainder=True)
    params = {"w": jnp.zeros((16, 3)), "b": jnp.zeros(3)}
    with pipe:
        for epoch in range(args.epochs):
            for xb, yb in pipe.jax():  # jax.Arrays on the default device
                params, loss = train_step(params, xb, yb)
            print(f"epoch {epoch}: loss {float(loss):.3f}")
        print(pipe)
    accuracy = float(jnp.mean(jnp.argmax(x @ params["w"] + params["b"], axis=1) == y))
    print(f"training accuracy: {accuracy:.2f}")


if __name__ == "__main__":
    main()
