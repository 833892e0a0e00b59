"""The process backend: spawn-safe workers, shared-memory batches, bounded memory.

Every test here starts real worker processes (fresh interpreters) and, where
it matters, real scripts and interpreters in subprocesses: no mocks. The
``no_leaks`` fixture (tests/conftest.py) fails a test that leaves a worker,
a feedline thread or a shared-memory segment behind.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import child_pids, rss_anon_bytes, snapshot, switch_intervals_while_iterating

import feedline as fl
from feedline import testing

BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")


# --------------------------------------------------------------- helpers
def mapping_of(array: np.ndarray, pid: int | str = "self") -> str:
    """The file (or shared-memory segment) backing ``array``'s first byte in ``pid``."""
    address = array.__array_interface__["data"][0]
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            start, stop = (int(v, 16) for v in fields[0].split("-"))
            if start <= address < stop:
                return fields[5].strip() if len(fields) > 5 else ""
    raise AssertionError(f"address {address:#x} is not mapped in process {pid}")


def mapped_paths(pid: int) -> list[str]:
    """Paths of the file mappings of process ``pid`` (one entry per mapping)."""
    paths = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            fields = line.split(None, 5)
            if len(fields) > 5:
                paths.append(fields[5].strip())
    return paths


def slot_segments(pid: int, consumer_pid: int) -> set[str]:
    """Batch-slot segments (``feedline_<consumer>_w<k>_<n>``) mapped in process ``pid``."""
    pattern = re.compile(rf"/dev/shm/feedline_{consumer_pid}_w\d+_\d+\b")
    return {m.group(0) for path in mapped_paths(pid) for m in [pattern.match(path)] if m}


def ready_worker_pids(executor) -> list[int]:
    """Workers that have loaded the pipeline (a fast epoch may end before the slowest one starts)."""
    pids = [w.proc.pid for w in executor.pool if w is not None and w.ready]
    assert pids, "no worker ever became ready"
    return pids


def process_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def run_python(args, tmp_path, *, stdin=None, timeout=60):
    env = dict(os.environ)
    env.pop("PYTHONSTARTUP", None)
    return subprocess.run(
        [sys.executable, *args], check=False, input=stdin, capture_output=True, text=True, cwd=tmp_path, timeout=timeout, env=env
    )


# ---------------------------------------------------- spawn-safety: scripts
# Top-level code, as a user writes it in a script or a notebook cell: no
# `if __name__ == "__main__":` guard, a plain function, a lambda and a closure
# defined in __main__, and a global the function reads.
USER_CODE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import feedline as fl
    from feedline import testing

    MARKER = sys.argv[1]
    with open(MARKER, "a") as f:          # a worker that re-ran __main__ would add a line
        f.write(f"{os.getpid()}\\n")

    OFFSET = 1000

    def add_offset(x):
        return x + OFFSET

    square = lambda x: x * x

    def make_scaler(k):
        def scale(x):
            return x * k
        return scale

    triple = make_scaler(3)

    pipe = (
        fl.from_arrays(np.arange(20, dtype=np.int64))
        .map(add_offset, backend="process", workers=2)
        .map(square)
        .map(triple)
        .batch(5)
    )
    values = [int(v) for batch in pipe for v in batch]
    print("RESULT", values, flush=True)
    print("BACKEND", pipe.stats().backend, pipe.stats().workers, flush=True)
    print("WORKERS", *testing.worker_pids(pipe), flush=True)
    # No close(): the interpreter's exit must release workers and shared memory.
    """
)
EXPECTED = [3 * (i + 1000) ** 2 for i in range(20)]


def _check_user_session(result, marker):
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    lines = result.stdout.splitlines()
    results = [line for line in lines if line.startswith("RESULT")]
    assert len(results) == 1, f"results printed {len(results)} times (a worker re-ran the script?):\n{result.stdout}"
    assert results[0] == f"RESULT {EXPECTED}"
    backend_line = next(line for line in lines if line.startswith("BACKEND"))
    assert backend_line.split()[1:] == ["process", "2"]
    runs = marker.read_text().split()
    assert len(runs) == 1, f"the user's top-level code ran {len(runs)} times (pids {runs}); workers must not re-run __main__"
    workers = [int(p) for p in next(line for line in lines if line.startswith("WORKERS")).split()[1:]]
    assert len(workers) == 2 and str(workers[0]) not in runs
    # The session ended without close(): its workers and its segments must be gone.
    owner = int(runs[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = [p for p in workers if process_alive(p)]
        segments = [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{owner}_")]
        if not left and not segments:
            break
        time.sleep(0.05)
    assert not left, f"workers {left} outlived the script"
    assert not segments, f"segments {segments} outlived the script"


def test_script_without_main_guard_runs_once_and_prints_results(tmp_path, no_leaks):
    script = tmp_path / "train.py"
    script.write_text(USER_CODE)
    marker = tmp_path / "runs.txt"
    result = run_python([str(script), str(marker)], tmp_path)
    _check_user_session(result, marker)


@pytest.mark.parametrize("how", ["stdin", "dash_c"])
def test_notebook_style_session_without_a_file_works(how, tmp_path, no_leaks):
    """Functions defined interactively (no source file) travel by value."""
    marker = tmp_path / "runs.txt"
    if how == "stdin":
        result = run_python(["-", str(marker)], tmp_path, stdin=USER_CODE)
    else:
        result = run_python(["-c", USER_CODE, str(marker)], tmp_path)
    _check_user_session(result, marker)


def test_function_from_a_local_module_is_found_by_workers(tmp_path, monkeypatch, no_leaks):
    """A module next to the user's code is pickled by reference; workers import it from sys.path."""
    name = f"local_augment_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import numpy as np

            SCALE = 7

            def augment(x, rng):
                return np.int64(x * SCALE), rng.integers(0, 1000, size=2)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    import cloudpickle

    pickled = cloudpickle.dumps(module.augment)
    assert name.encode() in pickled and b"SCALE" not in pickled, "expected the function to be pickled by reference"

    def build(backend):
        return fl.from_arrays(np.arange(30)).shuffle(seed=3).map(module.augment, backend=backend, workers=2).batch(4)

    expected = [snapshot(b) for b in build("serial")]
    with build("process") as pipe:
        got = [snapshot(b) for b in pipe]
        assert pipe.stats().backend == "process"
    assert got == expected


