"""The epoch's report counts the fresh memory in-process workers fault in, and says how to keep freed memory instead.

Each case runs in a fresh interpreter: glibc reads its thresholds from the
environment as a program starts, and an earlier test under
``FEEDLINE_TUNE_PROCESS=1`` may have set them in the test process for good.
"""

import json
import mmap
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux" or platform.libc_ver()[0] != "glibc",
                                reason="counts page faults per thread (Linux) and advises glibc's thresholds")

_CONSUMER = r"""
import json, sys
import numpy as np
import feedline as fl

def fresh(i):  # 1 MiB a sample: a batch of them, freed, passes glibc's trim threshold
    return np.full((512, 512), i, np.float32)

backend = sys.argv[1]
pipe = fl.from_arrays(np.arange(256)).map(fresh, backend=backend, workers=None if backend == "serial" else 2).batch(32)
epochs = []
with pipe:
    for _ in range(3):
        out = [float(b[k, 0, 0]) for b in pipe for k in range(len(b))]
        stats = pipe.stats()
        epochs.append({"out": out, "pages": stats.fresh_pages, "kernel": stats.task_kernel_seconds,
                       "cpu": stats.task_cpu_seconds, "dict": stats.as_dict()["fresh_pages"], "text": str(stats)})
print(json.dumps(epochs))
"""

_KEEP_FREED = {"MALLOC_TRIM_THRESHOLD_": str(128 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}  # as the advice says


def _epochs(backend: str, **env) -> list:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "FEEDLINE_TUNE_PROCESS"}
    done = subprocess.run([sys.executable, "-c", _CONSUMER, backend], capture_output=True, text=True,
                          env=dict(clean, FEEDLINE_REMEMBER="0", **env), timeout=300)  # timeout: a hang guard only
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_serial_map_that_faults_in_fresh_memory_each_batch_is_told_to_keep_freed_memory():
    epochs = _epochs("serial")
    samples_pages = 256 * (1 << 20) // mmap.PAGESIZE
    for epoch in epochs:
        assert epoch["out"] == [float(i) for i in range(256)]
        assert epoch["dict"] == epoch["pages"]
    assert "MALLOC_TRIM_THRESHOLD_" not in epochs[0]["text"], "the first pass also maps files in: no advice there"
    for epoch in epochs[1:]:
        assert epoch["pages"] >= 0.25 * samples_pages, epoch["pages"]  # a good share of every sample's pages, again
        assert epoch["kernel"] >= 0.1 * epoch["cpu"], epoch  # zeroing them is most of the work (`KERNEL_SHARE`)
        assert "MALLOC_TRIM_THRESHOLD_=134217728 MALLOC_MMAP_THRESHOLD_=16777216" in epoch["text"], epoch["text"]
        assert "fresh memory in the workers:" in epoch["text"], epoch["text"]


def test_thread_workers_count_the_fresh_memory_their_tasks_fault_in_and_are_advised_where_it_costs():
    # glibc's arenas for threads keep or hand back a batch's memory depending on which thread frees it first, so
    # whether later epochs fault it in again varies from run to run: the first epoch's pages are always fresh
    epochs = _epochs("thread")
    assert [e["out"] for e in epochs] == [[float(i) for i in range(256)]] * 3
    assert epochs[0]["pages"] >= 0.25 * 256 * (1 << 20) // mmap.PAGESIZE, epochs[0]["pages"]
    for epoch in epochs[1:]:
        advised = "MALLOC_TRIM_THRESHOLD_=134217728 MALLOC_MMAP_THRESHOLD_=16777216" in epoch["text"]
        assert advised == (epoch["pages"] > 0 and epoch["kernel"] >= 0.1 * epoch["cpu"]), epoch["text"]


def test_with_glibc_told_to_keep_freed_memory_the_same_epochs_fault_in_almost_none_and_get_no_such_advice():
    loose, kept = _epochs("serial"), _epochs("serial", **_KEEP_FREED)
    for a, b in zip(loose[1:], kept[1:]):
        assert b["pages"] < 0.1 * a["pages"], (a["pages"], b["pages"])
        assert "MALLOC_TRIM_THRESHOLD_" not in b["text"] and "fresh memory in the workers:" not in b["text"], b["text"]


def test_process_workers_get_the_thresholds_from_feedline_and_are_not_told():
    epochs = _epochs("process")
    assert [e["out"] for e in epochs] == [[float(i) for i in range(256)]] * 3
    assert all("MALLOC_TRIM_THRESHOLD_" not in e["text"] for e in epochs), epochs[-1]["text"]
