"""How process workers start: forked from a clean fork server (POSIX), or as fresh interpreters (Windows' way).

Both paths must behave the same; ``FEEDLINE_FORKSERVER=0`` selects fresh
interpreters on Linux, so the path Windows users get is tested here too.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import pid_alive, switch_interval_holds, wait_for

import feedline as fl
from feedline import testing

HERE = os.path.dirname(os.path.abspath(__file__))


def where_am_i(_):
    return os.getpid(), os.getppid(), os.getcwd(), os.environ.get("FEEDLINE_TEST_MARK", "")


def _run_once(workers=2):
    pipe = fl.from_arrays(np.arange(4)).map(where_am_i, backend="process", workers=workers).batch(1)
    with pipe:
        return [tuple(v[0] for v in batch) for batch in pipe]


def test_workers_fork_from_the_fork_server_by_default(monkeypatch, no_leaks):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    rows = _run_once()
    parents = {int(row[1]) for row in rows}
    assert parents <= set(testing.helper_pids()), "workers should be children of the fork server"
    assert os.getpid() not in parents


def test_describing_a_process_map_starts_the_fork_server_ahead_of_iteration():
    """Its start-up overlaps the user's own set-up; a thread map, an automatic one, or the fork server turned off, starts nothing."""
    code = (
        "import numpy as np, feedline as fl\n"
        "from feedline import testing\n"
        "from feedline.engine import _runtime\n"
        "_runtime.default_workers = lambda: 4\n"  # few cores: an automatic map starts nothing ahead (the next test)
        "from feedline import _startup\n"
        "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
        "p = fl.from_arrays(np.arange(4))\n"
        "p.map(lambda s: s, backend='thread')\n"
        "p.map(lambda s: s)\n"
        "print(len(testing.helper_pids()))\n"
        "p.map(lambda s: s, backend='process')\n"
        "print(len(testing.helper_pids()))\n"
    )
    assert _printed(code) == ["0", "1"]
    assert _printed(code, FEEDLINE_FORKSERVER="0") == ["0", "0"]


def test_describing_an_automatic_map_starts_the_fork_server_ahead_only_on_many_cores():
    """On 8 cores or more its imports take one core of many while the threads run; on fewer, a core they need."""
    code = (
        "import sys, numpy as np, feedline as fl\n"
        "from feedline import testing\n"
        "from feedline.engine import _runtime\n"
        "_runtime.default_workers = lambda: int(sys.argv[1])\n"
        "from feedline import _startup\n"
        "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
        "p = fl.from_arrays(np.arange(4))\n"
        "p.map(lambda s: s, workers=1)\n"  # one worker: never processes
        "print(len(testing.helper_pids()))\n"
        "p.map(lambda s: s)\n"
        "print(len(testing.helper_pids()))\n"
    )
    assert _printed(code, args=["16"]) == ["0", "1"]
    assert _printed(code, args=["4"]) == ["0", "0"]
    assert _printed(code, args=["16"], FEEDLINE_FORKSERVER="0") == ["0", "0"]


_SET_UP = (  # describe an automatic map, then either iterate at once or set up (a model) for a second first
    "import sys, time, numpy as np, feedline as fl\n"
    "from feedline import testing\n"
    "from feedline.engine import _runtime\n"
    "_runtime.default_workers = lambda: int(sys.argv[1])\n"
    "from feedline import _startup\n"
    "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
    "p = fl.from_arrays(np.arange(64)).map(lambda s: s).batch(8)\n"
    "if sys.argv[2] == 'iterate':\n"
    "    with p:\n"
    "        assert sum(len(b) for b in p) == 64\n"
    "time.sleep(1.0)\n"
    "print(len(testing.helper_pids()))\n"
)


def test_an_automatic_map_left_a_moment_before_iterating_starts_the_fork_server_on_few_cores():
    """A training script builds its model between describing and iterating: the server's imports fit there."""
    assert _printed(_SET_UP, args=["4", "set-up"]) == ["1"]
    assert _printed(_SET_UP, args=["4", "set-up"], FEEDLINE_FORKSERVER="0") == ["0"]


