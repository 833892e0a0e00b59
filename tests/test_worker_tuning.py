"""More workers than cores when tasks wait on I/O: the worker count grows only when it should, and nothing changes in the output."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import feedline as fl
from feedline import testing


def waits_on_io(v):
    time.sleep(0.004)  # a file or network read: off the CPU
    return v


def burns_cpu(v):
    total = 0
    for k in range(4000):
        total += k % 3
    return np.int64(v) + np.int64(total > 0)


def _grown(stats) -> list[str]:
    return [d for d in stats.decisions if d.startswith("workers ")]


def _counts_per_batch(pipe):
    """The outputs and the worker count after each batch of one epoch, and the epoch's stats."""
    with pipe:
        out, counts = [], []
        for b in pipe:
            out.append(b.tolist())
            counts.append(testing.runtime(pipe).workers)
        stats = pipe.stats()
        stats.busy_windows = testing.runtime(pipe).worker_tuner.busy_windows
        return out, counts, stats


def _epoch(pipe):
    with pipe:
        out = [b.tolist() for b in pipe]
        stats = pipe.stats()
        stats.busy_windows = testing.runtime(pipe).worker_tuner.busy_windows
        return out, stats


def _skip_if_the_machine_was_busy(stats):
    """Growth needs idle CPUs (tasks waiting for a CPU also use little of it): on a loaded machine it is held back."""
    if stats.busy_windows and not [d for d in stats.decisions if d.startswith("workers ")]:
        pytest.skip("other programs kept this machine's CPUs busy: the worker count was (rightly) held back")


@pytest.mark.parametrize("backend", [None, "thread", "process"])
def test_workers_waiting_on_io_grow_beyond_the_cores_and_deliver_every_sample_once(backend, no_leaks):
    out, stats = _epoch(fl.from_arrays(np.arange(1200)).map(waits_on_io, backend=backend).batch(4))
    if stats.backend == "serial":
        pytest.skip("one core: the automatic choice runs serially")
    assert out == [list(range(k, k + 4)) for k in range(0, 1200, 4)]
    _skip_if_the_machine_was_busy(stats)
    grown = [d for d in stats.decisions if d.startswith("workers ")]
    assert grown, stats.decisions
    assert stats.workers > stats.cores and "wait on I/O" in grown[0]
    assert stats.workers <= 8 * stats.cores


def test_workers_given_by_the_user_are_never_changed(no_leaks):
    out, stats = _epoch(fl.from_arrays(np.arange(600)).map(waits_on_io, backend="thread", workers=2).batch(4))
    assert len(out) == 150 and stats.workers == 2
    assert not [d for d in stats.decisions if d.startswith("workers ")]


def test_cpu_bound_workers_are_not_multiplied(no_leaks):
    out, stats = _epoch(fl.from_arrays(np.arange(400)).map(burns_cpu, backend="process").batch(4))
    assert out == [list(range(k + 1, k + 5)) for k in range(0, 400, 4)]
    if stats.cpu_share is not None and stats.cpu_share < 0.6:
        pytest.skip(f"other programs took the CPUs: CPU-bound tasks ran only {stats.cpu_share:.0%} of their time, "
                    "which looks like waiting (run this on a quiet machine)")
    assert not [d for d in stats.decisions if d.startswith("workers ")], stats.decisions
    assert stats.workers == stats.cores


