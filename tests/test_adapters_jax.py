"""`pipe.jax()`: real JAX (CPU), a jitted training loop, sharding across two CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import feedline as fl


def test_jitted_loop_trains_two_epochs_seeing_every_sample_once(no_leaks):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(96, 3)).astype(np.float32)
    y = x @ np.array([1.5, -2.0, 0.5], np.float32) + 0.25
    pipe = fl.from_arrays({"x": x, "y": y, "id": np.arange(96)}).shuffle(seed=1).map(dict, backend="process", workers=2).batch(16)

    @jax.jit
    def step(params, batch):
        def loss_fn(p):
            return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss

    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    history = []
    with pipe:
        loader = pipe.jax()
        assert len(loader) == 6
        for _ in range(2):
            seen, losses = [], []
            for batch in loader:
                assert isinstance(batch["x"], jax.Array)
                params, loss = step(params, batch)
                seen += batch["id"].tolist()
                losses.append(float(loss))
            history.append((seen, np.mean(losses)))
    assert [sorted(s) for s, _ in history] == [list(range(96))] * 2
    assert history[0][0] != history[1][0]
    assert history[1][1] < history[0][1]


def test_arrays_kept_for_the_whole_epoch_stay_intact(no_leaks):
    x = np.repeat(np.arange(48, dtype=np.float32)[:, None], 512, axis=1)
    pipe = fl.from_arrays(x).shuffle(seed=2).map(lambda row: row + 0, backend="process", workers=2).batch(8)
    with pipe:
        kept = list(pipe.jax())
    assert all(bool((b == b[:, :1]).all()) for b in kept)
    assert sorted(int(v) for b in kept for v in b[:, 0]) == list(range(48))


def test_non_numeric_leaves_stay_on_the_host():
    pipe = fl.from_sequence([(np.float32(i), f"file{i}.png") for i in range(4)]).batch(2)
    batches = list(pipe.jax())
    assert isinstance(batches[0][0], jax.Array)
    assert batches[0][1] == ["file0.png", "file1.png"]


def test_device_put_goes_to_the_given_device():
    device = jax.devices()[0]
    (batch,) = list(fl.from_arrays(np.arange(4)).batch(4).jax(sharding=device))
    assert batch.devices() == {device}


def test_a_wrong_sharding_is_a_clear_error():
    with pytest.raises(TypeError, match="jax.sharding.Sharding"):
        fl.from_arrays(np.arange(4)).batch(2).jax(sharding="batch")


SHARDED = textwrap.dedent(
    """
    import json
    import jax, numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    import feedline as fl

    mesh = Mesh(np.array(jax.devices()), ("batch",))
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    pipe = fl.from_arrays(np.arange(32, dtype=np.float32).reshape(16, 2)).batch(4)
    out = []
    for batch in pipe.jax(sharding=sharding):
        out.append({
            "devices": len(jax.devices()),
            "same_sharding": batch.sharding == sharding,
            "shards": sorted(s.data.shape[0] for s in batch.addressable_shards),
            "values": batch.tolist(),
        })
    print(json.dumps(out))
    """
)


def test_sharding_splits_each_batch_across_devices():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    run = subprocess.run([sys.executable, "-c", SHARDED], check=False, capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    batches = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(batches) == 4
    for k, b in enumerate(batches):
        assert b["devices"] == 2 and b["same_sharding"]
        assert b["shards"] == [2, 2]  # each device holds half of the batch of 4
        assert b["values"] == np.arange(8 * k, 8 * k + 8).reshape(4, 2).tolist()


def test_without_jax_the_error_names_the_extra():
    script = "import sys; sys.modules['jax'] = None\nimport numpy as np, feedline as fl\ntry:\n    fl.from_arrays(np.arange(4)).batch(2).jax()\nexcept ImportError as e:\n    print(e)\n"
    out = subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=60)
    assert "pip install 'feedline[jax]'" in out.stdout, out.stdout + out.stderr