def test_an_automatic_map_iterated_at_once_starts_no_fork_server_ahead_on_few_cores():
    """Iterated at once, the trial starts it only if it needs processes (cheap samples: the calling thread's work)."""
    assert _printed(_SET_UP, args=["4", "iterate"]) == ["0"]


_HELD_AT_ONCE = (  # GIL-bound work on 2 cores, iterated at once: is a fork server up or importing at the verdict?
    "import sys, numpy as np, feedline as fl\n"
    "from feedline import testing\n"
    "from feedline.engine import _runtime, _trial\n"
    "_runtime.default_workers = lambda: 2\n"
    "from feedline import _startup\n"
    "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
    "at_verdict = []\n"
    "start = _trial.BackendTrial._start_processes\n"
    "def recording(self):\n"
    "    at_verdict.append(len(testing.helper_pids()))\n"
    "    return start(self)\n"
    "_trial.BackendTrial._start_processes = recording\n"
    "def python(v):\n"
    "    total = 0\n"
    "    for k in range(60000):\n"  # ~4 ms of Python: it holds the GIL
    "        total += k % 7\n"
    "    return np.full(4, v)\n"
    "p = fl.from_arrays(np.arange(96)).map(python).batch(8)\n"
    "with p:\n"
    "    assert sum(len(b) for b in p) == 96\n"
    "    print(p.stats().backend, at_verdict[:1] or ['none'])\n"
)


def test_threads_held_back_by_the_gil_start_the_fork_server_before_their_verdict_on_few_cores():
    """Started only after the verdict, the server's imports delayed the workers ~0.1 s (story 1: 0.22-0.29 s, now 0.15-0.18)."""
    backend, servers_at_verdict = _printed(_HELD_AT_ONCE)
    if backend != "process":
        pytest.skip(f"the trial kept {backend} here (a busy machine?): nothing to check")
    assert servers_at_verdict == "[1]", "the fork server should be starting (or up) when the verdict asks for workers"


_PARKED_AT_VERDICT = (  # GIL-bound work on 2 cores in a new interpreter: were its workers held ready at the verdict?
    "import numpy as np, feedline as fl\n"
    "from feedline.engine import _runtime, _trial\n"
    "_runtime.default_workers = lambda: 2\n"
    "from feedline import _startup\n"
    "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
    "held, seen = [], []\n"
    "park, start = _trial.BackendTrial._park_workers, _trial.BackendTrial._start_processes\n"
    "def parking(self):\n"
    "    park(self)\n"
    "    held.append(self._parked)\n"
    "def recording(self):\n"
    "    start(self)\n"
    "    seen.append(len(held) == 1 and held[0] is not None)\n"
    "    seen.append(bool(held) and self.processes is held[0])\n"
    "_trial.BackendTrial._park_workers = parking\n"
    "_trial.BackendTrial._start_processes = recording\n"
    "def python(v):\n"
    "    total = 0\n"
    "    for k in range(60000):\n"
    "        total += k % 7\n"
    "    return np.full(4, v)\n"
    "p = fl.from_arrays(np.arange(400)).map(python).batch(8)\n"
    "with p:\n"
    "    out = [int(b[i, 0]) for b in p for i in range(len(b))]\n"
    "    assert out == list(range(400)), out\n"
    "    print(p.stats().backend, seen[:2] or ['none'])\n"
)


def test_gil_bound_threads_start_their_workers_held_at_the_first_sign_and_the_verdict_hands_them_the_pipeline():
    """Asked for at the verdict, the workers took 25-38 ms more to be ready beside GIL-bound threads (story 4, 2 cores)."""
    backend, *seen = _printed(_PARKED_AT_VERDICT)
    if backend != "process":
        pytest.skip(f"the trial kept {backend} here (a busy machine?): nothing to check")
    assert "".join(seen) == "[True,True]", "the workers held since the first sign should be the ones that take the work"