def test_grown_process_workers_are_all_closed(no_leaks):
    pipe = fl.from_arrays(np.arange(1200)).map(waits_on_io, backend="process").batch(4)
    with pipe:
        for _ in pipe:
            pass
        grown = pipe.stats().workers
        if testing.runtime(pipe).worker_tuner.busy_windows and grown <= 2:
            pytest.skip("other programs kept this machine's CPUs busy: the worker count was (rightly) held back")
        pids = testing.worker_pids(pipe)
        assert len(pids) == grown > 2
    # no_leaks checks that every one of them is gone and nothing is left in /dev/shm


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_workers_waiting_on_io_reach_four_per_core_within_a_few_batches(backend, no_leaks):
    """Judged from the first tasks and grown by the tasks' wall/CPU ratio, not doubled window after window."""
    out, counts, stats = _counts_per_batch(fl.from_arrays(np.arange(800)).map(waits_on_io, backend=backend).batch(4))
    assert out == [list(range(k, k + 4)) for k in range(0, 800, 4)]
    _skip_if_the_machine_was_busy(stats)
    if stats.busy_windows:
        pytest.skip("other programs kept this machine's CPUs busy for a while: growth was (rightly) held back")
    assert max(counts[:6]) >= 4 * stats.cores, (counts[:12], stats.decisions)  # the old ramp: x2 after 8 batches
    assert stats.workers <= 8 * stats.cores and "wait on I/O" in _grown(stats)[0], stats.decisions


class _OneRequestAtATime:
    """A server that answers one request per ``seconds``, in arrival order, however many clients wait (a rate limit)."""

    def __init__(self, seconds: float):
        self.seconds, self.free_at, self.lock = seconds, 0.0, threading.Lock()

    def request(self) -> None:
        with self.lock:
            start = max(time.perf_counter(), self.free_at)
            self.free_at = start + self.seconds
        time.sleep(max(0.0, start + self.seconds - time.perf_counter()))


def test_growth_that_does_not_raise_the_workers_rate_is_undone_and_says_why(no_leaks):
    server = _OneRequestAtATime(0.004)  # more workers only queue behind each other

    def waits_for_a_rate_limited_server(v):
        server.request()
        return v

    pipe = fl.from_arrays(np.arange(600)).map(waits_for_a_rate_limited_server, backend="thread").batch(4)
    out, counts, stats = _counts_per_batch(pipe)
    assert out == [list(range(k, k + 4)) for k in range(0, 600, 4)]
    _skip_if_the_machine_was_busy(stats)
    undone = [d for d in stats.decisions if "changed the workers' rate" in d]
    if stats.busy_windows and not undone:
        pytest.skip("other programs kept this machine's CPUs busy: the growth came too late to be judged")
    grown = [d for d in _grown(stats) if "wait on I/O" in d]
    assert len(grown) == 1, stats.decisions  # it grew once (tasks wait, using no CPU) ...
    assert undone and undone[0].startswith(f"workers {max(counts)} -> {counts[0]}: growing it"), stats.decisions
    assert counts[0] < max(counts) and counts[-1] == counts[0], counts  # ... saw no gain, and went back


def _augment(v, rng):
    time.sleep(0.002)
    return v * 1000 + rng.integers(0, 1000)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_grown_worker_count_gives_the_same_batches_as_a_fixed_one(backend, no_leaks):
    def epoch(workers):
        pipe = fl.from_arrays(np.arange(480)).shuffle(seed=7).map(_augment, backend=backend, workers=workers).batch(8)
        return _counts_per_batch(pipe)

    grown, counts, stats = epoch(None)
    fixed, _, _ = epoch(2)
    assert grown == fixed
    if stats.backend == "serial":
        pytest.skip("one core: the automatic choice runs serially")
    _skip_if_the_machine_was_busy(stats)
    assert max(counts) > stats.cores, stats.decisions  # the comparison is against a count that did change


def _depth_after_one_window(task_ms: float, waited: bool = True, messages=None) -> tuple[int, list]:
    from feedline.engine import DepthTuner, Stats

    tuner = DepthTuner(depth=4, workers=2, enabled=True, messages=messages)
    stats = Stats("process", 2, 4, "test")
    decisions = []
    for _ in range(DepthTuner.WINDOW):
        stats.tasks += 1
        stats.task_seconds += task_ms / 1000
        stats.wall_seconds += task_ms / 1000
        stats.wait_seconds += task_ms / 1000 * (0.9 if waited else 0.05)  # the consumer's share of it spent waiting
        decision = tuner.observe(waited, False, np.zeros((256, 3, 32, 32), np.uint8), stats)
        if decision:
            decisions.append(decision)
    return tuner.depth, decisions


