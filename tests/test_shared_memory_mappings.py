"""How process workers' shared memory is mapped: no file descriptor per mapping, few mappings, read-only where it must be.

Python's ``mmap.mmap`` keeps a duplicate descriptor open for every mapping,
and the consumer maps every batch slot of every worker: holding 2,000
batches (``list(pipe)``) died of ``OSError: [Errno 24] Too many open files``
at the usual limit of 1,024 (macOS: 256), and 64 workers kept ~410
descriptors open in the consumer. The descriptor tests run a child
interpreter whose descriptor limit is 128.

Each mapping also counts against the kernel's mappings a process
(``vm.max_map_count``, 65,530 by default): ``list(pipe)`` of 75,000 batches
died of ``OSError: [Errno 12] Cannot allocate memory``. Batches kept past
``FEEDLINE_MAPPED_BATCHES`` are copied out of shared memory; the tests set
it low in a child interpreter, and one keeps a real 75,000-batch epoch.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import feedline as fl

_LOW_LIMIT = """
import resource, sys, numpy as np, feedline as fl
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
samples, workers = int(sys.argv[1]), int(sys.argv[2])
pipe = fl.from_arrays(np.arange(samples)).map(lambda v: np.full((8, 8), v % 251, np.uint8), backend="process",
                                              workers=workers).batch(4)
with pipe:
    held = list(pipe)  # every batch still referenced: every slot stays mapped
    assert [int(b[0, 0, 0]) for b in held] == [k % 251 for k in range(0, samples, 4)]
print("ran", len(held))
"""


def _run_with_128_descriptors(samples: int, workers: int) -> str:
    done = subprocess.run([sys.executable, "-c", _LOW_LIMIT, str(samples), str(workers)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_holding_more_batches_than_the_descriptor_limit_works():
    assert _run_with_128_descriptors(samples=2000, workers=2) == "ran 500"  # 500 slots mapped at once


def test_many_workers_fit_in_a_low_descriptor_limit():
    assert _run_with_128_descriptors(samples=800, workers=32) == "ran 200"


_KEEP_EPOCHS = """
import sys, numpy as np, feedline as fl

def segments_mapped():
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if "feedline_" in line)

def label(v):
    return {"x": np.full(3, v, np.int64), "y": np.float32(v) * 2}

samples = int(sys.argv[1])
pipe = fl.from_arrays(np.arange(samples)).map(label, backend="process", workers=2).batch(4)
with pipe:
    first = list(pipe)  # every batch held: past the bound they are copies, and their slots go back to the workers
    mapped = segments_mapped()
    second = list(pipe)  # the workers write into those slots again
    for epoch in (first, second):
        x, y = np.concatenate([b["x"] for b in epoch]), np.concatenate([b["y"] for b in epoch])
        assert (x == np.arange(samples)[:, None]).all(), np.flatnonzero((x != np.arange(samples)[:, None]).any(axis=1))[:10]
        assert (y == np.arange(samples) * 2).all(), np.flatnonzero(y != np.arange(samples) * 2)[:10]
print(len(first), len(second), mapped)
"""


def _keep_two_epochs(samples: int, bound: str | None) -> tuple[int, int, int]:
    env = dict(os.environ)
    env.pop("FEEDLINE_MAPPED_BATCHES", None)
    if bound is not None:
        env["FEEDLINE_MAPPED_BATCHES"] = bound
    done = subprocess.run([sys.executable, "-c", _KEEP_EPOCHS, str(samples)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    first, second, mapped = (int(v) for v in done.stdout.split())
    return first, second, mapped


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts mappings through /proc")
def test_batches_kept_past_the_mapping_bound_are_copies_whose_values_stay_right():
    first, second, mapped = _keep_two_epochs(samples=8000, bound="16")
    assert (first, second) == (2000, 2000)
    assert mapped < 100, f"{mapped} shared-memory mappings for 2,000 batches held with FEEDLINE_MAPPED_BATCHES=16"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts mappings through /proc")
def test_a_bound_of_zero_copies_every_batch():
    first, second, mapped = _keep_two_epochs(samples=400, bound="0")
    assert (first, second) == (100, 100)
    assert mapped < 40, f"{mapped} shared-memory mappings with every batch copied"


def test_an_epoch_of_75000_batches_is_kept_whole_on_processes():
    """More batches than Linux's default mappings a process (65,530), each of them right."""
    first, second, _ = _keep_two_epochs(samples=300_000, bound=None)
    assert (first, second) == (75_000, 75_000)


_AT_THE_LIMIT = """
import ctypes, mmap, os, sys, numpy as np, feedline as fl

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
os.ftruncate(fd, mmap.PAGESIZE)
with fl.from_arrays(np.arange(40_000)).map(lambda v: v, backend="process", workers=2).batch(4) as pipe:
    it = iter(pipe)
    next(it)
    taken = []
    while True:  # the user's own mappings fill the process up to the kernel's limit, all but a few
        address = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            break
        taken.append(address)
    for address in taken[-200:]:
        libc.munmap(address, mmap.PAGESIZE)
    try:
        list(it)
    except OSError as e:
        print(e)
"""


@pytest.mark.skipif(not os.path.exists("/proc/sys/vm/max_map_count"), reason="Linux's mapping limit")
def test_a_slot_mapping_refused_at_the_kernels_limit_says_so_and_what_to_change(tmp_path):
    done = subprocess.run([sys.executable, "-c", _AT_THE_LIMIT, str(tmp_path / "page")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "memory mappings and the kernel allows" in done.stdout, done.stdout + done.stderr[-3000:]
    for fix in ("vm.max_map_count", "FEEDLINE_MAPPED_BATCHES"):
        assert fix in done.stdout, done.stdout


def test_a_mapping_bound_that_is_not_a_number_is_refused_naming_the_variable(monkeypatch, no_leaks):
    monkeypatch.setenv("FEEDLINE_MAPPED_BATCHES", "lots")
    with fl.from_arrays(np.arange(8)).map(_write_into, backend="process", workers=1).batch(4) as pipe:
        with pytest.raises(ValueError, match="FEEDLINE_MAPPED_BATCHES='lots'.*whole number"):
            next(iter(pipe))


def _write_into(row):
    row[0] = 1  # the source array is shared read-only with the workers
    return row


def test_writing_into_a_shared_source_array_is_a_read_only_error_naming_the_sample(no_leaks):
    rows = np.zeros((1024, 2048), np.uint8)  # 2 MiB: shared with the workers through shared memory, not pickled
    with fl.from_arrays(rows).map(_write_into, backend="process", workers=2).batch(8) as pipe:
        with pytest.raises(fl.SampleError, match="read-only") as caught:
            next(iter(pipe))
    assert "sample 0" in str(caught.value) or "index 0" in str(caught.value), str(caught.value)
    assert not rows.any(), "the user's array is untouched"
