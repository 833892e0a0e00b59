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


# ---------------------------------------------------------------- checkpoints: state_dict() / load_state_dict()
def _checkpointed(backend: str = "serial", workers: int = 1, n: int = 40):
    return fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=3).map(lambda v: v + 1, backend=backend,
                                                                             workers=workers).batch(4)


def _values(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b).tolist()]


@pytest.mark.parametrize(("before", "after"), [(("serial", 1), ("thread", 3)), (("thread", 2), ("process", 2))])
@pytest.mark.parametrize("depth", [1, 3])
def test_state_dict_mid_epoch_resumes_after_the_last_batch_handed_out(before, after, depth, no_leaks):
    reference = _checkpointed()
    whole = [_values(reference) for _ in range(2)]
    pipe = _checkpointed(*before)
    loader = pipe.jax(depth=depth)
    it = iter(loader)
    seen = _values(next(it) for _ in range(3))  # `depth` more batches are already on their way to the device
    saved = json.loads(json.dumps(loader.state_dict()))  # it survives JSON, as Orbax writes it
    it.close()
    pipe.close()
    with _checkpointed(*after) as again:
        fresh = again.jax(depth=depth)
        fresh.load_state_dict(saved)
        assert fresh.state_dict() == saved  # loaded, not iterated yet: still that position
        rest, following = _values(fresh), _values(fresh)
    assert seen + rest == whole[0]
    assert following == whole[1]


def test_state_dict_before_the_first_batch_and_between_epochs_starts_that_epoch():
    reference = _checkpointed()
    whole = [_values(reference) for _ in range(3)]
    loader = _checkpointed().jax()
    assert _values(_reloaded(loader.state_dict())) == whole[0]  # nothing iterated: epoch 0
    _values(loader)
    it = iter(loader)  # epoch 1 started, nothing handed out yet
    after_one = loader.state_dict()
    assert _values(_reloaded(after_one)) == whole[1]
    _values(it)
    assert _values(_reloaded(loader.state_dict())) == whole[2]  # epoch 1 ended: the next is epoch 2


def _reloaded(state: dict):
    loader = _checkpointed().jax()
    loader.load_state_dict(state)
    return loader


def test_state_dict_at_every_batch_of_a_resumed_epoch_resumes_again():
    whole = _values(_checkpointed())
    loader = _checkpointed().jax(depth=2)
    it = iter(loader)
    seen = _values([next(it)])
    for _ in range(4):  # save after each batch, resume in a new loader, take one more batch there
        loader = _reloaded(loader.state_dict())
        it = iter(loader)
        seen += _values([next(it)])
    assert seen + _values(it) == whole


def test_load_state_dict_refuses_another_pipelines_state():
    loader = _checkpointed().jax()
    it = iter(loader)
    next(it)
    saved = loader.state_dict()
    other = _checkpointed(n=41).jax()  # another dataset length
    with pytest.raises(ValueError, match="fingerprint"):
        other.load_state_dict(saved)
    with pytest.raises(ValueError, match="JaxLoader.load_state_dict"):
        other.load_state_dict({"position": "{}"})


def test_sharded_loader_state_after_its_last_step_starts_the_next_epoch():
    # 41 samples on 2 ranks: 21 and 20, batches of 4: 6 and 5; even_batches stops both after 5
    def rank(r):
        return fl.from_arrays(np.arange(41)).shuffle(seed=1).shard(r, 2).batch(4)

    loader = rank(0).jax()
    assert len(loader) == 5
    it = iter(loader)
    for _ in range(5):
        next(it)
    saved = loader.state_dict()  # after its last step (its 6th batch is never taken): the next epoch
    fresh = rank(0).jax()
    fresh.load_state_dict(saved)
    expected = rank(0).jax()
    _values(expected)
    assert _values(fresh) == _values(expected)  # epoch 1, whole


def test_a_pipeline_without_positions_iterates_and_its_state_dict_says_why():
    pipe = fl.from_arrays(np.arange(24)).map(lambda v: v, backend="thread", workers=2, ordered=False).batch(4)
    with pipe:
        loader = pipe.jax()
        it = iter(loader)
        first = _values([next(it)])
        with pytest.raises(fl.FeedlineError, match="ordered=False"):
            loader.state_dict()
        assert sorted(first + _values(it)) == list(range(24))