def test_short_tasks_get_more_of_them_queued_per_worker_once():
    depth, decisions = _depth_after_one_window(task_ms=1.0)
    assert depth == 8 and len(decisions) == 1 and "1.0 ms" in decisions[0]  # 4 ms of 1 ms tasks per worker


def test_long_tasks_or_a_consumer_that_does_not_wait_keep_the_depth():
    assert _depth_after_one_window(task_ms=20.0) == (4, [])
    assert _depth_after_one_window(task_ms=1.0, waited=False) == (4, [])


def test_short_tasks_queue_deeper_only_where_a_task_is_a_message():
    """Threads take tasks from an in-process queue: a deeper one only keeps more batches alive (slower store reads)."""
    assert _depth_after_one_window(task_ms=1.0, messages=lambda: False) == (4, [])
    assert _depth_after_one_window(task_ms=1.0, messages=lambda: True)[0] == 8


def test_short_store_reads_on_threads_keep_two_tasks_per_thread(tmp_path, no_leaks):
    from feedline.store import StoreWriter

    with StoreWriter(tmp_path / "s") as w:
        w.write({"x": np.zeros((4096, 3, 16, 16), np.uint8)})
    with fl.from_store(tmp_path / "s").shuffle(seed=0).batch(64) as pipe:
        for _ in range(3):
            for _ in pipe:
                pass
        stats, runtime = pipe.stats(), testing.runtime(pipe)
        assert not any(d.startswith("prefetch depth") for d in stats.decisions), stats.decisions
        assert runtime.depth == max(2, 2 * runtime.workers), (runtime.depth, runtime.workers, stats.decisions)


def test_a_thread_pool_that_shrinks_finishes_what_its_other_threads_hold_and_lets_them_go(no_leaks):
    from feedline.backends import make_executor
    from feedline.worker import Task

    part = fl.from_arrays(np.arange(64)).map(waits_on_io, backend="thread").batch(4).plan.part
    pool = make_executor("thread", part, 6, cores=1)  # cores: the report's denominator only
    try:
        for k in range(12):  # two tasks queued on every thread
            pool.submit((0, k), Task(0, k, indices=np.arange(4 * k, 4 * k + 4)))
        assert pool.shrink(2) and pool.workers == 2
        assert not pool.grow(4), "a pool that shrank does not grow again"
        for k in range(12, 16):
            pool.submit((0, k), Task(0, k, indices=np.arange(4 * k, 4 * k + 4)))
        events, deadline = [], time.monotonic() + 30
        while len(events) < 16 and time.monotonic() < deadline:
            events += pool.wait(0.05)
        assert sorted(e.key[1] for e in events) == list(range(16)), "every task held before the shrink is finished"
        late = {e.result.worker for e in events if e.key[1] >= 12}
        assert late <= {0, 1}, f"tasks after the shrink ran on threads {late}"
        deadline = time.monotonic() + 10
        while sum(t.is_alive() for t in pool.threads) > 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sum(t.is_alive() for t in pool.threads) == 2, "the threads let go should end"
    finally:
        pool.close()


class _Counters:
    """The epoch's counters as the worker tuner reads them (`feedline.Stats`), advanced a batch at a time."""

    def __init__(self):
        self.task_cpu_seconds = self.task_seconds = self.wait_seconds = self.wall_seconds = 0.0
        self.tasks = self.samples = 0
        self.task_spans = []

    def batch(self, *, task_seconds: float, cpu_share: float, wall: float, rows: int = 4) -> None:
        self.tasks += 1
        self.task_seconds += task_seconds
        self.task_cpu_seconds += cpu_share * task_seconds
        self.wall_seconds += wall
        self.wait_seconds += 0.9 * wall
        self.samples += rows
        self.task_spans.append((0, 0.0, task_seconds, self.tasks, rows))


