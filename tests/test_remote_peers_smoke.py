"""The peer comparison for remote data (benchmarks/remote_peers.py) still runs; it checks exactly-once, never a speed.

The full run needs Mosaic Streaming and LitData, which CI does not install
(their torchvision does not import beside CI's CPU torch): that test skips
without them. The data preparation and the exactly-once check run everywhere.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_peers_read_the_jpeg_bytes_feedline_stored(tmp_path):
    pytest.importorskip("pyarrow")
    pytest.importorskip("simplejpeg")
    from benchmarks.remote_peers import stored_jpegs
    from benchmarks.remote_store import make_store
    from feedline.vision import decode

    make_store(str(tmp_path / "s.store"), 300)  # two files: 256 + 44 rows
    images, labels = stored_jpegs(str(tmp_path / "s.store"))
    assert labels.tolist() == list(range(300))
    assert len(images) == 300 and all(image[:2] == b"\xff\xd8" for image in images)  # JPEG start-of-image
    assert decode(images[299], mode="RGB").shape == (128, 128, 3)


def test_an_epoch_that_drops_or_repeats_a_sample_stops_the_run():
    from benchmarks.remote_peers import _check

    _check("ok", "cold", {"samples": 4, "missing": 0, "repeated": 0, "extra": 0}, 4)
    with pytest.raises(SystemExit, match=r"mosaic \(warm\) delivered 4 labels for 4 samples: 1 missing, 1 repeated"):
        _check("mosaic", "warm", {"samples": 4, "missing": 1, "repeated": 1, "extra": 0}, 4)


@pytest.mark.timeout(600)
def test_small_peer_comparison_runs_every_loader_exactly_once():
    for module in ("streaming", "litdata", "moto.moto_server.werkzeug_app", "torch"):
        pytest.importorskip(module, reason="the peer comparison needs mosaicml-streaming, litdata and moto[server]")
    done = subprocess.run([sys.executable, "-m", "benchmarks.remote_peers", "--samples", "512", "--reps", "1", "--max-wait", "0"],
                          cwd=ROOT, capture_output=True, text=True, timeout=590, env=dict(os.environ), check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line.split("|")[1:3] for line in done.stdout.splitlines() if line.startswith("| ") and "loader" not in line]
    got = {(name.strip(), cache.strip()) for name, cache in rows}
    from benchmarks.remote_peers import LOADERS

    assert got == {(name, cache) for name in LOADERS for cache in ("cold", "warm")}
    assert np.isfinite([float(line.split("|")[3]) for line in done.stdout.splitlines()
                        if line.startswith("| ") and "loader" not in line]).all()
