"""The Ray backend and Ray interop, on a real local Ray instance (2 CPUs).

One Ray instance serves the module (starting one costs ~5 s); it is shut
down at the end. Every test that runs a pipeline also checks that no
feedline actor survives it (`ray_clean`) and, through ``no_leaks``, that no
child process, thread or segment of ours does. Ray's own processes
(raylet, GCS, its worker pool) are started by the module fixture before any
test, so ``no_leaks`` does not count them; actor processes are children of
Ray's raylet, which is why their end is checked by pid here.

Worker-death tests kill real actor processes with SIGKILL.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest
from conftest import pid_alive, snapshot, wait_for

import feedline as fl
from feedline import SampleError, WorkerError, testing

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(60)


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray instance for the whole module, shut down at the end (a 256 MiB object store: the byte-budget test reads its use)."""
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=2, object_store_memory=256 << 20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def feedline_actors() -> list[str]:
    """Named Ray actors of feedline (the backend names every actor it creates)."""
    return [a["name"] if isinstance(a, dict) else a for a in ray.util.list_named_actors(all_namespaces=True)
            if (a["name"] if isinstance(a, dict) else a).startswith("feedline-")]



@pytest.fixture
def ray_clean(ray_cluster, no_leaks):
    """The test runs on the module's Ray instance and leaves no feedline actor behind."""
    yield
    assert wait_for(lambda: not feedline_actors(), 15), f"feedline actors left alive: {feedline_actors()}"


# --------------------------------------------------------------- helpers
def augment(sample, rng):
    """Depends on the index and on the per-sample rng: any mix-up changes the bytes."""
    i = int(sample)
    return np.int64(i), rng.standard_normal(3)


def uneven(sample, rng):
    """Like `augment`, with costs that make tasks finish out of order."""
    time.sleep(0.004 if int(sample) % 7 == 0 else 0.0)
    return augment(sample, rng)


def pipeline(fn, backend, *, n=120, workers=2, batch=8, seed=5, **options):
    return fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=seed).map(
        fn, backend=backend, workers=workers, **options
    ).batch(batch)


def epochs(pipe, count):
    with pipe:
        return [[snapshot(b) for b in pipe] for _ in range(count)]


def indices(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b[0]).ravel()]


# ---------------------------------------------------------- guarantees
def test_ray_output_is_bit_identical_to_serial_in_order_every_index_once(ray_clean):
    expected = epochs(pipeline(uneven, "serial"), 2)
    pipe = pipeline(uneven, "ray")
    with pipe:
        for epoch in range(2):
            batches = list(pipe)
            assert sorted(indices(batches)) == list(range(120)), f"epoch {epoch}: not every index exactly once"
            assert [snapshot(b) for b in batches] == expected[epoch], f"epoch {epoch}: differs from serial"
        assert pipe.stats().backend == "ray"


def test_cheap_batches_on_ray_go_several_per_task_from_the_second_epoch_with_the_serial_bytes(ray_clean):
    expected = epochs(pipeline(augment, "serial", n=4_000), 2)
    pipe = pipeline(augment, "ray", n=4_000)
    with pipe:
        got = []
        for _ in range(2):
            got.append([snapshot(b) for b in pipe])
            stats = pipe.stats()
    assert got == expected
    assert stats.tasks < stats.batches / 2, f"{stats.tasks} tasks for {stats.batches} cheap batches: one message each"


def test_ray_output_is_the_same_for_one_and_two_actors(ray_clean):
    one = epochs(pipeline(augment, "ray", workers=1), 1)
    two = epochs(pipeline(augment, "ray", workers=2), 1)
    assert one == two


def test_ray_batches_are_read_only_views_of_the_object_store(ray_clean):
    big = fl.from_arrays(np.zeros((64, 64, 64), np.uint8)).map(lambda x: x + 1, backend="ray", workers=1).batch(32)
    with big:
        batch = next(iter(big))
        assert batch.shape == (32, 64, 64) and int(batch[0, 0, 0]) == 1
        assert not batch.flags.writeable, "Ray batches are documented as read-only object-store views"
        with pytest.raises(ValueError, match="read-only"):
            batch[0, 0, 0] = 5