def test_a_growth_after_which_fewer_samples_arrive_is_undone_even_if_tasks_look_faster():
    from feedline.engine import WorkerTuner

    tuner, stats = WorkerTuner(2, 2, enabled=True, idle=lambda: None), _Counters()  # the machine's load plays no part here
    asked = None
    for _ in range(8):  # tasks at 10 % CPU while the consumer waits: more workers are asked for
        stats.batch(task_seconds=0.01, cpu_share=0.1, wall=0.005)
        asked = tuner.observe(stats, None) or asked
    assert asked and asked > 2
    tuner.workers = asked  # granted, as the runtime does
    answers = []
    for _ in range(3 * asked):  # a window to settle, then one judged: each task as short, but samples arrive half as fast
        stats.batch(task_seconds=0.01, cpu_share=0.1, wall=0.01)
        answers.append(tuner.observe(stats, None))
    assert 2 in answers, answers
    assert "samples delivered -50%" in tuner.stopped, tuner.stopped


def test_no_worker_count_is_asked_for_while_a_trial_runs_two_backends():
    # Sixteen GIL-bound threads measured in the automatic choice's trial each use 1/16 of a core while they run,
    # as threads waiting on I/O do. The tuner asked for 128 workers then, and the process workers that won the
    # trial were given them (591 samples/s where sixteen deliver 2,200; 16 cores, benchmarks/server_check.py).
    from feedline.engine import Stats, WorkerTuner

    calls = iter(range(1, 10**6))
    tuner = WorkerTuner(workers=16, cores=16, enabled=True,
                        idle=lambda: (lambda k: (90 * k, 100 * k))(next(calls)))  # the machine: 90 % idle
    stats = Stats("auto", 16, 32, "test", cores=16)

    def batch(steady: bool):
        for worker in range(16):  # a task per worker and batch: 16 ms long, 1 ms of it on a CPU; the consumer waits
            stats.task_spans.append((worker, 0.0, 0.016, stats.tasks, 8))
            stats.tasks += 1
            stats.task_seconds += 0.016
            stats.task_cpu_seconds += 0.001
        stats.samples += 8
        stats.wall_seconds += 0.016
        stats.wait_seconds += 0.016
        return tuner.observe(stats, batch_bytes=64, steady=steady)

    assert [batch(steady=False) for _ in range(40)] == [None] * 40
    asked = [batch(steady=True) for _ in range(4)]  # the same tasks from one backend: they do wait
    assert any(n is not None and n > 16 for n in asked), asked


def test_process_workers_grow_only_as_far_as_the_available_memory_holds(no_leaks):
    # Grown for I/O to 8 per core, process workers that each import a large library would fill a container's
    # memory (128 workers of a few hundred MB in 8 GB): the OOM killer then ends every one, and the job.
    with testing.memory_seen(worker_bytes=100 << 20, available=400 << 20):  # half of it holds two more workers
        out, counts, stats = _counts_per_batch(fl.from_arrays(np.arange(800)).map(waits_on_io, backend="process").batch(4))
    assert out == [list(range(k, k + 4)) for k in range(0, 800, 4)]
    _skip_if_the_machine_was_busy(stats)
    grown = _grown(stats)
    assert grown, stats.decisions
    assert grown[0].startswith(f"workers {stats.cores} -> {stats.cores + 2}: "), grown[0]  # not 4 per core or more
    assert f"capped at {stats.cores + 2}, not" in grown[0] and "100 MiB of its own and 400 MiB are available" in grown[0]


def test_no_room_for_one_more_process_worker_keeps_the_count_and_says_why(no_leaks):
    with testing.memory_seen(worker_bytes=100 << 20, available=150 << 20):  # half of it: not one more worker
        out, counts, stats = _counts_per_batch(fl.from_arrays(np.arange(400)).map(waits_on_io, backend="process").batch(4))
    assert out == [list(range(k, k + 4)) for k in range(0, 400, 4)]
    _skip_if_the_machine_was_busy(stats)
    assert set(counts) == {stats.cores}, counts
    stays = [d for d in stats.decisions if d.startswith("worker count stays")]
    assert stays and f"capped at {stats.cores}" in stays[0], stats.decisions


