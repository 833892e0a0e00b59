"""Every example in examples/ runs as it stands (on small data it makes itself) and does what it says.

Each runs in a fresh interpreter, as a user would start it. The story
examples (examples/story*.py) are run, every setting of each, by
benchmarks/stories.py, whose smoke test is tests/test_stories_benchmark_smoke.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import remote_servers

ROOT = Path(__file__).resolve().parent.parent
s3_server = remote_servers.s3_server


def run_example(name: str, *args: str, env: dict | None = None) -> str:
    """Run ``examples/<name>`` with ``args``; return its output, failing the test with it on a non-zero exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]), **(env or {})}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"examples/{name} exited with {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_imagefolder_jpegs_train_a_torch_model():
    pytest.importorskip("torch")
    pytest.importorskip("PIL")
    out = run_example("imagefolder_torch.py", "--classes", "2", "--images-per-class", "12", "--epochs", "2", "--batch-size", "8")
    assert "labels from 2 class folders" in out  # the ImageFolder tree was read with its labels
    assert "epoch 1: 3 batches" in out  # 24 images in full batches of 8, every epoch


def test_keras_fit_runs_a_pydataset_through_feedline():
    pytest.importorskip("keras")
    pytest.importorskip("jax")
    out = run_example("keras_pydataset.py", "--samples", "256", "--batch-size", "32", "--epochs", "2",
                      env={"KERAS_BACKEND": os.environ.get("KERAS_BACKEND", "jax")})
    assert "from_sequence(NoisyShapes, len=8)" in out
    assert "validation accuracy after 2 epochs" in out


def test_jax_loop_trains_on_fixed_shape_batches():
    pytest.importorskip("jax")
    out = run_example("jax_training.py", "--samples", "1024", "--batch-size", "128", "--epochs", "2")
    assert "epoch 1: loss" in out
    accuracy = float(out.split("training accuracy:")[1].split()[0])
    assert accuracy > 0.5  # it learned (three classes: chance is a third)


def test_store_on_s3_is_written_uploaded_and_read_by_its_url(s3_server):
    pytest.importorskip("s3fs")
    key, secret = remote_servers.CREDENTIALS["key"], remote_servers.CREDENTIALS["secret"]
    out = run_example("s3_store.py", "s3://examples-bucket/demo/train.store", "--endpoint-url", s3_server.endpoint,
                      "--samples", "200", "--epochs", "2",
                      env={"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": secret, "AWS_DEFAULT_REGION": "us-east-1"})
    assert "epoch 1: 200 samples, each once" in out
    listed = s3_server.client().list_objects_v2(Bucket="examples-bucket", Prefix="demo/train.store/")
    assert any(o["Key"].endswith("manifest.json") for o in listed.get("Contents", []))  # the store really is on the server
