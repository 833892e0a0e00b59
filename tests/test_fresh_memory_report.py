"""In-process workers reuse the memory of the samples they collate, and the report says when a map faults in fresh memory.

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

def outputs(i):  # 1 MiB a sample, collated into the batch: a batch's 32 MiB freed at once would be handed back
    return np.full((512, 512), i, np.float32)

def temporaries(i):  # 4 MiB a sample made and freed together inside the map: handed back after every sample
    parts = [np.full((512, 512), i, np.float32) for _ in range(4)]
    return np.float32(sum(float(p[0, 0]) for p in parts) / 4)

backend, fn = sys.argv[1], {"outputs": outputs, "temporaries": temporaries}[sys.argv[2]]
pipe = fl.from_arrays(np.arange(256)).map(fn, backend=backend, workers=None if backend == "serial" else 2).batch(32)
epochs = []
with pipe:
    for _ in range(3):
        out = [float(b[k].flat[0]) for b in pipe for k in range(len(b))]
        stats = pipe.stats()
        epochs.append({"out": out, "pages": stats.fresh_pages, "kernel": stats.task_kernel_seconds,
                       "cpu": stats.task_cpu_seconds, "dict": stats.as_dict()["fresh_pages"], "text": str(stats)})
print(json.dumps(epochs))
"""

_KEEP_FREED = {"MALLOC_TRIM_THRESHOLD_": str(128 << 20), "MALLOC_MMAP_THRESHOLD_": str(16 << 20)}  # as the advice says
_ADVICE = "MALLOC_TRIM_THRESHOLD_=134217728 MALLOC_MMAP_THRESHOLD_=16777216"
_MIB_PAGES = (1 << 20) // mmap.PAGESIZE


def _epochs(backend: str, fn: str, **env) -> list:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "FEEDLINE_TUNE_PROCESS"}
    done = subprocess.run([sys.executable, "-c", _CONSUMER, backend, fn], capture_output=True, text=True,
                          env=dict(clean, FEEDLINE_REMEMBER="0", **env), timeout=300)  # timeout: a hang guard only
    assert done.returncode == 0, done.stderr[-3000:]
    epochs = json.loads(done.stdout.strip().splitlines()[-1])
    assert [e["out"] for e in epochs] == [[float(i) for i in range(256)]] * 3
    assert all(e["dict"] == e["pages"] for e in epochs)
    return epochs


@pytest.mark.parametrize("backend", ["thread", "serial"])
def test_the_samples_a_batch_is_collated_from_are_let_go_one_by_one_so_later_epochs_take_almost_no_fresh_memory(backend):
    epochs = _epochs(backend, "outputs")
    assert epochs[0]["pages"] >= 0.25 * 256 * _MIB_PAGES, epochs[0]["pages"]  # the first epoch's memory is new
    # later ones take it again: freed a sample at a time, glibc keeps it (a thread that found no task waiting lets go
    # of its samples at once, and its arena may then hand them back: each batch's 32 MiB was without this, 60-75 %)
    for epoch in epochs[1:]:
        assert epoch["pages"] < (0.2 if backend == "thread" else 0.05) * 256 * _MIB_PAGES, epoch["pages"]
        if backend == "serial":
            assert _ADVICE not in epoch["text"] and "fresh memory in the workers:" not in epoch["text"], epoch["text"]


def test_a_serial_map_whose_temporaries_fault_in_fresh_memory_each_sample_is_told_to_keep_freed_memory():
    epochs = _epochs("serial", "temporaries")
    assert _ADVICE not in epochs[0]["text"], "the first pass also maps files in: no advice there"
    for epoch in epochs[1:]:
        assert epoch["pages"] >= 0.25 * 4 * 256 * _MIB_PAGES, epoch["pages"]  # a good share of every sample's pages
        assert epoch["kernel"] >= 0.1 * epoch["cpu"], epoch  # zeroing them is most of the work (`ReportPolicy.kernel`)
        assert _ADVICE in epoch["text"] and "fresh memory in the workers:" in epoch["text"], epoch["text"]


def test_thread_workers_count_the_fresh_memory_their_tasks_fault_in_and_are_advised_where_it_costs():
    # glibc's arenas for threads keep or hand back memory depending on which thread frees it, so how much later
    # epochs fault in varies from run to run: the first epoch's pages are always fresh
    epochs = _epochs("thread", "temporaries")
    assert epochs[0]["pages"] >= 0.25 * 4 * 256 * _MIB_PAGES, epochs[0]["pages"]
    for epoch in epochs[1:]:
        advised = _ADVICE in epoch["text"]
        assert advised == (epoch["pages"] > 0 and epoch["kernel"] >= 0.1 * epoch["cpu"]), epoch["text"]


def test_with_glibc_told_to_keep_freed_memory_the_same_map_faults_in_almost_none_and_gets_no_such_advice():
    loose, kept = _epochs("serial", "temporaries"), _epochs("serial", "temporaries", **_KEEP_FREED)
    for a, b in zip(loose[1:], kept[1:]):
        assert b["pages"] < 0.1 * a["pages"], (a["pages"], b["pages"])
        assert _ADVICE not in b["text"] and "fresh memory in the workers:" not in b["text"], b["text"]


def test_process_workers_get_the_thresholds_from_feedline_and_are_not_told():
    epochs = _epochs("process", "temporaries")
    assert all(_ADVICE not in e["text"] for e in epochs), epochs[-1]["text"]