def test_shuffle_and_shard_on_ray_partition_each_epoch_like_serial(ray_clean):
    parts = []
    for rank in range(2):
        base = fl.from_arrays(np.arange(101, dtype=np.int64)).shuffle(seed=9).shard(rank, 2)
        ray_pipe = base.map(augment, backend="ray", workers=2).batch(4)
        serial_pipe = base.map(augment, backend="serial").batch(4)
        got, want = epochs(ray_pipe, 1)[0], epochs(serial_pipe, 1)[0]
        assert got == want, f"rank {rank}: ray shard differs from serial"
        with ray_pipe:
            parts.append(indices(list(ray_pipe)))
    assert not set(parts[0]) & set(parts[1]), "the two ranks share samples"
    assert sorted(parts[0] + parts[1]) == list(range(101)), "the ranks do not cover the epoch"


def test_generator_source_on_ray_matches_serial(ray_clean):
    def shard(s, n):
        for k in range(s, 45, n):
            yield np.int64(k)

    def build(backend):
        return fl.from_generator(shard, num_shards=3).shuffle(seed=2).map(augment, backend=backend, workers=2).batch(4)

    assert epochs(build("ray"), 2) == epochs(build("serial"), 2)


# ------------------------------------- the vocabulary steps (issue 16)
def tokens(sample, rng):
    """A variable-length int64 array (1 to 7 values) from the index and the per-sample rng."""
    i = int(sample)
    return rng.integers(0, 1000, size=1 + i % 7) + i * 1000


def arange_source(n: int, start: int = 0):
    return fl.from_arrays(np.arange(start, start + n, dtype=np.int64))


def vocabulary_halves():
    return [arange_source(40).shuffle(seed=3), arange_source(25, start=100)]


def stream(shard, num_shards):
    for k in range(shard, 90, num_shards):
        yield np.int64(k)


VOCABULARY = {
    "take_skip": lambda b: arange_source(120).shuffle(seed=4).skip(7).take(90).map(augment, backend=b, workers=2).batch(8),
    "repeat": lambda b: arange_source(50).shuffle(seed=4).repeat(2).map(augment, backend=b, workers=2).batch(8),
    "concatenate": lambda b: fl.concatenate(vocabulary_halves()).map(augment, backend=b, workers=2).batch(8),
    "mix": lambda b: fl.mix(vocabulary_halves(), [2, 1], seed=6, stop="never").map(augment, backend=b, workers=2).batch(8),
    "padded_batch": lambda b: arange_source(60).shuffle(seed=4).map(tokens, backend=b, workers=2).padded_batch(
        8, pad_value=-1, lengths=True, mask=True),
    "bucket_by_length": lambda b: arange_source(60).shuffle(seed=4).map(tokens, backend=b, workers=2).bucket_by_length(
        len, [3, 6], [4, 4, 8], lengths=True),
    "window_shuffle": lambda b: fl.from_generator(stream, num_shards=4).shuffle(seed=2, window=16).map(
        augment, backend=b, workers=2).batch(8),
}


@pytest.mark.parametrize("step", sorted(VOCABULARY))
def test_vocabulary_steps_on_ray_give_the_serial_batches_bit_for_bit(ray_clean, step):
    build = VOCABULARY[step]
    expected = epochs(build("serial"), 2)
    assert expected[0] != expected[1], f"{step}: the two epochs should differ (new order and rng draws)"
    pipe = build("ray")
    assert epochs(pipe, 2) == expected, f"{step}: ray batches differ from serial"
    assert pipe.stats().backend == "ray", f"{step}: the map did not run on Ray"


