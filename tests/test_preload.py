"""Libraries a pipeline uses, imported once by a zygote of the fork server instead of once per worker (Linux)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import cloudpickle
import numpy as np
import pytest
from conftest import pid_alive, wait_for

import feedline as fl
from feedline import testing

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zygotes count threads in /proc (Linux)")

LIBRARY = '''
import os, threading, time
with open(os.environ["FEEDLINE_TEST_IMPORT_LOG"], "a") as f:
    f.write(f"{os.getpid()}\\n")
if STARTS_THREAD:
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
if os.environ.get("FEEDLINE_TEST_SLOW_IMPORT") and os.getpid() != int(os.environ["FEEDLINE_TEST_CONSUMER"]):
    time.sleep(float(os.environ["FEEDLINE_TEST_SLOW_IMPORT"]))  # a heavy library (torch: ~1.5 s), in the zygote
    open(os.environ["FEEDLINE_TEST_IMPORT_LOG"] + ".done", "w").close()
def double(x):
    return 2 * x
'''


@pytest.fixture
def installed_library(tmp_path, monkeypatch):
    """Make ``name`` an installed package (under a ``site-packages`` folder) that logs each import's pid; import it."""
    log = tmp_path / "imports.log"
    monkeypatch.setenv("FEEDLINE_TEST_IMPORT_LOG", str(log))
    site = tmp_path / "site-packages"

    def install(name: str, starts_thread: bool = False):
        (site / name).mkdir(parents=True)
        (site / name / "__init__.py").write_text(LIBRARY.replace("STARTS_THREAD", str(starts_thread)))
        monkeypatch.syspath_prepend(str(site))
        module = __import__(name)
        monkeypatch.setitem(sys.modules, name, module)
        return module, lambda: [int(pid) for pid in log.read_text().split() if int(pid) != os.getpid()]

    yield install
    for name in [n for n in sys.modules if n.startswith("feedline_test_lib")]:
        del sys.modules[name]


def _run(lib, workers=4):
    pipe = fl.from_arrays(np.arange(16)).map(lambda s: (lib.double(s), os.getpid(), os.getppid()), backend="process",
                                              workers=workers).batch(4)
    with pipe:
        rows = [tuple(int(v) for v in row) for batch in pipe for row in zip(*batch)]
    assert sorted(r[0] for r in rows) == [2 * i for i in range(16)], "every sample once, computed by the library"
    return {r[1] for r in rows}, {r[2] for r in rows}


def test_workers_fork_from_a_zygote_that_imported_the_installed_library_once(installed_library, monkeypatch, no_leaks):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    lib, importers = installed_library("feedline_test_lib_a")
    workers, parents = _run(lib)
    [zygote] = importers()
    assert parents == {zygote}, "the workers should be the zygote's children"
    assert zygote not in workers and zygote in testing.helper_pids(), "the zygote is a helper, like the fork server"
    _run(lib)
    assert importers() == [zygote], "a later pipeline with the same libraries forks from the same zygote"


def test_describing_a_process_map_starts_its_libraries_importing_before_the_first_epoch(installed_library, monkeypatch,
                                                                                       no_leaks):
    """The zygote imports while the user builds a model: torch's 1.5 s were paid after iteration began."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    lib, importers = installed_library("feedline_test_lib_j")
    table = np.arange(1 << 20)  # a source's column: left out of what is read ahead (`libraries_of`)
    pipe = fl.from_arrays(table).map(lambda s: (lib.double(s), os.getppid()), backend="process", workers=3).batch(4096)
    assert wait_for(lambda: importers(), 30), "describing the map should start its zygote importing the library"
    [zygote] = importers()
    with pipe:
        rows = [tuple(int(v) for v in row) for batch in pipe for row in zip(*batch)]
    assert sorted(r[0] for r in rows) == [2 * int(i) for i in table], "every sample once, computed by the library"
    assert {r[1] for r in rows} == {zygote}, "the workers fork from the zygote started when the map was described"
    assert importers() == [zygote], "and nothing else imported the library"


@pytest.fixture
def few_cores_and_no_other_pipelines(monkeypatch):
    """Under the start-up policy's ``ahead_cores`` (the zygote starts only after a pause), with no pipeline another test left iterating."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    with testing.start_speculation(cores=4):  # and no runtime registered yet
        yield