# A module that runs its pipeline when imported, and defines the map's function: workers import it to find the
# function, and each ran the pipeline again with workers of its own (a fork bomb: ~300 processes in ten minutes
# on 2 cores, seen when an old benchmark script was imported as a module).
NESTING_MODULE = textwrap.dedent(
    """
    import os
    import numpy as np
    import feedline as fl

    def double(x):
        return x * 2

    depth = int(os.environ.get("FEEDLINE_TEST_NESTING", "0"))
    if depth < 2:  # this test's own stop: without feedline's refusal the nesting ends here instead of never
        os.environ["FEEDLINE_TEST_NESTING"] = str(depth + 1)
        with fl.from_arrays(np.arange(8)).map(double, backend=BACKEND, workers=2).batch(4) as pipe:
            print("DONE", depth, [b.tolist() for b in pipe], flush=True)
    """
)


@pytest.mark.parametrize("backend", ["process", None])
@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_a_module_that_iterates_a_pipeline_when_imported_stops_with_the_fix_instead_of_nesting_workers(
        backend, forkserver, tmp_path, monkeypatch, no_leaks):
    name = f"runs_on_import_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(NESTING_MODULE.replace("BACKEND", repr(backend)))
    monkeypatch.setenv("FEEDLINE_FORKSERVER", forkserver)
    monkeypatch.setenv("FEEDLINE_REMEMBER", "0")
    monkeypatch.delenv("FEEDLINE_TEST_NESTING", raising=False)
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
            f"import numpy as np, feedline as fl, {name} as m; "  # the pipeline ran at import; now one that must start processes
            "pipe = fl.from_arrays(np.arange(8)).map(m.double, backend='process', workers=2).batch(4); "
            "print('AFTER', [b.tolist() for b in pipe], flush=True)")
    result = run_python(["-c", code], tmp_path, timeout=120)
    nested = [line for line in result.stdout.splitlines() if line.startswith("DONE") and not line.startswith("DONE 0")]
    assert not nested, f"a worker ran the module's pipeline while loading its own: {nested}"
    if backend == "process":  # the import's own pipeline needs workers that import the module: it stops with the fix
        assert result.returncode != 0 and "DONE 0" not in result.stdout, result.stdout
        assert 'if __name__ == "__main__":' in result.stderr and "could not load the pipeline" in result.stderr, \
            result.stderr[-3000:]
    else:  # threads ran it at import (they import nothing); the later process pipeline's workers refuse to run it again
        assert "DONE 0 [[0, 2, 4, 6], [8, 10, 12, 14]]" in result.stdout, result.stdout + result.stderr[-3000:]
        assert result.returncode != 0 and 'if __name__ == "__main__":' in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize("resource", ["lock", "open_file"])
