"""Thread workers and NumPy's BLAS pool: one BLAS thread while they live, the program's own choice respected.

Each case runs in a fresh interpreter, since the BLAS libraries read their
thread count once, from the environment, when they load.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from feedline._blas_limit import USER_BLAS_VARS

_CODE = (
    "import numpy as np, feedline as fl\n"
    "from threadpoolctl import threadpool_info\n"
    "def blas():\n"
    "    return max(i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas')\n"
    "seen = []\n"
    "def sample(i):\n"
    "    seen.append(blas())\n"
    "    m = np.full((64, 64), float(i))\n"
    "    return (m @ m)[0, :4]\n"
    "print(blas())\n"
    "pipe = fl.from_arrays(np.arange(32)).map(sample, backend=__BACKEND__, workers=2).batch(8)\n"
    "with pipe:\n"
    "    got = np.concatenate(list(pipe))\n"
    "assert got[:, 0].tolist() == [64.0 * i * i for i in range(32)]\n"
    "print(max(seen), min(seen))\n"
    "print(blas())\n"
)


def _printed(code: str, backend: str = "'thread'", **env) -> list[int]:
    """The numbers ``code`` prints in a fresh interpreter, no BLAS variable set but those in ``env``."""
    base = {k: v for k, v in os.environ.items() if k not in USER_BLAS_VARS and k != "FEEDLINE_BLAS_LIMIT"}
    out = subprocess.run([sys.executable, "-c", code.replace("__BACKEND__", backend)], capture_output=True,
                         text=True, timeout=180, env=base | env)
    assert out.returncode == 0, out.stderr
    return [int(v) for v in out.stdout.split()]


def _blas_threads(backend: str = "'thread'", **env) -> list[int]:
    """BLAS threads before the pipeline, the most and fewest its samples saw, and after it closed."""
    return _printed(_CODE, backend, **env)


@pytest.fixture(scope="module")
def default_pool() -> int:
    pytest.importorskip("threadpoolctl")
    before = _blas_threads()[0]
    if before < 2:
        pytest.skip("NumPy's BLAS pool has one thread here already (one core, or no threaded BLAS)")
    return before


def test_thread_workers_run_with_one_blas_thread_and_the_pool_comes_back_after(default_pool):
    before, most, fewest, after = _blas_threads()
    assert (most, fewest) == (1, 1), "every sample on a thread worker saw one BLAS thread"
    assert before == after == default_pool, "the pool's size is given back when the last thread executor closes"


def test_a_blas_thread_count_the_program_chose_is_left_alone(default_pool):
    assert _blas_threads(OPENBLAS_NUM_THREADS="2")[1:3] == [2, 2]
    assert _blas_threads(FEEDLINE_BLAS_LIMIT="0")[1:3] == [default_pool, default_pool]


def test_one_blas_thread_asked_for_after_numpy_loaded_still_limits_the_pool(default_pool):
    # a script that sets the variable below its imports: the pool NumPy started keeps a thread per core, and
    # those threads spin after every product beside the thread workers
    late = _CODE.replace("import numpy as np, feedline as fl\n",
                         "import os, numpy as np, feedline as fl\nos.environ['OPENBLAS_NUM_THREADS'] = '1'\n")
    before, most, fewest, after = _printed(late)
    assert before == default_pool and (most, fewest) == (1, 1) and after == default_pool


def test_samples_run_in_the_calling_thread_keep_the_whole_blas_pool(default_pool):
    # serial: one sample at a time, nothing else competes for the cores its products may use
    assert _blas_threads("'serial'")[1:3] == [default_pool, default_pool]


_TORCH_CODE = (
    "import numpy as np, torch, feedline as fl\n"
    "seen = []\n"
    "def sample(i):\n"
    "    seen.append(torch.get_num_threads())\n"
    "    return (torch.full((64, 64), float(i)) @ torch.full((64, 64), 1.0))[0, :2].numpy()\n"
    "before = torch.get_num_threads()\n"
    "pipe = fl.from_arrays(np.arange(32)).map(sample, backend=__BACKEND__, workers=2).batch(8)\n"
    "with pipe:\n"
    "    got = np.concatenate(list(pipe))\n"
    "assert got[:, 0].tolist() == [64.0 * i for i in range(32)]\n"
    "print(before, max(seen), min(seen), torch.get_num_threads())\n"
)


def _torch_threads(**env) -> list[int]:
    """torch's intra-op threads before the pipeline, the most and fewest its samples saw, and after it closed."""
    pytest.importorskip("torch")
    counts = _printed(_TORCH_CODE, **env)
    if counts[0] < 2:
        pytest.skip("torch runs one intra-op thread here already (one core)")
    return counts


def test_thread_workers_run_torch_ops_on_one_intra_op_thread_and_the_count_comes_back_after():
    # each op of a sample otherwise fans out to a thread per core beside the workers: the automatic choice saw
    # the workers keep one core busy between them and started processes (2 cores, first epoch: 289 samples/s, not 610)
    before, most, fewest, after = _torch_threads()
    assert (most, fewest) == (1, 1), "every sample on a thread worker saw one intra-op thread"
    assert after == before, "the count comes back when the last thread executor closes"


def test_a_torch_thread_count_the_program_chose_is_left_alone():
    before, most, fewest, after = _torch_threads(OMP_NUM_THREADS="2")
    assert (before, most, fewest, after) == (2, 2, 2, 2)
    before, most, fewest, after = _torch_threads(FEEDLINE_BLAS_LIMIT="0")
    assert most == fewest == before