def test_an_automatic_map_left_a_moment_before_iterating_starts_its_zygote_on_few_cores(
        installed_library, few_cores_and_no_other_pipelines, no_leaks):  # (in CI, pipelines left iterating by other tests held it back)
    """The user's set-up (a model built) holds the import, so GIL-bound work forks its workers at the verdict."""
    lib, importers = installed_library("feedline_test_lib_m")
    pipe = fl.from_arrays(np.arange(64)).map(lambda s: lib.double(s)).batch(8)
    assert wait_for(lambda: importers(), 15), "a pause after describing should start the map's zygote importing"
    with pipe:
        assert sorted(int(v) for batch in pipe for v in batch) == [2 * i for i in range(64)]


@pytest.mark.parametrize("backend", ["serial", "thread", "process"])
def test_a_pipeline_looked_at_and_kept_does_not_hold_back_the_zygote_of_a_map_described_after_it(
        backend, installed_library, few_cores_and_no_other_pipelines, no_leaks):
    """One batch looked at before training: its workers hold finished batches and take no core (serial: none run)."""
    lib, importers = installed_library(f"feedline_test_lib_p_{backend}")
    with fl.from_arrays(np.arange(256)).map(lambda s: s + 1, backend=backend, workers=2).batch(4) as looked_at:
        first = next(iter(looked_at))  # the window behind it fills, and nobody takes it
        assert list(first) == [1, 2, 3, 4]
        pipe = fl.from_arrays(np.arange(64)).map(lambda s: lib.double(s)).batch(8)
        assert wait_for(lambda: importers(), 15), "a pause after describing should start the map's zygote importing"
        with pipe:
            assert sorted(int(v) for batch in pipe for v in batch) == [2 * i for i in range(64)]


def test_a_pipeline_a_consumer_is_taking_batches_from_holds_back_the_zygote_while_it_does(
        installed_library, few_cores_and_no_other_pipelines, no_leaks):
    """Its threads may be the ones that need the cores: nothing starts until the consumer has stopped taking."""
    import threading

    lib, importers = installed_library("feedline_test_lib_q")
    stop, taken = threading.Event(), []
    busy = fl.from_arrays(np.arange(1 << 20)).map(lambda s: time.sleep(0.002) or s, backend="thread", workers=2)

    def consume():
        with busy.batch(2) as batches:
            for batch in batches:
                taken.append(len(batch))
                if stop.is_set():
                    break

    consumer = threading.Thread(target=consume)
    consumer.start()
    try:
        assert wait_for(lambda: taken, 15)
        pipe = fl.from_arrays(np.arange(64)).map(lambda s: lib.double(s)).batch(8)
        time.sleep(1.5)  # six times the pause the start waits for
        assert not importers(), "a pipeline whose consumer takes batches should hold the zygote back"
    finally:
        stop.set()
        consumer.join(30)
    with pipe:
        assert sorted(int(v) for batch in pipe for v in batch) == [2 * i for i in range(64)]


def test_describing_an_automatic_map_on_many_cores_starts_its_zygote_at_once(installed_library, monkeypatch, no_leaks):
    """On `StartPolicy.ahead_cores` cores or more the import takes one core of many: it starts as the map is described."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    with testing.start_speculation(cores=16, after_idle=3600.0):  # so that only the describe-time start can import it
        lib, importers = installed_library("feedline_test_lib_n")
        fl.from_arrays(np.arange(64)).map(lambda s: lib.double(s)).batch(8)
        assert wait_for(lambda: importers(), 15), "describing the map should start its zygote importing the library"


def test_the_variable_threadpoolctl_sets_when_imported_keeps_the_zygote_started_when_the_map_was_described(
        installed_library, monkeypatch, no_leaks):
    """Thread workers import threadpoolctl, which sets KMP_DUPLICATE_LIB_OK: no second zygote importing torch again."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    monkeypatch.delenv("KMP_DUPLICATE_LIB_OK", raising=False)
    lib, importers = installed_library("feedline_test_lib_o")
    pipe = fl.from_arrays(np.arange(64)).map(lambda s: (lib.double(s), os.getppid()), backend="process",
                                             workers=2).batch(8)
    assert wait_for(lambda: importers(), 30), "the zygote of the map described"
    [zygote] = importers()
    monkeypatch.setenv("KMP_DUPLICATE_LIB_OK", "True")  # as `import threadpoolctl` does when thread workers start
    with pipe:
        rows = [tuple(int(v) for v in row) for batch in pipe for row in zip(*batch)]
    assert sorted(r[0] for r in rows) == [2 * i for i in range(64)]
    assert {r[1] for r in rows} == {zygote} and importers() == [zygote], "the workers fork from the zygote already up"