def test_unpicklable_map_function_raises_type_error_naming_it_before_workers_start(resource, tmp_path, no_leaks):
    if resource == "lock":
        held = threading.Lock()
    else:
        held = open(tmp_path / "log.txt", "w")  # noqa: SIM115 (closed below)

    def guarded_augment(x):
        if resource == "lock":
            with held:
                return x + 1
        held.write(".")
        return x + 1

    pipe = fl.from_arrays(np.arange(16)).map(guarded_augment, backend="process", workers=2).batch(4)
    before = child_pids()
    try:
        with pytest.raises(TypeError) as info:
            for _ in pipe:
                pass
        assert child_pids() == before, "workers were started for a pipeline that cannot be shipped"
        message = str(info.value)
        assert "guarded_augment" in message
        assert "backend='thread'" in message  # says what to do
        # The same pipeline still runs on threads, where nothing is pickled.
        thread_pipe = fl.from_arrays(np.arange(16)).map(guarded_augment, backend="thread", workers=2).batch(4)
        with thread_pipe:
            assert [int(v) for b in thread_pipe for v in b] == list(range(1, 17))
    finally:
        pipe.close()
        if resource == "open_file":
            held.close()


# --------------------------------------------------- shared-memory batches
def _image_pipeline(backend, n=160, workers=2):
    images = np.random.default_rng(0).integers(0, 255, size=(n, 8, 8), dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64)

    def augment(sample, rng):
        image, label = sample["image"], sample["label"]
        noise = rng.integers(0, 3, size=image.shape, dtype=np.uint8)
        return {"image": image + noise, "label": label, "scale": np.float32(rng.random())}

    return fl.from_arrays({"image": images, "label": labels}).shuffle(seed=11).map(augment, backend=backend, workers=workers).batch(4)


def test_process_batches_are_numpy_views_of_shared_memory(no_leaks):
    me = os.getpid()
    with _image_pipeline("process") as pipe:
        count = 0
        for batch in pipe:
            for key in ("image", "label", "scale"):
                arr = batch[key]
                assert isinstance(arr, np.ndarray)
                assert arr.base is not None and not arr.flags.owndata, f"{key} owns its memory: it was copied"
                backing = mapping_of(arr)
                assert backing.startswith(f"/dev/shm/feedline_{me}_w"), f"{key} lives in {backing!r}, not a batch slot"
            # All leaves of a batch share one slot.
            assert len({mapping_of(batch[k]) for k in ("image", "label", "scale")}) == 1
            count += 1
    assert count == 40


def test_process_output_is_bit_identical_to_serial_for_any_worker_count(no_leaks):
    expected = [snapshot(b) for b in _image_pipeline("serial")]
    for workers in (1, 3):
        with _image_pipeline("process", workers=workers) as pipe:
            assert [snapshot(b) for b in pipe] == expected, f"workers={workers}"


@pytest.mark.parametrize("holder", ["numpy", "torch"])
def test_batch_held_by_user_is_not_overwritten_by_later_batches(holder, no_leaks):
    if holder == "torch":
        torch = pytest.importorskip("torch")
    expected = [snapshot(b) for b in _image_pipeline("serial")]
    me = os.getpid()
    held, copies, slots = [], [], set()
    with _image_pipeline("process") as pipe:
        for k, batch in enumerate(pipe):
            slots.add(mapping_of(batch["image"]))
            if k < 6:
                copies.append(snapshot(batch))
                if holder == "numpy":
                    held.append(batch)
                else:  # only the tensors keep the shared memory alive
                    held.append({key: torch.from_numpy(value) for key, value in batch.items()})
            del batch  # reference counting releases a dropped batch at once, so slots really are reused (no gc.collect():
            # late in a full run the heap holds every framework's objects and each collection takes most of a second)
        assert len(slots) < 40, f"slots were never reused ({len(slots)} for 40 batches): the test would prove nothing"
        assert all(s.startswith(f"/dev/shm/feedline_{me}_w") for s in slots)
        now = [snapshot({k: np.asarray(v) for k, v in b.items()}) for b in held]
    assert now == copies, "a batch the user still held was overwritten by a later batch"
    assert copies == expected[:6]