def test_held_process_workers_connect_but_run_nothing_until_given_the_pipeline(no_leaks):
    from feedline.backends.process import ProcessExecutor
    from feedline.worker import Task

    part = fl.from_arrays(np.arange(16)).map(where_am_i, backend="process").batch(4).plan.part
    held = ProcessExecutor(part, 2, held=True)
    try:
        deadline = time.monotonic() + 60
        while held.connecting() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not held.connecting(), "both workers should have connected and said hello"
        held.submit((0, 0), Task(epoch=0, number=0, indices=np.arange(4)))
        assert held.wait(0.3) == [] and not held.wait_ready(0.2), "held workers get no pipeline, so no task"
        held.release()
        events = []
        while not events and time.monotonic() < deadline:
            events += held.wait(0.1)
        [event] = events
        assert event.result.error is None and event.result.rows == 4
        assert set(event.result.payload[0].tolist()) <= set(held.worker_pids()), "it ran in a worker process"
    finally:
        held.close()


def test_waiting_for_the_workers_to_be_ready_reads_their_ready_behind_a_finished_task(no_leaks):
    # a task finished while the consumer waited for the last worker's `Ready` was held, came back from the next look
    # in place of the workers' messages, was held again, and so on: the `Ready` was never read (a 60 s wait_ready
    # failed, about 1 run in 10 without the fork server)
    from feedline.backends.process import ProcessExecutor

    part = fl.from_arrays(np.arange(16)).map(where_am_i, backend="process").batch(4).plan.part
    executor = ProcessExecutor(part, 2)
    try:
        finished = object()  # a finished task collected outside `wait`
        executor.tasks.hold([finished])
        assert executor.wait_ready(30), "the workers' Ready messages should be read with a finished task kept"
        assert executor.wait(0) == [finished], "... and the finished task should come back from the next wait"
    finally:
        executor.close()


def test_held_process_workers_closed_unused_leave_nothing_behind(no_leaks):
    from feedline.backends.process import ProcessExecutor

    part = fl.from_arrays(np.arange(16)).map(where_am_i, backend="process").batch(4).plan.part
    held = ProcessExecutor(part, 3, held=True)
    deadline = time.monotonic() + 60
    while held.connecting() and time.monotonic() < deadline:
        time.sleep(0.01)
    pids = held.worker_pids()  # (forked beside the consumer: known once they connect)
    assert len(pids) == 3
    held.close()
    assert wait_for(lambda: not any(pid_alive(pid) for pid in pids), 15), "every held worker should be gone"