def test_a_zygote_whose_setting_changed_serves_its_live_workers_then_exits(installed_library, monkeypatch, no_leaks):
    """A changed environment gets a zygote of its own; the old one forks no more and exits after its last worker."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    lib, importers = installed_library("feedline_test_lib_k")

    def pipeline():
        return fl.from_arrays(np.arange(64)).map(lambda s: (lib.double(s), os.getppid()), backend="process",
                                                 workers=2).batch(4)

    first = pipeline()
    assert wait_for(lambda: importers(), 30), "the zygote of the map described"
    [old] = importers()
    running = iter(first)
    rows = [tuple(int(v) for v in row) for row in zip(*next(running))]  # its workers are up, forked by `old`
    monkeypatch.setenv("FEEDLINE_TEST_SETTING", "changed")  # e.g. a seed or device variable set after describing
    with pipeline() as second:
        later = [tuple(int(v) for v in row) for batch in second for row in zip(*batch)]
    new = [pid for pid in importers() if pid != old]
    assert len(new) == 1 and {r[1] for r in later} == set(new), "the new setting's workers fork from a new zygote"
    assert pid_alive(old), "the old zygote waits for its workers, which still serve the first pipeline"
    rows += [tuple(int(v) for v in row) for batch in running for row in zip(*batch)]
    assert sorted(r[0] for r in rows) == [2 * i for i in range(64)] and {r[1] for r in rows} == {old}
    first.close()
    assert wait_for(lambda: not pid_alive(old), 15), "retired, it exits once its last worker has"
    assert new[0] in testing.helper_pids() and old not in testing.helper_pids()


def test_a_library_that_starts_a_thread_when_imported_is_imported_by_each_worker(installed_library, monkeypatch, no_leaks):
    """Forking from a process with threads is unsafe: the zygote declines, the server forks, each worker imports it."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    lib, importers = installed_library("feedline_test_lib_b", starts_thread=True)
    workers, parents = _run(lib)
    assert set(importers()) - workers, "the zygote tried it first"
    assert workers <= set(importers()), "then every worker imported it itself"
    assert parents <= set(testing.helper_pids()) and not parents & set(importers()), "forked by the server"
    started = testing.zygote_count()
    _run(lib)
    assert testing.zygote_count() == started, "no zygote tries that package again"


def test_preloading_turned_off_leaves_each_worker_to_import_its_libraries(installed_library, monkeypatch, no_leaks):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.setenv("FEEDLINE_PRELOAD", "0")
    lib, importers = installed_library("feedline_test_lib_c")
    workers, parents = _run(lib)
    assert workers <= set(importers()), "each worker that ran a task imported it itself"
    assert parents <= set(testing.helper_pids()) and not parents & set(importers()), "forked by the server, no zygote"


def test_only_installed_libraries_are_preloaded_never_the_users_own_modules_or_the_standard_library(
        installed_library, tmp_path, monkeypatch):
    import json

    lib, _ = installed_library("feedline_test_lib_d")
    own = tmp_path / "project"
    own.mkdir()
    (own / "feedline_test_own_module.py").write_text("def triple(x):\n    return 3 * x\n")
    monkeypatch.syspath_prepend(str(own))
    import feedline_test_own_module as mine

    monkeypatch.setitem(sys.modules, "feedline_test_own_module", mine)
    data = cloudpickle.dumps((lambda s: (lib.double(s), mine.triple(s), json.dumps(s), np.zeros(1)), lib.double,
                              mine.triple, "feedline_test_lib_d is also a string here"))
    assert testing.libraries_to_preload(data) == ("feedline_test_lib_d",)
    assert testing.libraries_to_preload(cloudpickle.dumps(lambda: "feedline_test_lib_d" in sys.modules)) == (), (
        "a string that names a module is not a use of it")