@pytest.fixture
def gc_disabled():
    """Turn the cyclic garbage collector off, as many training loops do."""
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


def test_slow_consumer_keeps_few_slots_in_flight(no_leaks, gc_disabled):
    """Back-pressure: tasks in flight stay within the prefetch depth, and dropped batches' slots are reused.

    The consumer drops every batch right away, so each worker should cycle
    through a handful of slots, whatever the epoch's length. With the cyclic
    garbage collector off, a slot must be released by reference counting
    alone, as soon as the user lets go of the batch.
    """
    me = os.getpid()
    n_batches = 100
    data = np.arange(n_batches * 4 * 256, dtype=np.float32).reshape(n_batches * 4, 256)
    pipe = fl.from_arrays(data).map(lambda row: row * 2, backend="process", workers=2).batch(4)
    with pipe:
        it = iter(pipe)
        executor, depth = testing.executor(pipe), testing.runtime(pipe).depth
        seen, most_in_flight, per_worker = set(), 0, {}
        for k in range(n_batches):
            batch = next(it)
            np.testing.assert_array_equal(batch, data[4 * k : 4 * k + 4] * 2)
            seen.add(mapping_of(batch))
            most_in_flight = max(most_in_flight, executor.outstanding())
            del batch
            time.sleep(0.003)  # a consumer slower than the workers
            if k == 80:
                per_worker = {pid: slot_segments(pid, me) for pid in executor.worker_pids()}
        assert next(it, None) is None
    assert most_in_flight <= depth, f"{most_in_flight} tasks in flight with prefetch depth {depth}"
    bound = 2 * depth + 2 * 2
    assert len(seen) <= bound, (
        f"the consumer saw {len(seen)} distinct batch slots for {n_batches} batches dropped at once "
        f"(bound {bound}): slots are not recycled when the user drops a batch"
    )
    for pid, slots in per_worker.items():
        assert len(slots) <= bound, f"worker {pid} holds {len(slots)} slots after 80 batches"


