"""The training process is the user's: its threads keep their torch, BLAS, collector and GIL settings while feedline runs.

Feedline's thread workers take one OpenMP (torch intra-op) thread each, per
thread; nothing process-wide changes unless the user sets
``FEEDLINE_TUNE_PROCESS=1``. Each case runs in a fresh interpreter: these
settings are process-wide, and the libraries read some of them once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("threadpoolctl")

_CODE = r'''
import gc, json, sys, threading
import numpy as np, torch, feedline as fl
from threadpoolctl import threadpool_info

def settings():
    blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    return {"torch": torch.get_num_threads(), "blas": blas, "frozen": gc.get_freeze_count(),
            "gc": gc.isenabled(), "switch": sys.getswitchinterval()}

def in_a_new_thread():
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    thread.start(); thread.join()
    return seen[0]

inside = []
def sample(i):
    if threading.current_thread() is not threading.main_thread():
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        inside.append({"torch": torch.get_num_threads(), "blas": blas})
    a = torch.full((64, 64), float(i))
    return (a @ torch.ones(64, 64))[0, :2].numpy() + (np.full((32, 32), 1.0) @ np.ones((32, 32)))[0, :2]

out = {"before": settings(), "backends": {}}
for backend, workers in __RUNS__:
    inside.clear()
    pipe = fl.from_arrays(np.arange(64)).map(sample, backend=backend, workers=workers).batch(8)
    with pipe:
        during, got = [], []
        for b in pipe:
            got.append(b)
            during.append(settings() | {"new thread": in_a_new_thread()})
        shown = repr(pipe)
    assert np.concatenate(got)[:, 0].tolist() == [64.0 * i + 32.0 for i in range(64)]
    out["backends"][backend] = {"during": during, "inside": list(inside), "after": settings(), "shown": shown}
print(json.dumps(out))
'''


def _run(runs, **env) -> dict:
    """What `_CODE` saw in a fresh interpreter for each (backend, workers) in ``runs``."""
    base = {k: v for k, v in os.environ.items()
            if not k.endswith("_NUM_THREADS") and k not in ("FEEDLINE_TUNE_PROCESS", "VECLIB_MAXIMUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", _CODE.replace("__RUNS__", repr(runs))], capture_output=True,
                         text=True, timeout=300, env=base | env)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.splitlines()[-1])
    if seen["before"]["torch"] < 2:
        pytest.skip("torch runs one intra-op thread here already (one core)")
    return seen


@pytest.fixture(scope="module")
def default_run() -> dict:
    return _run([("thread", 8), ("serial", None), (None, None), ("process", 2)])


@pytest.mark.parametrize("backend", ["thread", "serial", None, "process"])
def test_the_main_thread_keeps_its_torch_blas_collector_and_switch_interval_during_iteration_and_after(
        default_run, backend):
    before, run = default_run["before"], default_run["backends"][str(backend) if backend else "null"]
    for during in run["during"]:
        assert {k: during[k] for k in before} == before, "feedline changed the training thread's settings"
    assert run["after"] == before


@pytest.mark.parametrize("backend", ["thread", "serial", None, "process"])
def test_a_thread_the_user_starts_during_iteration_gets_torchs_usual_intra_op_count(default_run, backend):
    before, run = default_run["before"], default_run["backends"][str(backend) if backend else "null"]
    assert {d["new thread"] for d in run["during"]} == {before["torch"]}


def test_thread_workers_run_torch_ops_on_one_intra_op_thread_each_and_leave_the_blas_pool_alone(default_run):
    # eight threads on fewer cores: each op of a sample would otherwise fan out to a thread per core beside them
    before, inside = default_run["before"], default_run["backends"]["thread"]["inside"]
    assert inside and {s["torch"] for s in inside} == {1}
    # NumPy's OpenBLAS (pthreads) has no per-thread count: limiting it would limit the user's threads too
    assert all(s["blas"] == before["blas"] for s in inside)


def test_nothing_is_shown_in_print_pipe_without_the_opt_in(default_run):
    assert "FEEDLINE_TUNE_PROCESS" not in default_run["backends"]["thread"]["shown"]


def test_an_openmp_thread_count_the_program_chose_is_left_alone_in_the_workers_too():
    run = _run([("thread", 2)], OMP_NUM_THREADS="2")["backends"]["thread"]
    assert {s["torch"] for s in run["inside"]} == {2}


def test_torch_imported_after_the_thread_workers_started_runs_on_one_intra_op_thread_in_them():
    code = (
        "import json, sys, numpy as np, feedline as fl\n"
        "def sample(i):\n"
        "    torch = sys.modules.get('torch')\n"
        "    return np.array([0 if torch is None else torch.get_num_threads()])\n"
        "pipe = fl.from_arrays(np.arange(16)).map(sample, backend='thread', workers=2).batch(4)\n"
        "with pipe:\n"
        "    first = {int(v) for b in pipe for v in b.ravel()}\n"
        "    import torch\n"  # the program imports torch between epochs: the same threads run the next one
        "    second = {int(v) for b in pipe for v in b.ravel()}\n"
        "print(json.dumps([sorted(first), sorted(second), torch.get_num_threads()]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "FEEDLINE_TUNE_PROCESS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    first, second, main = json.loads(out.stdout.splitlines()[-1])
    if main < 2:
        pytest.skip("torch runs one intra-op thread here already (one core)")
    assert first == [0] and second == [1] and main >= 2


def test_with_feedline_tune_process_1_thread_workers_limit_the_blas_pool_and_freeze_the_collector_shown_in_print():
    seen = _run([("thread", 2)], FEEDLINE_TUNE_PROCESS="1")
    before, run = seen["before"], seen["backends"]["thread"]
    if max(before["blas"], default=1) < 2:
        pytest.skip("NumPy's BLAS pool has one thread here already")
    for during in run["during"]:
        assert max(during["blas"]) == 1 and during["frozen"] > 0 and during["torch"] == before["torch"]
    assert run["after"] == before, "the limits and the freeze are given back when the last thread executor closes"
    assert "FEEDLINE_TUNE_PROCESS=1" in run["shown"]