def test_available_memory_is_the_smaller_of_the_machines_and_the_cgroups_room(tmp_path):
    (tmp_path / "meminfo").write_text("MemTotal:       32000000 kB\nMemAvailable:   20000000 kB\n")
    (tmp_path / "self").write_text("0::/job\n")
    (tmp_path / "cg" / "job").mkdir(parents=True)
    (tmp_path / "cg" / "job" / "memory.max").write_text(f"{8 << 30}\n")
    (tmp_path / "cg" / "job" / "memory.current").write_text(f"{3 << 30}\n")
    paths = dict(cgroup_root=str(tmp_path / "cg"), own_cgroup=str(tmp_path / "self"), meminfo=str(tmp_path / "meminfo"))
    assert testing.available_memory(**paths) == 5 << 30  # the container's 8 GiB limit, 3 used
    (tmp_path / "cg" / "job" / "memory.max").write_text("max\n")
    assert testing.available_memory(**paths) == 20000000 * 1024  # no limit: the machine's
    assert testing.available_memory(str(tmp_path / "no"), str(tmp_path / "no"), str(tmp_path / "no")) is None


def test_a_container_memory_limit_is_the_memory_available_to_its_processes():
    """In a real cgroup limited to 256 MiB (a container's memory limit), the room is under 256 MiB, not the machine's."""
    from cgroups import cgroup_limited, run_in

    machine = testing.available_memory()
    if machine is None or machine < 1 << 30:
        pytest.skip("this machine's available memory is unknown or under 1 GiB: a 256 MiB limit would not show")
    limit = 256 << 20
    with cgroup_limited({"memory": {"memory.limit_in_bytes": str(limit)}}, {"memory.max": str(limit)}) as folder:
        run = run_in(folder, "from feedline import testing; print(testing.available_memory())")
    assert run.returncode == 0, run.stderr
    inside = int(run.stdout.strip())
    assert 0 < inside < limit, (inside, limit)  # the limit minus what the child itself already uses
    assert inside < machine // 4


_GROWS_IN_A_CONTAINER = """
import time, numpy as np, feedline as fl
from feedline import testing

def waits_on_io(v):
    time.sleep(0.004)
    return v

with fl.from_arrays(np.arange(800)).map(waits_on_io, backend="process").batch(4) as pipe:
    out = [b.tolist() for b in pipe]
    stats = pipe.stats()
assert out == [list(range(k, k + 4)) for k in range(0, 800, 4)], "every batch, right, in order"
print("\\n".join(d for d in stats.decisions if d.startswith("worker")))
"""


def test_process_workers_grown_in_a_memory_limited_container_are_capped_by_what_it_has_left():
    """A real cgroup limited to 200 MiB: each growth is capped at half the room it measures, and says so, once."""
    import re

    from cgroups import cgroup_limited, run_in

    limit = 200 << 20
    with cgroup_limited({"memory": {"memory.limit_in_bytes": str(limit)}}, {"memory.max": str(limit)}) as folder:
        run = run_in(folder, _GROWS_IN_A_CONTAINER)
    assert run.returncode == 0, run.stderr[-3000:]  # not killed for memory, every batch delivered
    grown = [line for line in run.stdout.splitlines() if line.startswith("workers ")]
    if not grown:
        pytest.skip(f"the worker count did not grow here (a busy machine holds it back): {run.stdout}")
    caps = [re.search(r"capped at (\d+), not \d+: each process worker holds ([\d,]+) MiB of its own and ([\d,]+) MiB "
                      r"are available", line) for line in grown]
    assert caps[0] is not None, grown[0]  # 200 MiB cannot hold 8 workers per core
    for line, cap in zip(grown, caps):
        assert line.count("(capped at") <= 1, line  # each growth's own cap, not the earlier ones too
        if cap is not None:
            old = int(line.split()[1])
            count, each, room = int(cap[1]), int(cap[2].replace(",", "")), int(cap[3].replace(",", ""))
            assert room < 200 and count - old <= 0.5 * room / max(each, 1) + 1, line