# ----------------------------------------------- getting data to workers
def test_large_in_memory_array_reaches_workers_once_through_shared_memory(no_leaks):
    me = os.getpid()
    big = np.arange(64 * 2**20 // 8, dtype=np.int64).reshape(2048, 4096)  # 64 MiB
    expected = big.sum(axis=1)

    # What each worker receives holds a segment name, not the data.
    with fl.from_arrays(big).map(lambda row: row.sum(), backend="process", workers=2).batch(64) as pipe:
        it = iter(pipe)
        got = np.concatenate([np.array(b) for b in it])
        executor = testing.executor(pipe)
        assert len(executor.part_bytes) < 64 * 1024, f"{len(executor.part_bytes)} bytes sent to each worker"
        arrays = [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{me}_a")]
        assert len(arrays) == 1, f"expected one shared copy of the array, found {arrays}"
        assert os.stat(f"/dev/shm/{arrays[0]}").st_size >= big.nbytes
        for pid in ready_worker_pids(executor):
            private = rss_anon_bytes(pid)
            assert private < big.nbytes * 3 // 4, f"worker {pid} holds {private >> 20} MiB of private memory: a copy of the array"
            assert any(p.startswith(f"/dev/shm/{arrays[0]}") for p in mapped_paths(pid)), "worker does not map the shared array"
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("kind", ["np_memmap", "np_load_mmap", "memmap_slice"])
def test_memory_mapped_array_is_reopened_by_workers_not_copied(kind, tmp_path, no_leaks):
    me = os.getpid()
    data = np.arange(1024 * 1024, dtype=np.int64).reshape(1024, 1024)  # 8 MiB on disk
    if kind == "np_load_mmap":
        path = tmp_path / "data.npy"
        np.save(path, data)
        array = np.load(path, mmap_mode="r")
    else:
        path = tmp_path / "data.bin"
        data.tofile(path)
        array = np.memmap(path, dtype=np.int64, mode="r", shape=data.shape)
    if kind == "memmap_slice":
        array, data = array[100:900:2], data[100:900:2]

    with fl.from_arrays(array).map(lambda row: row.sum(), backend="process", workers=2).batch(32) as pipe:
        it = iter(pipe)
        got = [np.array(next(it))]
        sent = testing.executor(pipe).part_bytes
        assert len(sent) < 64 * 1024, f"the memory-mapped array was pickled whole ({len(sent)} bytes)"
        copies = [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{me}_a")]
        assert copies == [], "the memory-mapped array was copied into shared memory instead of reopened"
        got = np.concatenate(got + [np.array(b) for b in it])
        executor = testing.executor(pipe)
        assert not [n for n in os.listdir("/dev/shm") if n.startswith(f"feedline_{me}_a")]
        for pid in ready_worker_pids(executor):
            assert str(path) in mapped_paths(pid), f"worker {pid} did not memory-map {path}"
    np.testing.assert_array_equal(got, data.sum(axis=1))


# ---------------------------------------------------------- environment
def _worker_environment(extra_env=None):
    def read_env(_):
        return {var: str(os.environ.get(var)) for var in BLAS_VARS}

    with fl.from_sequence(list(range(4))).map(read_env, backend="process", workers=2) as pipe:
        return list(pipe)


def test_blas_threads_default_to_one_in_workers(monkeypatch, no_leaks):
    for var in BLAS_VARS:
        monkeypatch.delenv(var, raising=False)
    seen = _worker_environment()
    assert len(seen) == 4
    for env in seen:
        assert env == {var: "1" for var in BLAS_VARS}
    for var in BLAS_VARS:
        assert var not in os.environ, f"feedline changed the consumer's own {var}"


def test_blas_thread_setting_of_the_user_is_kept(monkeypatch, no_leaks):
    for var in BLAS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    for env in _worker_environment():
        assert env["OPENBLAS_NUM_THREADS"] == "3"
        assert env["OMP_NUM_THREADS"] == "2"
        assert env["MKL_NUM_THREADS"] == "1"


def _tensorflow_threads_in_a_worker() -> list[tuple[str, int]]:
    """(``TF_NUM_INTRAOP_THREADS``, the worker's thread count) after a TensorFlow op in a process worker."""
    def run_op(_):
        import tensorflow as tf

        tf.image.resize(tf.ones((64, 64, 3)), (32, 32)).numpy()
        return str(os.environ.get("TF_NUM_INTRAOP_THREADS")), len(os.listdir("/proc/self/task"))

    with fl.from_sequence([0]).map(run_op, backend="process", workers=1) as pipe:
        return list(pipe)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="TensorFlow's own pool is one thread on one core")
def test_tensorflow_ops_in_workers_run_on_one_intra_op_thread_unless_the_user_chose(monkeypatch, no_leaks):
    pytest.importorskip("tensorflow")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")
    monkeypatch.delenv("TF_NUM_INTRAOP_THREADS", raising=False)
    [(limited, limited_threads)] = _tensorflow_threads_in_a_worker()
    assert limited == "1"
    assert "TF_NUM_INTRAOP_THREADS" not in os.environ, "feedline set the consumer's own TF_NUM_INTRAOP_THREADS"
    monkeypatch.setenv("TF_NUM_INTRAOP_THREADS", "0")  # 0: TensorFlow picks (a thread per core)
    [(chosen, own_threads)] = _tensorflow_threads_in_a_worker()
    assert chosen == "0", "feedline overrode the user's TF_NUM_INTRAOP_THREADS"
    assert limited_threads < own_threads, "the worker's intra-op pool was not limited to one thread"


# -------------------------------------------------------------- reporting
def test_time_to_first_batch_is_reported_in_stats(no_leaks):
    def slow(x):
        time.sleep(0.05)
        return x

    pipe = fl.from_arrays(np.arange(16)).map(slow, backend="process", workers=2).batch(4)
    with pipe:
        t0 = time.perf_counter()
        it = iter(pipe)
        first = next(it)
        waited = time.perf_counter() - t0
        assert first.tolist() == [0, 1, 2, 3]
        rest = list(it)
        assert len(rest) == 3
        stats = pipe.stats()
        reported = stats.first_batch_seconds
        assert reported is not None
        # One batch is four samples of 50 ms in one worker: the first batch cannot come sooner.
        assert 0.2 <= reported <= waited + 0.01
        assert stats.as_dict()["first_batch_seconds"] == reported
        assert "first batch after" in str(stats)


def test_explicit_process_backend_never_runs_samples_in_the_consumer(no_leaks):
    pipe = fl.from_arrays(np.arange(64)).map(lambda x: os.getpid(), backend="process", workers=2).batch(8)
    with pipe:
        pids = {int(p) for b in pipe for p in b}
    assert os.getpid() not in pids and len(pids) >= 1


# ------------------------------------------------- the GIL beside busy threads
def _double(v):
    return v * 2


@pytest.mark.parametrize("forkserver", ["1", "0"])
def test_gil_switch_interval_is_short_while_process_workers_start_and_the_users_once_they_are_ready(
        forkserver, monkeypatch, switch_interval, no_leaks):
    monkeypatch.setenv("FEEDLINE_FORKSERVER", forkserver)
    pipe = fl.from_arrays(np.arange(16)).map(_double, backend="process", workers=2).batch(4)
    with pipe:
        it = iter(pipe)
        starting = sys.getswitchinterval()  # started, not yet seen ready: readiness is read only while waiting
        out = [int(v) for b in it for v in b]
        assert testing.executor(pipe).wait_ready(60)
        ready = sys.getswitchinterval()
    assert starting < switch_interval, "busy threads would hold each of the start's blocking calls back 5 ms"
    assert ready == switch_interval, "the user's interval is back once every worker is ready"
    assert sys.getswitchinterval() == switch_interval
    assert out == [2 * v for v in range(16)]


def test_gil_switch_interval_the_user_set_shorter_is_kept_through_a_process_pipeline(switch_interval, no_leaks):
    sys.setswitchinterval(0.0001)
    mine = sys.getswitchinterval()
    pipe = fl.from_arrays(np.arange(16)).map(_double, backend="process", workers=2).batch(4)
    with pipe:
        it = iter(pipe)
        starting = sys.getswitchinterval()
        out = [int(v) for b in it for v in b]
    assert starting == mine and sys.getswitchinterval() == mine
    assert out == [2 * v for v in range(16)]


def test_gil_switch_interval_is_back_once_a_thread_pipeline_has_started(switch_interval, no_leaks):
    pipe = fl.from_arrays(np.arange(16)).map(_double, backend="thread", workers=2).batch(4)
    with pipe:
        it = iter(pipe)
        assert sys.getswitchinterval() == switch_interval, "only the set-up's blocking calls need it shorter"
        assert [int(v) for b in it for v in b] == [2 * v for v in range(16)]


def _slow_double(v):
    time.sleep(0.03)  # the consumer waits for every batch
    return v * 2


@pytest.mark.parametrize("backend", ["process", "thread"])
def test_the_consumer_waits_for_process_batches_with_a_short_gil_switch_interval_and_for_threads_with_the_users(
        backend, switch_interval, no_leaks):
    with fl.from_arrays(np.arange(12)).map(_slow_double, backend=backend, workers=2).batch(2) as pipe:
        it = iter(pipe)
        first = [int(v) for v in next(it)]
        assert testing.executor(pipe).wait_ready(60)
        assert sys.getswitchinterval() == switch_interval, "nothing holds it short between batches"
        out, seen = switch_intervals_while_iterating(it)
    assert first + [v for b in out for v in b] == [2 * v for v in range(12)]
    assert seen, "the watcher read nothing"
    if backend == "process":
        assert min(seen) < switch_interval, (
            "the consumer waited for batches at the user's 5 ms interval: beside busy Python threads every hand-off "
            "would wait up to that long")
    else:
        assert set(seen) == {switch_interval}, "thread workers would pay a short interval in GIL switches"
    assert sys.getswitchinterval() == switch_interval


def test_process_workers_start_beside_python_threads_that_hold_the_gil(switch_interval, no_leaks):
    """Two threads spinning in Python while a process pipeline starts and runs: it delivers, and nothing is left behind."""
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            sum(range(1000))

    spinners = [threading.Thread(target=spin) for _ in range(2)]
    for t in spinners:
        t.start()
    try:
        pipe = fl.from_arrays(np.arange(32)).map(_double, backend="process", workers=2).batch(4)
        with pipe:
            out = [int(v) for b in pipe for v in b]
    finally:
        stop.set()
        for t in spinners:
            t.join()
    assert out == [2 * v for v in range(32)]
    assert sys.getswitchinterval() == switch_interval
