"""Run a test script in a fresh interpreter on one Keras backend and read the JSON record it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys

__all__ = ["run_keras_script"]


def run_keras_script(text: str, backend: str, path, timeout: float) -> dict:
    """Write ``text`` to ``path``, run it with ``KERAS_BACKEND=backend``; its last ``REPORT {json}`` line, parsed.

    A failed run, or one that printed no report, fails the test with the
    script's output.
    """
    path.write_text(text)
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, str(path)], check=False, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in run.stdout.splitlines() if line.startswith("REPORT ")]
    assert run.returncode == 0 and lines, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(lines[-1][len("REPORT ") :])
    assert report["backend"] == backend
    return report