def test_mix_on_ray_resumes_mid_epoch_with_the_serial_rest(ray_clean):
    build = VOCABULARY["mix"]
    expected = epochs(build("serial"), 2)[1]
    pipe = build("ray")
    with pipe:
        it = pipe.epoch(1)
        head = [snapshot(next(it)) for _ in range(3)]
        state = it.state()
        del it
        rest = [snapshot(b) for b in pipe.resume(state)]
    assert head + rest == expected, "a mix resumed on Ray differs from the serial epoch"


# ---------------------------------------------------------------- errors
def fails_on_13(sample):
    if int(sample) == 13:
        raise ValueError("bad sample")
    return sample


def test_sample_error_on_ray_names_the_sample_and_keeps_the_traceback(ray_clean):
    pipe = fl.from_arrays(np.arange(40)).map(fails_on_13, backend="ray", workers=2).batch(4)
    with pipe, pytest.raises(SampleError, match="sample 13") as info:
        list(pipe)
    assert info.value.index == 13
    assert isinstance(info.value.__cause__, ValueError) and "bad sample" in str(info.value.__cause__)


def test_failing_samples_are_skipped_and_counted_on_ray(ray_clean):
    pipe = fl.from_arrays(np.arange(40)).map(fails_on_13, backend="ray", workers=2, on_error="skip").batch(4)
    with pipe, pytest.warns(RuntimeWarning, match="skipped 1 samples"):
        got = [int(v) for b in pipe for v in b]
    assert got == [i for i in range(40) if i != 13]
    assert [index for index, _ in pipe.stats().skipped] == [13]


def test_unpicklable_map_function_is_named_before_actors_start(ray_clean):
    import threading

    lock = threading.Lock()

    def guarded(x):
        with lock:
            return x

    pipe = fl.from_arrays(np.arange(8)).map(guarded, backend="ray", workers=1)
    with pytest.raises(TypeError, match="guarded"):
        iter(pipe)
    assert testing.runtime(pipe) is None


