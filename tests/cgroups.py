"""Real cgroups for tests: a container's CPU quota or memory limit, made on this machine for one child process.

Needs root and a writable cgroup mount (v1 controller folders such as
``/sys/fs/cgroup/cpu``, or a v2 hierarchy at ``/sys/fs/cgroup``); the
test is skipped elsewhere. The folder is removed afterwards (a cgroup
with no process left in it)::

    with cgroup_limited({"cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}},
                        {"cpu.max": "100000 100000"}) as folder:
        run_in(folder, program)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest


@contextlib.contextmanager
def cgroup_limited(v1: dict[str, dict[str, str]], v2: dict[str, str]):
    """A fresh cgroup holding the v1 settings (controller -> file -> text) or, failing that, the v2 ones; its folder."""
    name = f"feedline-test-{os.getpid()}"
    candidates = [(f"/sys/fs/cgroup/{controller}/{name}", files) for controller, files in v1.items()]
    candidates.append((f"/sys/fs/cgroup/{name}", v2))
    for folder, files in candidates:
        try:
            os.mkdir(folder)
        except OSError:
            continue
        try:
            for file, text in files.items():
                with open(os.path.join(folder, file), "w") as f:
                    f.write(text)
        except OSError:
            os.rmdir(folder)
            continue
        try:
            yield folder
        finally:
            _empty(folder)
            os.rmdir(folder)
        return
    pytest.skip("no cgroup with these limits can be made here (needs root and a writable cgroup mount)")


def _empty(folder: str, wait: float = 10.0) -> None:
    """Wait for the processes left in the cgroup to exit (a child's fork server and workers go a moment after it), then kill any left.

    A cgroup with a process in it cannot be removed (EBUSY).
    """
    deadline = time.monotonic() + wait
    while True:
        with open(os.path.join(folder, "cgroup.procs")) as f:
            pids = [int(line) for line in f if line.strip()]
        if not pids or time.monotonic() >= deadline + 5.0:
            return  # (then rmdir says what is left)
        if time.monotonic() >= deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def run_in(folder: str, program: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -c program`` as a process moved into the cgroup at ``folder`` before Python starts."""
    return subprocess.run(["sh", "-c", f'echo $$ > {folder}/cgroup.procs && exec "{sys.executable}" -c "$0"', program],
                          capture_output=True, text=True, timeout=120, env=env)