def test_libraries_named_after_an_instance_of_a_class_defined_in_the_script_are_preloaded_too(installed_library):
    lib, _ = installed_library("feedline_test_lib_k")

    class Dataset:  # defined here, so cloudpickle sends the class by value, as a user's Dataset in a script
        def __init__(self, transform):
            self.transform = transform  # the instance's state names the library

        def __getitem__(self, i):
            return self.transform(i)

    data = cloudpickle.dumps((Dataset(lib.double), lambda s: s))
    assert testing.libraries_to_preload(data) == ("feedline_test_lib_k",), "named in the state of the instance"
    data = cloudpickle.dumps((Dataset(abs), lambda s: lib.double(s)))
    assert testing.libraries_to_preload(data) == ("feedline_test_lib_k",), "named by a map after the instance"


def test_a_worker_forked_by_a_zygote_that_dies_is_replaced_and_the_epoch_is_complete(installed_library, tmp_path,
                                                                                       monkeypatch, no_leaks):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    lib, importers = installed_library("feedline_test_lib_e")
    marker = str(tmp_path / "died")

    def dies_once_on_5(s):
        if s == 5 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        return lib.double(s), os.getppid()

    pipe = fl.from_arrays(np.arange(24)).map(dies_once_on_5, backend="process", workers=3).batch(4)
    with pipe:
        rows = [tuple(int(v) for v in row) for batch in pipe for row in zip(*batch)]
        assert pipe.stats().worker_restarts == 1
    assert sorted(r[0] for r in rows) == [2 * i for i in range(24)], "every sample once"
    assert {r[1] for r in rows} == set(importers()), "the replacement came from the same zygote"


KILLED_CONSUMER = """
import os, sys, time
import numpy as np
import feedline as fl
from feedline import testing
sys.path.insert(0, sys.argv[1])
import feedline_test_lib_f as lib

def slow(s):
    time.sleep(0.05)
    return lib.double(s)

pipe = fl.from_arrays(np.arange(10_000)).map(slow, backend="process", workers=3).batch(2)
for k, batch in enumerate(pipe):
    if k == 3:
        print(" ".join(map(str, testing.helper_pids())), flush=True)
"""


def test_a_killed_consumer_leaves_no_zygote_worker_or_segment(installed_library, tmp_path, monkeypatch):
    """The fork server sees its consumer gone, the zygote its server, the workers their zygote: all exit."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    _, importers = installed_library("feedline_test_lib_f")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CONSUMER, str(tmp_path / "site-packages")],
                            stdout=subprocess.PIPE, text=True, env=os.environ)
    try:
        helpers = [int(pid) for pid in proc.stdout.readline().split()]
        [zygote] = [pid for pid in importers() if pid != proc.pid]
        assert zygote in helpers
        with open(f"/proc/{zygote}/task/{zygote}/children") as f:
            workers = [int(pid) for pid in f.read().split()]
        assert workers, "the workers should be the zygote's children"
        proc.kill()
        proc.wait(timeout=10)
        assert wait_for(lambda: not any(pid_alive(pid) for pid in helpers + workers), 15), "all should be gone"
        assert wait_for(lambda: not [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{proc.pid}_")], 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


QUICK_CONSUMER = """
import os, sys, time
import numpy as np
import feedline as fl
sys.path.insert(0, sys.argv[1])
import feedline_test_lib_i as lib

from feedline.backends.process import ProcessExecutor

part = fl.from_arrays(np.arange(8)).map(lambda s: lib.double(s), backend="process").batch(4).plan.part
executor = ProcessExecutor(part, 2)
log = os.environ["FEEDLINE_TEST_IMPORT_LOG"]
while len(open(log).read().split()) < 3:  # the test, this consumer, then the zygote: it imports
    time.sleep(0.01)