def test_an_actor_refuses_to_run_a_pipeline_while_it_loads_its_own(ray_clean, tmp_path, monkeypatch):
    # the actor imports the module that defines the map's function; a module that also iterates a pipeline when
    # imported would run it in every actor (with process workers: workers without end), so the actor refuses
    name = f"runs_on_import_ray_{os.getpid()}_{time.monotonic_ns()}"
    (tmp_path / f"{name}.py").write_text(
        "import numpy as np\n"
        "import feedline as fl\n"
        "def double(x):\n"
        "    return x * 2\n"
        "RAN = [b.tolist() for b in fl.from_arrays(np.arange(4)).map(double, backend='serial').batch(2)]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = __import__(name)
    assert module.RAN == [[0, 2], [4, 6]]  # in this process the import-time pipeline runs as usual
    pipe = fl.from_arrays(np.arange(8)).map(module.double, backend="ray", workers=1).batch(4)
    with pytest.raises(fl.WorkerError, match='if __name__ == "__main__":'):
        with pipe:
            list(pipe)


# ---------------------------------------------------------- back-pressure
def test_slow_consumer_keeps_at_most_depth_batches_in_flight_on_ray(ray_clean, tmp_path):
    marks = str(tmp_path)

    def record(x):
        open(os.path.join(marks, str(int(x))), "w").close()  # a side channel the actors write
        return x

    depth, batch, taken = 2, 4, 3
    pipe = fl.from_arrays(np.arange(200)).map(record, backend="ray", workers=2).batch(batch).prefetch(depth)
    with pipe:
        it = iter(pipe)
        for _ in range(taken):
            next(it)
        time.sleep(1.5)  # room for unbounded workers to run far ahead; the bound below is not timed
        started = len(os.listdir(marks))
        assert started <= (taken + depth) * batch, f"{started} samples ran with {taken} batches taken and depth {depth}"
        rest = [int(v) for b in it for v in b]
    assert len(rest) == 200 - taken * batch


# ---------------------------------------------------------------- death
def test_killed_ray_actor_is_replaced_and_the_epoch_still_has_every_sample_once(ray_clean):
    def slow(sample, rng):
        time.sleep(0.003)
        return augment(sample, rng)

    expected = epochs(pipeline(slow, "serial", n=160), 1)[0]
    pipe = pipeline(slow, "ray", n=160)
    with pipe:
        it = iter(pipe)
        got = [snapshot(next(it)) for _ in range(3)]
        executor = testing.executor(pipe)
        victim = executor.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        got += [snapshot(b) for b in it]
        assert got == expected, "batches differ from serial after an actor was killed"
        assert it.stats().worker_restarts >= 1, "the killed actor was never noticed and replaced"
        assert victim not in executor.worker_pids()


def test_killed_ray_actor_holding_open_generator_shards_restarts_them_where_they_were(ray_clean):
    def shard(s, n):
        for k in range(s, 160, n):
            time.sleep(0.002)
            yield np.int64(k)

    def build(backend):
        return fl.from_generator(shard, num_shards=4).shuffle(seed=3).map(augment, backend=backend, workers=2).batch(4)

    expected = epochs(build("serial"), 1)[0]
    pipe = build("ray")
    with pipe:
        it = iter(pipe)
        got = [snapshot(next(it)) for _ in range(5)]
        os.kill(testing.worker_pids(pipe)[0], signal.SIGKILL)
        got += [snapshot(b) for b in it]
        assert it.stats().worker_restarts >= 1, "the killed actor was never noticed and replaced"
    assert got == expected, "a generator epoch differs from serial after its actor was killed"


def kills_its_worker_on_37(sample):
    if int(sample) == 37:
        os.kill(os.getpid(), signal.SIGKILL)
    return sample


@pytest.mark.timeout(45)
def test_sample_that_kills_every_actor_fails_with_worker_error_naming_it(ray_clean):
    pipe = fl.from_arrays(np.arange(64)).map(kills_its_worker_on_37, backend="ray", workers=2).batch(8)
    with pipe:
        it = iter(pipe)
        with pytest.raises(WorkerError, match="sample 37") as info:
            list(it)
        assert "died 3 times" in str(info.value)
        # The pipeline stays usable for the next epoch's other samples.
        assert it.stats().worker_restarts >= 3


# -------------------------------------------------------------- shutdown
def test_close_kills_the_actors_and_leaves_none(ray_clean):
    pipe = pipeline(augment, "ray")
    list(pipe)
    executor = testing.executor(pipe)
    pids, names = executor.worker_pids(), executor.actor_names()
    assert pids and len(names) == 2 and set(names) <= set(feedline_actors())
    pipe.close()
    assert not set(names) & set(feedline_actors()), "close() left named actors"
    assert wait_for(lambda: not any(pid_alive(p) for p in pids), 15), "actor processes outlived close()"


def test_dropping_an_unclosed_ray_pipeline_releases_its_actors(ray_clean):
    pipe = pipeline(augment, "ray")
    list(pipe)
    pids = testing.worker_pids(pipe)
    del pipe
    assert wait_for(lambda: not any(pid_alive(p) for p in pids), 15), "actors of a dropped pipeline still run"


# ------------------------------------------------------------------ stats
def test_stats_show_ray_actors_as_workers_with_spans_on_the_consumer_clock(ray_clean):
    pipe = pipeline(uneven, "ray")
    with pipe:
        it = iter(pipe)
        assert testing.wait_ready(pipe, 30), "the actors did not start"
        start = time.perf_counter()
        list(it)
        end = time.perf_counter()
        stats = pipe.stats()
    assert stats.backend == "ray" and stats.workers == 2
    assert set(stats.worker_windows) == {0, 1}, "both actors should appear as workers"
    assert stats.tasks == 15 and stats.task_cpu_seconds > 0
    for _, s, e, number, _ in stats.task_spans:
        assert start <= s <= e <= end, f"task {number} span is not on the consumer's clock"
    assert stats.stage_seconds["uneven"] > 0


# ------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: fl.Ray(num_cpu=1), TypeError, "num_cpu"),
        (lambda: fl.Ray(num_cpus=-1), ValueError, r"num_cpus=-1"),
        (lambda: fl.Ray(num_gpus="one"), ValueError, "num_gpus"),
        (lambda: fl.Ray(memory=0.5), ValueError, "memory"),
        (lambda: fl.Ray(resources=["GPU"]), TypeError, "dict"),
        (lambda: fl.Ray(address=6379), TypeError, "address"),
        (lambda: fl.Ray(max_bytes_in_flight=0), ValueError, r"max_bytes_in_flight=0"),
        (lambda: fl.Ray(max_bytes_in_flight=1.5e9), ValueError, "max_bytes_in_flight"),
        (lambda: fl.Ray(start_timeout=-1), ValueError, r"start_timeout=-1"),
        (lambda: fl.Ray(start_timeout="5"), ValueError, "start_timeout"),
    ],
)
def test_bad_ray_settings_are_rejected_when_written(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_bad_ray_settings_are_rejected_on_the_map_line():
    with pytest.raises(ValueError, match="num_cpus"):
        fl.from_arrays(np.arange(4)).map(lambda x: x, backend=fl.Ray(num_cpus=-1))
    with pytest.raises(ValueError, match=r"choose one of .*fl\.Ray"):
        fl.from_arrays(np.arange(4)).map(lambda x: x, backend="ray-cluster")


def test_ray_settings_are_kept_on_the_step_and_shown():
    settings = fl.Ray(address="auto", num_cpus=0.5, memory=1 << 30)
    pipe = fl.from_arrays(np.arange(4)).map(lambda x: x, backend=settings, workers=2)
    step = pipe.steps[-1]
    assert step.backend == "ray" and step.ray == settings
    assert "backend=fl.Ray(address='auto', memory=1073741824, num_cpus=0.5)" in str(pipe)
    assert fl.from_arrays(np.arange(4)).map(lambda x: x, backend="ray").steps[-1].ray == fl.Ray()
    limits = fl.Ray(max_bytes_in_flight=1 << 30, start_timeout=60)
    assert "backend=fl.Ray(max_bytes_in_flight=1073741824, start_timeout=60)" in str(fl.from_arrays(np.arange(4)).map(lambda x: x, backend=limits))
    assert limits.actor_options() == {}, "feedline's own limits are not passed to Ray's .options()"


# The older spelling, map(backend="ray", ray_address=..., ray_options={...}), still works and warns.
def test_deprecated_ray_options_still_work_and_warn():
    with pytest.warns(DeprecationWarning, match=r"backend=fl\.Ray"):
        pipe = fl.from_arrays(np.arange(4)).map(lambda x: x, backend="ray", ray_options={"num_cpus": 1})
    assert pipe.steps[-1].backend == "ray" and pipe.steps[-1].ray == fl.Ray(num_cpus=1)
    assert "backend=fl.Ray(num_cpus=1)" in str(pipe)
    with pytest.warns(DeprecationWarning, match="deprecated"):
        pipe = fl.from_arrays(np.arange(4)).map(lambda x: x, backend="ray", ray_address="auto", ray_options={"num_gpus": 1})
    assert pipe.steps[-1].ray == fl.Ray(address="auto", num_gpus=1)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"backend": "ray", "ray_options": {"num_cpu": 1}}, ValueError, "num_cpu"),
        ({"backend": "ray", "ray_options": {"num_cpus": -1}}, ValueError, "num_cpus"),
        ({"backend": "ray", "ray_options": {"memory": 0.5}}, ValueError, "memory"),
        ({"backend": "ray", "ray_options": ["num_cpus"]}, TypeError, "dict"),
        ({"backend": "thread", "ray_options": {"num_cpus": 1}}, ValueError, "backend='ray' only"),
        ({"backend": "process", "ray_options": {"num_cpus": 1}}, ValueError, "backend='ray' only"),
        ({"ray_address": "auto"}, ValueError, "backend='ray' only"),
    ],
)
def test_bad_deprecated_ray_options_are_rejected_when_map_is_called(kwargs, error, match):
    with pytest.warns(DeprecationWarning), pytest.raises(error, match=match):
        fl.from_arrays(np.arange(4)).map(lambda x: x, **kwargs)