class _SlowToLoad:
    """Unpickles in a worker by writing ``path`` + its pid, then sleeping for a minute (an import that takes long)."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        code = f"import os, time; open({self.path!r} + str(os.getpid()), 'w').close(); time.sleep(60)"
        return (exec, (code,))


def test_workers_still_loading_the_pipeline_give_the_users_switch_interval_back_without_the_consumer_polling(
        tmp_path, switch_interval, no_leaks):
    """An epoch that ends while its process workers still load the pipeline leaves nobody polling them for `Ready`.

    The executor held feedline's short GIL switch interval until it read every `Ready`, so the user's threads ran
    at 0.5 ms from the end of such an epoch to the start of the next (a 10-sample epoch on a loaded 2-core VM).
    """
    from feedline.backends.process import ProcessExecutor

    slow = _SlowToLoad(str(tmp_path / "loading-"))
    part = fl.from_arrays(np.arange(8)).map(lambda s: (s, slow), backend="process").batch(4).plan.part
    executor = ProcessExecutor(part, 2)
    try:
        assert sys.getswitchinterval() < switch_interval, "held while the workers start"
        assert wait_for(lambda: len(os.listdir(tmp_path)) == 2, 60), "both workers should be loading the pipeline"
        assert wait_for(lambda: switch_interval_holds() == 0, 10), "no worker starts any more: nothing should hold it"
        assert sys.getswitchinterval() == switch_interval
        assert not any(w.ready for w in executor.pool), "the workers are still loading, and nobody polled them"
    finally:
        executor.close()


@pytest.mark.parametrize("forkserver", ["1", "0"], ids=["forked", "fresh-interpreters"])
def test_close_does_not_wait_for_workers_still_loading_the_pipeline(forkserver, tmp_path, monkeypatch, no_leaks):
    """A worker still unpickling the pipeline (a heavy import: torch takes 1-2 s) is terminated at once, not awaited.

    It reads Stop only once its imports are done: close() waited up to a second for it (an automatic choice that
    started processes and ended on threads paid that at the end of its epoch).
    """
    from feedline.backends.process import ProcessExecutor

    monkeypatch.setenv("FEEDLINE_FORKSERVER", forkserver)
    slow = _SlowToLoad(str(tmp_path / "loading-"))
    part = fl.from_arrays(np.arange(8)).map(lambda s: (s, slow), backend="process").batch(4).plan.part
    executor = ProcessExecutor(part, 2)
    pids = executor.worker_pids()
    assert wait_for(lambda: len(os.listdir(tmp_path)) == 2, 60), "both workers should be loading the pipeline"
    assert wait_for(lambda: executor.wait(0.01) == [] and all(w.conn is not None for w in executor.pool), 30), (
        "the consumer should have taken both connections")
    calls = []
    for proc in [w.proc for w in executor.pool]:
        for name in ("wait", "terminate"):
            method = getattr(proc, name)
            setattr(proc, name, lambda *a, _m=method, _n=name, _p=proc, **k: (calls.append((_p.pid, _n)), _m(*a, **k))[1])
    executor.close()
    firsts = {pid: name for pid, name in reversed(calls)}
    assert firsts == {pid: "terminate" for pid in pids}, f"each loading worker should be terminated before any wait: {calls}"
    assert wait_for(lambda: not any(pid_alive(pid) for pid in pids), 15)


def _printed(code: str, args: list[str] = (), **env) -> list[str]:
    """What ``code`` prints, run in a fresh interpreter; the fork server on (the default) unless ``env`` turns it off."""
    base = {k: v for k, v in os.environ.items() if k != "FEEDLINE_FORKSERVER"}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300, env=base | env)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_automatic_choice_whose_threads_keep_the_cores_busy_never_starts_a_fork_server():
    """Its imports would take the cores from the threads: it starts only when the trial needs processes."""
    code = (
        "import numpy as np, feedline as fl\n"
        "from feedline import testing\n"
        "from feedline.engine import _runtime\n"
        "_runtime.default_workers = lambda: 2\n"  # 2 cores (on 8 or more the map starts the server when described)
        "from feedline import _startup\n"
        "_startup.speculation = _startup.Speculation(cores=_runtime.default_workers)\n"  # the start-up policy counts the same cores
        "import zlib\n"
        "data = np.random.default_rng(0).integers(0, 4, 1 << 19, dtype=np.uint8).tobytes()\n"
        "def heavy(s):\n"
        "    return len(zlib.compress(data, 6))\n"  # zlib lets the GIL go while it compresses (on this thread)
        "p = fl.from_arrays(np.arange(64)).map(heavy, workers=2).batch(4)\n"
        "with p:\n"
        "    n = sum(len(b) for b in p)\n"
        "    print(n, '+'.join(sorted(p.stats().trial)), len(testing.helper_pids()))\n"
    )
    rows, tried, helpers = _printed(code)
    assert rows == "64"
    if tried != "thread":  # processes were tried too (and so started): the threads did not show at once that they
        pytest.skip(f"keep both cores busy, e.g. on a busy machine (tried: {tried})")
    assert helpers == "0", "no fork server should have started for threads that won at once"


def test_a_fork_server_says_when_its_imports_are_done():
    """The automatic choice does not judge threads while a fork server still takes a core (`backends.warming_up`)."""
    code = (
        "import time, numpy as np, feedline as fl\n"
        "from feedline.backends import warming_up\n"
        "fl.from_arrays(np.arange(4)).map(lambda s: s, backend='process')\n"
        "print(warming_up())\n"
        "deadline = time.monotonic() + 60\n"
        "while warming_up() and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(warming_up())\n"
    )
    assert _printed(code) == ["True", "False"]


def test_a_script_that_ends_while_the_fork_server_imports_prints_no_traceback():
    """Describing a process map starts the fork server; a script that ends before it is up left a BrokenPipeError on stderr."""
    code = (
        "import numpy as np, feedline as fl\n"
        "fl.from_arrays(np.arange(4)).map(lambda s: s, backend='process')\n"
        "from feedline.backends import warming_up\n"
        "print(warming_up())\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "FEEDLINE_FORKSERVER"}
    # The server shares the script's stderr: capturing it waits until the server has exited too.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=base)
    assert out.returncode == 0, out.stderr
    if out.stdout.split() != ["True"]:
        pytest.skip("the fork server was up before the script ended: nothing to check")
    assert "Traceback" not in out.stderr, out.stderr


def _describe_a_pipeline_inside(v):
    """What a user module that builds a pipeline at import does, run inside a worker."""
    from feedline import testing

    fl.from_arrays(np.arange(4)).map(lambda s: s)
    return len(testing.helper_pids())


def test_a_pipeline_described_inside_a_process_worker_starts_no_fork_server_there(no_leaks):
    pipe = fl.from_arrays(np.arange(4)).map(_describe_a_pipeline_inside, backend="process", workers=2).batch(4)
    with pipe:
        [counts] = [b.tolist() for b in pipe]
    assert counts == [0, 0, 0, 0]


def test_fresh_interpreters_when_the_fork_server_is_off(monkeypatch, no_leaks):
    monkeypatch.setenv("FEEDLINE_FORKSERVER", "0")
    rows = _run_once()
    assert {int(row[1]) for row in rows} == {os.getpid()}


@pytest.mark.parametrize("mode", ["forkserver", "fresh"])
def test_workers_see_the_consumers_current_directory_and_environment(mode, monkeypatch, tmp_path, no_leaks):
    monkeypatch.setenv("FEEDLINE_FORKSERVER", "1" if mode == "forkserver" else "0")
    _run_once()  # the fork server is up now, with the old directory and environment
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FEEDLINE_TEST_MARK", "set-after-start")
    rows = _run_once()
    assert {row[2] for row in rows} == {str(tmp_path)}
    assert {row[3] for row in rows} == {"set-after-start"}


@pytest.mark.timeout(600)
def test_fault_and_scale_suites_pass_with_fresh_interpreters():
    """The Windows start-up path, on Linux: the fault-tolerance and scale tests without the fork server."""
    env = {**os.environ, "FEEDLINE_FORKSERVER": "0"}
    tests = [os.path.join(HERE, "test_faults.py"), os.path.join(HERE, "test_process_backend.py"),
             os.path.join(HERE, "test_scale.py") + "::test_close_returns_and_leaves_nothing_with_many_workers"]
    # Left out: two workers importing TensorFlow (29 of this run's 137 s). The variables it checks come from the one
    # `worker_env` both start paths use, and their way into a fresh interpreter is checked by the BLAS-variable tests.
    tf_pool = "tests/test_process_backend.py::test_tensorflow_ops_in_workers_run_on_one_intra_op_thread_unless_the_user_chose"  # (a node id:
    # relative to the root, where the run below starts; an absolute path deselects nothing)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "--deselect", tf_pool, *tests],
                          env=env, capture_output=True, text=True, timeout=580, cwd=os.path.dirname(HERE))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 deselected" in done.stdout, "the TensorFlow test was renamed: name it again above"
