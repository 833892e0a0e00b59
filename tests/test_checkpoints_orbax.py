"""`feedline.adapters.orbax`: the pipeline's position in a real Orbax CheckpointManager, restored in a new process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytest.importorskip("orbax.checkpoint")

PIPELINE = textwrap.dedent(
    """
    import numpy as np
    import feedline as fl

    def pipeline(workers, backend):
        return fl.from_arrays(np.arange(30)).shuffle(seed=7).map(lambda v: v * 10, workers=workers, backend=backend).batch(4)
    """
)

RESTORE = PIPELINE + textwrap.dedent(
    """
    import json, sys
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from feedline.adapters.orbax import PipelineRestore

    pipe = pipeline(3, "process")
    with ocp.CheckpointManager(sys.argv[1]) as mngr:
        step = mngr.latest_step()
        restored = mngr.restore(step, args=ocp.args.Composite(params=ocp.args.StandardRestore(), data=PipelineRestore(pipe)))
    assert restored.data is pipe
    rest = [b.tolist() for b in pipe]        # the rest of the interrupted epoch
    following = [b.tolist() for b in pipe]   # then the next epoch
    pipe.close()
    print("REPORT " + json.dumps({"step": step, "w": float(restored.params["w"].sum()), "rest": rest, "following": following}))
    """
)


def test_orbax_manager_restores_the_pipeline_in_a_new_process(tmp_path):
    import orbax.checkpoint as ocp

    from feedline.adapters.orbax import PipelineSave

    namespace: dict = {}
    exec(PIPELINE, namespace)
    reference = namespace["pipeline"](None, "serial")
    whole = [[b.tolist() for b in reference] for _ in range(2)]

    pipe = namespace["pipeline"](2, "thread")
    it = iter(pipe)
    seen = [next(it).tolist() for _ in range(3)]
    params = {"w": np.ones((2, 3), np.float32)}
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        mngr.save(3, args=ocp.args.Composite(params=ocp.args.StandardSave(params), data=PipelineSave(pipe)))
        mngr.wait_until_finished()
    it.close()
    pipe.close()

    script = tmp_path / "restore.py"
    script.write_text(RESTORE)
    run = subprocess.run([sys.executable, str(script), str(tmp_path / "ckpt")], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, JAX_PLATFORMS="cpu"))
    lines = [line for line in run.stdout.splitlines() if line.startswith("REPORT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT "):])
    assert report["step"] == 3 and report["w"] == 6.0
    assert seen + report["rest"] == whole[0]
    assert report["following"] == whole[1]


def test_orbax_restore_refuses_another_pipeline(tmp_path):
    import orbax.checkpoint as ocp

    import feedline as fl
    from feedline.adapters.orbax import PipelineRestore, PipelineSave

    pipe = fl.from_arrays(np.arange(30)).shuffle(seed=7).batch(4)
    it = iter(pipe)
    next(it)
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        mngr.save(1, args=ocp.args.Composite(data=PipelineSave(pipe)))
        mngr.wait_until_finished()
    it.close()
    other = fl.from_arrays(np.arange(31)).shuffle(seed=7).batch(4)  # another dataset length
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr, pytest.raises(ValueError, match="length|len"):
        mngr.restore(1, args=ocp.args.Composite(data=PipelineRestore(other)))


def test_orbax_manager_saves_and_restores_pipe_jax_loader_mid_epoch(tmp_path):
    import jax
    import jax.numpy as jnp
    import orbax.checkpoint as ocp

    from feedline.adapters.orbax import PipelineRestore, PipelineSave

    namespace: dict = {}
    exec(PIPELINE, namespace)
    reference = namespace["pipeline"](None, "serial")
    whole = [[b.tolist() for b in reference] for _ in range(2)]

    @jax.jit
    def train_step(w, batch):
        return w + jnp.sum(batch)

    pipe = namespace["pipeline"](2, "thread")
    loader = pipe.jax(depth=2)  # two batches ahead on the device: the position saved is the one trained on
    w, seen = jnp.zeros(()), []
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        for step, batch in enumerate(loader):
            w = train_step(w, batch)
            seen.append(np.asarray(batch).tolist())
            if step == 2:
                mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave({"w": w}), data=PipelineSave(loader)))
                mngr.wait_until_finished()
                break
    pipe.close()

    again = namespace["pipeline"](3, "process")
    fresh = again.jax()
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
        restored = mngr.restore(mngr.latest_step(), args=ocp.args.Composite(params=ocp.args.StandardRestore(),
                                                                            data=PipelineRestore(fresh)))
    assert restored.data is fresh
    assert float(restored.params["w"]) == float(w)
    rest = [np.asarray(b).tolist() for b in fresh]
    following = [np.asarray(b).tolist() for b in fresh]
    again.close()
    assert seen + rest == whole[0]
    assert following == whole[1]