def test_ray_settings_reach_the_actors(ray_clean):
    def resources(_):
        return np.float64(ray.get_runtime_context().get_assigned_resources().get("CPU", 0.0))

    pipe = fl.from_arrays(np.arange(4)).map(resources, backend=fl.Ray(num_cpus=0.5), workers=2).batch(4)
    with pipe:
        assert next(iter(pipe)).tolist() == [0.5] * 4


@pytest.mark.timeout(30)  # the old behaviour waited 120 s
def test_actor_request_no_node_can_meet_fails_fast_naming_the_resource(ray_clean, caplog):
    pipe = fl.from_arrays(np.arange(8)).map(lambda x: x, backend=fl.Ray(num_cpus=64, start_timeout=1), workers=1).batch(4)
    with pipe, caplog.at_level("WARNING", logger="feedline"), pytest.raises(WorkerError, match="no room") as info:
        list(pipe)
    assert "CPU=64 (largest node: 2)" in caplog.text
    assert "each asks for CPU=64" in str(info.value) and "CPU: 2 in all, 2 free" in str(info.value)
    assert testing.runtime(pipe) is None, "no actor may be started for a request that cannot be met"


@pytest.mark.timeout(30)  # the old behaviour waited 120 s
def test_second_open_pipeline_without_free_cpus_fails_fast_saying_what_holds_them(ray_clean):
    first = pipeline(augment, "ray", workers=None)  # one actor per CPU: both of the instance's CPUs
    second = pipeline(augment, "ray", workers=1)
    with first:
        next(iter(first))
        assert testing.wait_ready(first, 30)
        with pytest.raises(WorkerError, match="no room") as info:
            iter(second)
        message = str(info.value)
        assert "CPU: 2 in all, 0 free" in message, message
        assert "2 actors of 1 open feedline pipeline in this process (2 CPUs)" in message, message
        assert "pipe.close()" in message
    # Closing the first frees the CPUs: the second now starts and runs.
    with second:
        assert sorted(indices(list(second))) == list(range(120))


