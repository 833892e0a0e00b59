"""glibc's heap thresholds: set in the training process only with FEEDLINE_TUNE_PROCESS=1; process workers get them.

Each case runs in a fresh interpreter: glibc's thresholds are process-wide
and, once set, stay set.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

import feedline as fl

pytestmark = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                                reason="glibc's heap thresholds (Linux with glibc only)")

_CODE = (
    "import resource, numpy as np, feedline as fl\n"
    "def faults():\n"
    "    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "pipe = fl.from_arrays(np.arange(8)).map(lambda i: i, backend='thread', workers=2).batch(4)\n"
    "with pipe:\n"
    "    assert sum(len(b) for b in pipe) == 8\n"
    "a = np.ones(3 << 20, np.uint8); del a\n"  # the first free of a mapped block: glibc's own thresholds grow to it
    "before = faults()\n"
    "for _ in range(50):\n"
    "    x = np.ones(3 << 20, np.uint8); y = np.ones(3 << 20, np.uint8); z = x + y; del x, y, z\n"
    "print(faults() - before)\n"
)
_ROUND = 3 * (3 << 20) // 4096  # pages in one round's three arrays: faulted in again each round without the thresholds


def _faults(**env) -> int:
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MALLOC_") and k not in ("FEEDLINE_MALLOC", "GLIBC_TUNABLES", "FEEDLINE_TUNE_PROCESS")}
    out = subprocess.run([sys.executable, "-c", _CODE], capture_output=True, text=True, timeout=120, env=base | env)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_thread_workers_leave_the_training_processs_heap_thresholds_alone_by_default():
    # glibc alone trims the heap after every round here: (nearly) every round faults its pages in again
    assert _faults() > 25 * _ROUND, "the training process's allocator is the user's"


def test_with_the_opt_in_large_temporaries_after_thread_workers_ran_are_not_faulted_in_again_each_time():
    assert _faults(FEEDLINE_TUNE_PROCESS="1") < 5 * _ROUND, "50 rounds of three 3 MB arrays should reuse the heap's pages"


def test_the_programs_own_heap_settings_or_feedline_malloc_0_are_left_alone_even_with_the_opt_in():
    assert _faults(FEEDLINE_TUNE_PROCESS="1", FEEDLINE_MALLOC="0") > 25 * _ROUND
    assert _faults(FEEDLINE_TUNE_PROCESS="1", MALLOC_TOP_PAD_="0") > 25 * _ROUND, "a MALLOC_ variable chose its heap"


_HEAP_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")


def _heap_vars(_):
    return tuple(os.environ.get(var) for var in _HEAP_VARS)


def _in_a_process_worker() -> tuple:
    with fl.from_sequence([0]).map(_heap_vars, backend="process", workers=1) as pipe:
        [seen] = list(pipe)
    return tuple(seen)


def test_process_workers_get_the_thresholds_in_their_environment_unless_turned_off(monkeypatch, no_leaks):
    for var in _HEAP_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv("FEEDLINE_MALLOC", raising=False)
    assert all(value is not None and value.isdigit() for value in _in_a_process_worker()), "a threshold is missing"
    monkeypatch.setenv("FEEDLINE_MALLOC", "0")
    assert _in_a_process_worker() == (None, None)
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "4096")
    monkeypatch.delenv("FEEDLINE_MALLOC")
    assert _in_a_process_worker()[0] == "4096", "the program's own setting wins"
