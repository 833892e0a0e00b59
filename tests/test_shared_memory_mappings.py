"""How process workers' shared memory is mapped: no file descriptor per mapping, read-only where it must be.

Python's ``mmap.mmap`` keeps a duplicate descriptor open for every mapping,
and the consumer maps every batch slot of every worker: holding 2,000
batches (``list(pipe)``) died of ``OSError: [Errno 24] Too many open files``
at the usual limit of 1,024 (macOS: 256), and 64 workers kept ~410
descriptors open in the consumer. Each test runs a child interpreter whose
descriptor limit is 128.
"""

from __future__ import annotations

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