def test_object_store_bytes_stay_under_the_budget_with_large_batches_and_a_slow_consumer(ray_clean):
    from ray._private.internal_api import memory_summary  # Ray's own count of object-store bytes (no public API without the dashboard)

    capacity = ray.cluster_resources()["object_store_memory"]

    def needed_mib() -> float:
        """MiB of the store that Ray must keep (finished batches, batches in use); only these are ever spilled."""
        summary = memory_summary(address=ray.get_runtime_context().gcs_address, stats_only=True)  # ours: other Ray instances may run
        line = next(x for x in summary.splitlines() if x.startswith("Plasma memory usage"))
        return float(re.search(r"([0-9.]+)% needed", line).group(1)) / 100 * capacity / 2**20

    def image(i):
        return np.full((512, 512, 3), int(i) % 251, np.uint8)  # 768 KiB

    budget = 20 << 20  # a batch of 8 is 6 MiB: the budget holds 3 of them
    peaks = {}
    for limit in (budget, None):
        pipe = fl.from_arrays(np.arange(96)).map(image, backend=fl.Ray(max_bytes_in_flight=limit), workers=2).batch(8).prefetch(16)
        seen, usage = [], []
        with pipe:
            for batch in pipe:
                time.sleep(0.05)  # a slow trainer: without the byte bound, 16 batches (96 MiB) pile up
                usage.append(needed_mib())
                seen += [int(v) for v in batch[:, 0, 0, 0]]
            peaks[limit] = (testing.executor(pipe).budget.peak, max(usage))
        assert seen == [i % 251 for i in range(96)]
    (counted, measured), (unbounded_counted, unbounded_measured) = peaks[budget], peaks[None]
    assert counted <= budget, f"feedline counted {counted} bytes in flight, over the budget {budget}"
    assert measured <= budget / 2**20 + 1, f"Ray's object store needed {measured:.1f} MiB, over the {budget >> 20} MiB budget"
    # Without the byte bound the same window holds far more: the bound above is what kept it small.
    assert unbounded_measured > budget / 2**20 + 1 and unbounded_counted > budget, peaks