executor.close()  # before the zygote's imports end: the consumer exits while the server waits for its answer
print("done", flush=True)
"""


def test_a_consumer_that_exits_while_its_zygote_imports_leaves_no_traceback_on_its_terminal(installed_library, tmp_path,
                                                                                            monkeypatch):
    """The server's answer to a consumer gone was a BrokenPipeError traceback (an automatic choice on a torch map)."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    monkeypatch.setenv("FEEDLINE_TEST_CONSUMER", "0")  # every process imports slowly, the zygote too
    monkeypatch.setenv("FEEDLINE_TEST_SLOW_IMPORT", "2")
    _, importers = installed_library("feedline_test_lib_i")
    # stderr is shared with the server, its zygote and the workers: run() returns once the last of them exits
    done = subprocess.run([sys.executable, "-c", QUICK_CONSUMER, str(tmp_path / "site-packages")], capture_output=True,
                          text=True, env=os.environ, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-3000:]
    assert os.path.exists(os.environ["FEEDLINE_TEST_IMPORT_LOG"] + ".done"), "the zygote's import should have ended"
    assert "Traceback" not in done.stderr and "Error" not in done.stderr, done.stderr[-3000:]


def test_close_does_not_wait_for_workers_whose_zygote_still_imports(installed_library, monkeypatch, no_leaks):
    """They are not forked yet: each is stopped as its fork is answered, and close() returns at once."""
    from feedline.backends.process import ProcessExecutor

    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    monkeypatch.setenv("FEEDLINE_TEST_CONSUMER", str(os.getpid()))
    monkeypatch.setenv("FEEDLINE_TEST_SLOW_IMPORT", "4")
    lib, importers = installed_library("feedline_test_lib_g")
    part = fl.from_arrays(np.arange(8)).map(lambda s: lib.double(s), backend="process").batch(4).plan.part
    executor = ProcessExecutor(part, 2)
    assert executor.libraries == ("feedline_test_lib_g",)
    assert wait_for(lambda: importers(), 30), "the zygote should be importing"
    procs = [w.proc for w in executor.pool]
    executor.close()
    done = os.environ["FEEDLINE_TEST_IMPORT_LOG"] + ".done"
    assert not os.path.exists(done), "close() should not wait for the zygote's imports"
    assert wait_for(lambda: all(proc.known.is_set() for proc in procs), 30), "forked once the imports are done"
    assert wait_for(lambda: not any(pid_alive(proc.pid) for proc in procs), 15), "and stopped at once"


def test_automatic_choice_keeps_its_threads_working_while_the_zygote_imports(installed_library, monkeypatch, no_leaks):
    """Threads held back by the GIL were stopped for workers due in ~0.02 s; a zygote's imports take seconds."""
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    monkeypatch.delenv("FEEDLINE_PRELOAD", raising=False)
    monkeypatch.setenv("FEEDLINE_REMEMBER", "0")
    monkeypatch.setenv("FEEDLINE_TEST_CONSUMER", str(os.getpid()))
    monkeypatch.setenv("FEEDLINE_TEST_SLOW_IMPORT", "3")
    lib, importers = installed_library("feedline_test_lib_h")

    def held(s):  # pure Python: holds the GIL
        total = 0
        for k in range(8000):
            total += k * k % 7
        return lib.double(s) + 0 * total

    done = os.environ["FEEDLINE_TEST_IMPORT_LOG"] + ".done"  # written when the zygote's imports end
    zygotes = testing.zygote_count()
    pipe = fl.from_arrays(np.arange(2400)).map(held, workers=2).batch(8)
    rows, after_start, during = [], 0, 0  # batches that came once the zygote began importing; of them, before it ended
    with pipe:
        for batch in pipe:
            rows.extend(int(v) for v in batch)
            if importers():
                after_start += 1
                during += not os.path.exists(done)
        stats = pipe.stats()
    assert sorted(rows) == [2 * i for i in range(2400)], "every sample once"
    if testing.zygote_count() == zygotes or after_start < 20:
        pytest.skip(f"the trial started no zygote while most of the epoch was left: {stats.decision}")
    # Threads that waited for the zygote would deliver only the batches already made (the prefetch window) in its 3 s.
    assert during >= after_start // 2, (f"only {during} of the {after_start} batches after the zygote began importing "
                                        f"came before its imports ended: the threads waited for it ({stats.decision})")
