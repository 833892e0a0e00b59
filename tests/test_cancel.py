"""An epoch nobody reads any more stops: its queued tasks at once, its running ones at their next sample.

Left by ``break``, ``close()``, garbage collection or a newer epoch of the
same pipeline, on every backend (Ray: tests/test_ray.py). The workers'
own log of the samples they began (`sample_log`) says how much of the
abandoned epoch still ran: at most the sample each worker was on, not the
prefetch window's queued and half-done tasks; and the next epoch still
delivers every sample once.
"""

from __future__ import annotations

import numpy as np
import pytest
from sample_log import LEAVE, leave_after, logged_pipeline, samples_begun

pytestmark = pytest.mark.timeout(60)

N, BATCH, WORKERS = 96, 8, 2


@pytest.mark.parametrize("how", LEAVE)
def test_a_left_epoch_runs_no_more_samples_and_the_next_gets_every_sample_once(tmp_path, backend, how, no_leaks):
    log = tmp_path / "begun.log"
    with logged_pipeline(log, backend, n=N, batch=BATCH, workers=WORKERS) as pipe:
        following = leave_after(pipe, 2, how)
        at_leave = samples_begun(log)
        delivered = [int(v) for b in following for v in np.asarray(b).ravel()]
        after = samples_begun(log)
    leave_after.kept = None
    assert sorted(delivered) == list(range(N))
    # Each worker may begin the sample it had passed the check for as the epoch was left; nothing more of it runs.
    left_over = after - at_leave - N
    assert left_over <= WORKERS, f"{left_over} samples of the left epoch ran after it was left ({how}, {backend})"


_OPEN_AT_EXIT = """
import numpy as np
import feedline as fl
pipe = fl.from_arrays(np.arange(1000, dtype=np.float32)).map(lambda v: v + 1, backend={backend!r}, workers=2).batch(4)
it = iter(pipe.torch())
next(it)  # the loader's epoch is still open when the interpreter ends
"""


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_an_epoch_left_open_at_exit_ends_quietly(backend):
    # closing the epoch while the interpreter ends (its modules half gone) must not print an ignored exception
    pytest.importorskip("torch")
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _OPEN_AT_EXIT.format(backend=backend)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-2000:]