def test_batches_larger_than_the_byte_budget_and_kept_by_the_consumer_still_make_the_whole_epoch(ray_clean):
    def row(i):
        return np.full(20_000, int(i), np.int64)  # 160 KB: a batch of 8 (1.25 MB) lives in the object store

    pipe = fl.from_arrays(np.arange(64)).map(row, backend=fl.Ray(max_bytes_in_flight=1), workers=2).batch(8).prefetch(8)
    with pipe:
        kept = list(pipe)  # every batch stays referenced: all of them count against the 1-byte budget
        budget = testing.executor(pipe).budget
        assert budget.held >= 64 * 20_000 * 8, "the kept batches should still be counted"
    assert [int(v) for b in kept for v in b[:, 0]] == list(range(64)), "one task at a time, but every sample once, in order"
    del kept


def run_python(code: str, timeout=90, **env_vars: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | env_vars
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=env, check=False)


def test_import_feedline_does_not_import_ray_and_a_missing_ray_names_the_extra():
    result = run_python("""
        import sys
        sys.modules["ray"] = None  # as if Ray were not installed
        import feedline as fl, numpy as np
        assert "ray" not in [m.split(".")[0] for m in sys.modules if sys.modules[m] is not None]
        try:
            list(fl.from_arrays(np.arange(4)).map(lambda x: x, backend="ray"))
        except ImportError as e:
            print("ERROR:", e)
    """)
    assert result.returncode == 0, result.stderr
    assert "pip install 'feedline[ray]'" in result.stdout


@pytest.mark.timeout(90)
def test_backend_ray_without_ray_init_starts_a_local_instance_and_says_so():
    # Ray's temporary folder still names a cluster that is gone (a killed run's, or an old `ray start`'s):
    # a plain ray.init() would try to join it; feedline starts its own instance. A short path: Ray's sockets live there.
    ray_tmp = tempfile.mkdtemp(prefix="fl-ray-", dir="/tmp")
    os.makedirs(os.path.join(ray_tmp, "ray"))
    with open(os.path.join(ray_tmp, "ray", "ray_current_cluster"), "w") as f:
        f.write("127.0.0.1:9")  # nothing listens there
    try:
        result = run_python("""
            import numpy as np, feedline as fl
            from feedline import testing
            pipe = fl.from_arrays(np.arange(20)).map(lambda x: x * 2, backend="ray", workers=1).batch(10)
            print("OUT", [b.tolist() for b in pipe])
            print("PIDS", testing.worker_pids(pipe))
        """, timeout=80, RAY_TMPDIR=ray_tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "OUT [[0, 2, 4, 6, 8, 10, 12, 14, 16, 18], [20, 22, 24, 26, 28, 30, 32, 34, 36, 38]]" in result.stdout
    assert "feedline started a local Ray instance" in result.stderr
    pids = eval(result.stdout.split("PIDS", 1)[1].strip())
    assert wait_for(lambda: not any(pid_alive(p) for p in pids), 15), "actors outlived the interpreter that started Ray"


# ------------------------------------------------------------- Ray Data
def test_from_ray_dataset_reads_every_row_once_and_matches_thread_backend(ray_clean):
    import ray.data

    rows = [{"image": np.full((4, 4), i, np.float32), "label": i} for i in range(50)]
    ds = ray.data.from_items(rows, override_num_blocks=4)

    def prepare(row, rng):
        return row["image"] + rng.standard_normal((4, 4)).astype(np.float32), np.int64(row["label"])

    def build(backend):
        return fl.from_ray_dataset(ds).shuffle(seed=4).map(prepare, backend=backend, workers=2).batch(8)

    auto = build(None)
    with auto:
        got = [snapshot(b) for b in auto]
        assert testing.runtime(auto).backend == "ray", "a Ray Dataset source should run on Ray actors by default"
        labels = sorted(int(v) for b in auto for v in b[1])
    assert labels == list(range(50))
    assert got == epochs(build("thread"), 1)[0]
    assert len(fl.from_ray_dataset(ds)) == 50
    with pytest.raises(fl.FeedlineError, match="process workers"):
        iter(build("process"))


# ------------------------------------------------------------- Ray Train
@pytest.mark.timeout(120)
def test_shard_inside_ray_train_workers_splits_the_epoch_between_them(ray_clean, tmp_path):
    pytest.importorskip("torch")
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out = str(tmp_path)

    def train_loop(config):
        import numpy as np
        import ray.train
        import torch.distributed as dist

        import feedline as fl

        base = fl.from_arrays(np.arange(50)).shuffle(seed=1)
        by_torch = [int(v) for b in base.shard().batch(4) for v in b]  # TorchTrainer set up torch.distributed
        dist.destroy_process_group()
        by_ray_train = [int(v) for b in base.shard().batch(4) for v in b]  # now from ray.train.get_context()
        rank = ray.train.get_context().get_world_rank()
        with open(f"{config['out']}/rank{rank}.txt", "w") as f:
            f.write(f"{by_torch}\n{by_ray_train}\n")

    TorchTrainer(
        train_loop, train_loop_config={"out": out},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(storage_path=os.path.join(out, "store"), name="shard"),
    ).fit()
    shares = []
    for rank in range(2):
        with open(os.path.join(out, f"rank{rank}.txt")) as f:
            by_torch, by_ray_train = (eval(line) for line in f.read().split("\n")[:2])
        assert by_torch == by_ray_train, f"rank {rank}: Ray Train's context gives a different shard than torch.distributed"
        expected = [int(v) for b in fl.from_arrays(np.arange(50)).shuffle(seed=1).shard(rank, 2, even="drop").batch(4) for v in b]
        assert by_ray_train == expected
        shares.append(by_ray_train)
    assert not set(shares[0]) & set(shares[1]) and len(shares[0]) == len(shares[1]) == 25


@pytest.mark.parametrize("how", ["break", "superseded"])
def test_a_left_epoch_stops_on_ray_actors_and_the_next_gets_every_sample_once(tmp_path, ray_clean, how):
    """Queued actor calls of the left epoch never run; running ones stop at a sample (Ray's cancel travels as a message)."""
    from sample_log import leave_after, logged_pipeline, samples_begun

    log, n, batch, workers = tmp_path / "begun.log", 48, 8, 2
    with logged_pipeline(log, "ray", n=n, batch=batch, workers=workers, seconds=0.1) as pipe:
        following = leave_after(pipe, 1, how)
        at_leave = samples_begun(log)
        delivered = indices_of(following)
        after = samples_begun(log)
    leave_after.kept = None
    assert sorted(delivered) == list(range(n))
    left_over = after - at_leave - n
    # Without cancelling: the rest of the running tasks and the queued ones (up to 3 tasks of 8 samples per actor).
    assert left_over <= 2 * workers, f"{left_over} samples of the left epoch ran on the actors after it was left ({how})"


def indices_of(batches) -> list[int]:
    return [int(v) for b in batches for v in np.asarray(b).ravel()]
