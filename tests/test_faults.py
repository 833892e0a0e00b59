"""Fault injection: worker death, failing samples, interrupts, shutdown, resumption.

Real processes and real signals: workers are killed with SIGKILL, crash in C
(a NULL read through ctypes), call ``os._exit``; consumers get SIGINT and
SIGKILL in subprocesses. Each test checks exactly-once delivery with the
same bytes as a serial run (or the named error), and that nothing leaks
(the ``no_leaks`` fixture, and /dev/shm and /proc for subprocesses).

Worker-death detection times are printed (run with ``-rP`` to see them).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest
from conftest import child_pids, memory_files, snapshot, wait_for

import feedline as fl
from feedline import FeedlineError, SampleError, WorkerError, testing


# --------------------------------------------------------------- helpers
def augment(sample, rng):
    """The reference map: the output depends on the index and on the per-sample rng."""
    i = int(sample)
    return np.int64(i), rng.standard_normal(3)


def indexed_pipeline(fn, backend, *, n=96, workers=2, seed=5, batch=4, on_error="raise"):
    return fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=seed).map(
        fn, backend=backend, workers=workers, on_error=on_error
    ).batch(batch)


def serial_epochs(n_epochs, **kwargs):
    pipe = indexed_pipeline(augment, "serial", **kwargs)
    with pipe:
        return [[snapshot(b) for b in pipe] for _ in range(n_epochs)]


def process_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def is_live_worker(pid: int) -> bool:
    """True while ``pid`` is a running feedline worker (not gone, not a zombie, not reused)."""
    state = process_state(pid)
    if state is None or state == "Z":
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            command = f.read()
    except OSError:
        return False
    # A fresh interpreter runs _main; a forked worker carries its fork server's command line.
    return b"feedline.backends.process._main" in command or b"feedline.backends.process._forkserver" in command


def segments_of(consumer_pid: int) -> list[str]:
    """Names of the consumer's segments, in /dev/shm, in the spill folder and memory files (where /dev/shm was full)."""
    names = []
    for folder in testing.segment_folders():
        if os.path.isdir(folder):
            names += [n for n in os.listdir(folder) if n.startswith(f"feedline_{consumer_pid}_")]
    return sorted(names) + sorted(memory_files(f"feedline_{consumer_pid}_"))


def remove_segments_of(consumer_pid: int) -> None:
    """Remove what a failed test's consumer left, wherever it is."""
    for name in segments_of(consumer_pid):
        if not name.startswith("/memfd:"):  # memory files go with the processes that hold them
            testing.remove_segment(name)


class PidWatcher:
    """Samples an executor's worker pids every millisecond, to time death detection.

    The consumer notices a death inside ``next()``; the watcher sees the dead
    worker's pid leave ``worker_pids()`` (replaced) at that moment.
    """

    def __init__(self, executor):
        self.executor = executor
        self.changes: list[tuple[float, frozenset]] = [(time.time(), frozenset(executor.worker_pids()))]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="test-pid-watcher", daemon=True)
        self._thread.start()

    def _run(self):
        self.errors = []
        while not self._stop.wait(0.001):
            try:
                pids = frozenset(self.executor.worker_pids())
            except Exception as e:  # an instrument that fails says so in the assertion below
                self.errors.append(repr(e))
                continue
            if pids != self.changes[-1][1]:
                self.changes.append((time.time(), pids))

    def detected_at(self, pid: int, after: float) -> float | None:
        for when, pids in self.changes:
            if when >= after and pid not in pids:
                return when
        return None

    def stop(self):
        self._stop.set()
        self._thread.join()


def record_detection(what: str, seconds: float) -> None:
    print(f"detection time {what}: {seconds * 1000:.1f} ms")


# ------------------------------------------------------------ worker death
def _die(how: str) -> None:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "segfault":
        ctypes.string_at(0)  # a NULL read in C: SIGSEGV
    elif how == "exit":
        os._exit(3)
    raise AssertionError(f"unknown death {how}")


def dying_augment(marker_dir: str, index: int, how: str, once: bool):
    """``augment``, except that the worker dies on ``index`` (the first time only, if ``once``)."""

    def fn(sample, rng):
        i = int(sample)
        if i == index:
            marker = os.path.join(marker_dir, f"died_{i}")
            if not (once and os.path.exists(marker)):
                with open(marker, "a") as f:
                    f.write(f"{time.time()!r} {os.getpid()}\n")
                _die(how)
        return np.int64(i), rng.standard_normal(3)

    return fn


@pytest.mark.parametrize("how", ["sigkill", "segfault", "exit"])
def test_worker_dying_once_mid_batch_is_replaced_and_work_redone(how, tmp_path, no_leaks):
    """Every index exactly once, same bytes as serial, and batches held from before the death intact."""
    expected = serial_epochs(2)
    pipe = indexed_pipeline(dying_augment(str(tmp_path), 37, how, once=True), "process")
    with pipe:
        it = iter(pipe)
        watcher = PidWatcher(testing.executor(pipe))
        try:
            held = [next(it) for _ in range(3)]
            held_copies = [snapshot(b) for b in held]
            rest = [snapshot(b) for b in it]
        finally:
            watcher.stop()
        got = held_copies + rest
        assert [snapshot(b) for b in held] == held_copies, "batches received before the death were changed"
        del held
        assert got == expected[0]
        indices = np.concatenate([np.frombuffer(s[0][2], np.int64) for s in got])
        assert sorted(indices.tolist()) == list(range(96))
        assert pipe.stats().worker_restarts == 1
        # The replacement serves the next epoch normally.
        assert [snapshot(b) for b in pipe] == expected[1]
        final_pids = set(testing.executor(pipe).worker_pids())
    records = (tmp_path / "died_37").read_text().splitlines()
    assert len(records) == 1, f"the worker died {len(records)} times on a sample that kills only once"
    died_at, died_pid = float(records[0].split()[0]), int(records[0].split()[1])
    detected = watcher.detected_at(died_pid, died_at)
    if detected is None and len(watcher.changes) == 1 and not watcher.errors:
        # Seen once in CI (and once in ~30 local runs): the 1 ms watcher thread recorded no change at all, though
        # the restart above was counted. Not explained yet; the replacement itself is still checked here.
        assert died_pid not in final_pids and len(final_pids) == 2, (died_pid, final_pids)
        return
    assert detected is not None, (f"the dead worker was never replaced: died {died_pid} at {died_at}, "
                                  f"pid sets {watcher.changes}, watcher errors {watcher.errors}")
    record_detection(f"{how} inside map", detected - died_at)


def test_workers_killed_at_random_points_in_several_epochs_lose_nothing(no_leaks):
    """SIGKILL from outside, at a random batch of each of three epochs."""
    slow = 0.002

    def slow_augment(sample, rng):
        time.sleep(slow)
        return augment(sample, rng)

    expected = serial_epochs(3)
    rng = np.random.default_rng(2024)
    pipe = indexed_pipeline(slow_augment, "process")
    with pipe:
        for epoch in range(3):
            it = iter(pipe)
            kill_after = int(rng.integers(1, 12))
            got = []
            watcher = None
            for k, batch in enumerate(it):
                got.append(snapshot(batch))
                if k == kill_after:
                    executor = testing.executor(pipe)
                    watcher = PidWatcher(executor)
                    victim = int(rng.choice(executor.worker_pids()))
                    killed_at = time.time()
                    os.kill(victim, signal.SIGKILL)
            watcher.stop()
            assert got == expected[epoch], f"epoch {epoch}: batches differ after a worker was killed"
            detected = watcher.detected_at(victim, killed_at)
            assert detected is not None, f"epoch {epoch}: the killed worker was never replaced"
            record_detection(f"SIGKILL from outside, epoch {epoch}", detected - killed_at)
            assert not is_live_worker(victim)


@pytest.mark.parametrize(("how", "reason"), [("segfault", "SIGSEGV"), ("exit", "exited with code 3"), ("sigkill", "SIGKILL")])
def test_sample_that_kills_every_worker_fails_with_worker_error_naming_it(how, reason, tmp_path, no_leaks):
    """Bounded retries, then a WorkerError naming the index and the exit; never a hang."""
    fn = dying_augment(str(tmp_path), 13, how, once=False)
    pipe = fl.from_arrays(np.arange(40, dtype=np.int64)).map(fn, backend="process", workers=2).batch(4)
    got = []
    started = time.monotonic()
    with pipe:
        with pytest.raises(WorkerError) as info:
            for batch in pipe:
                got.append(batch[0].tolist())
        elapsed = time.monotonic() - started
        # A hang guard, not a speed check: bounded retries end in a few seconds, so 30 s means it hung.
        assert elapsed < 30, f"hang: {elapsed:.1f} s without giving up on a sample that kills every worker"
    message = str(info.value)
    assert "sample 13" in message and reason in message
    assert got == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]], "batches before the bad one must arrive, in order"
    attempts = len((tmp_path / "died_13").read_text().splitlines())
    assert 2 <= attempts <= 5, f"the crashing sample was tried {attempts} times"
    record_detection(f"give up after {attempts} {how} deaths (total)", elapsed)


def test_crashing_file_sample_error_names_the_file(tmp_path, no_leaks):
    paths = []
    for k in range(12):
        path = tmp_path / f"img_{k:03d}.bin"
        path.write_bytes(bytes([k]) * 16)
        paths.append(str(path))
    bad = paths[6]

    def decode(path):
        if path == bad:
            ctypes.string_at(0)
        with open(path, "rb") as f:
            return np.frombuffer(f.read(), np.uint8).copy()

    pipe = fl.from_files(paths).map(decode, backend="process", workers=2).batch(3)
    with pipe, pytest.raises(WorkerError) as info:
        list(pipe)
    assert "sample 6" in str(info.value) and bad in str(info.value) and "SIGSEGV" in str(info.value)


def test_worker_restarts_are_reported_per_epoch_in_stats(tmp_path, no_leaks):
    pipe = indexed_pipeline(dying_augment(str(tmp_path), 5, "sigkill", once=True), "process", n=24)
    with pipe:
        for _ in pipe:  # the iterator is gone after the loop; pipe.stats() must still know
            pass
        assert pipe.stats().worker_restarts == 1, "a worker restart in this epoch is not reported by pipe.stats()"
        for _ in pipe:
            pass
        assert pipe.stats().worker_restarts == 0, "an epoch without deaths reports restarts of an earlier epoch"


# ----------------------------------------------------- failing samples
FAILING = {13, 110, 207, 304}  # 1 % of 400


def flaky_augment(sample, rng):
    i = int(sample)
    if i in FAILING:
        raise ValueError(f"corrupt sample {i}")
    return np.int64(i), rng.standard_normal(3)


def test_failing_sample_with_on_error_raise_names_index_and_traceback(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(400, dtype=np.int64)).map(flaky_augment, backend=backend, workers=2).batch(8)
    got = []
    with pipe:
        with pytest.raises(SampleError) as info:
            for batch in pipe:
                got.append(batch[0].tolist())
        error = info.value
        assert error.index == 13
        assert "sample 13" in str(error) and "ValueError" in str(error) and "corrupt sample 13" in str(error)
        original = error.__cause__
        assert isinstance(original, ValueError) and str(original) == "corrupt sample 13", "the original exception is not chained"
        remote = original.__cause__
        assert isinstance(remote, fl.RemoteTraceback), "the worker's traceback is not attached"
        assert "flaky_augment" in str(remote) and "raise ValueError" in str(remote)
        assert got == [list(range(8))], "the batch before the failing one must arrive"
        # The pipeline is still usable: the next epoch reaches the same error.
        with pytest.raises(SampleError):
            list(pipe)


def test_failing_samples_with_on_error_skip_are_dropped_counted_and_warned_once(backend, no_leaks):
    pipe = fl.from_arrays(np.arange(400, dtype=np.int64)).shuffle(seed=9).map(
        flaky_augment, backend=backend, workers=2, on_error="skip"
    ).batch(8)
    reference = fl.from_arrays(np.arange(400, dtype=np.int64)).shuffle(seed=9).map(augment, backend="serial")
    with reference:
        expected_rows = [snapshot(sample) for sample in reference if int(sample[0]) not in FAILING]
    with pipe:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            it = iter(pipe)
            batches = [[np.array(leaf) for leaf in b] for b in it]
        skip_warnings = [w for w in caught if issubclass(w.category, RuntimeWarning) and "skipped" in str(w.message)]
        assert len(skip_warnings) == 1, f"expected one summary warning, got {[str(w.message) for w in caught]}"
        assert "4 samples" in str(skip_warnings[0].message)
        stats = it.stats()
        assert sorted(index for index, _ in stats.skipped) == sorted(FAILING)
        assert all("corrupt sample" in reason for _, reason in stats.skipped)
        assert sorted(pipe.stats().as_dict()["skipped_indices"]) == sorted(FAILING)
    sizes = [len(b[0]) for b in batches]
    assert sizes == [8] * 49 + [4], "skipped samples must be filled from the next ones, keeping full batches"
    rows = [snapshot((ids[r], values[r])) for ids, values in batches for r in range(len(ids))]
    assert rows == expected_rows, "kept samples must be exactly the others, once, in order, with the same bytes"


def test_failing_samples_with_on_error_callable_are_replaced(backend, no_leaks):
    def replacement(index, error):
        return np.int64(-index), np.full(3, 1.0 if isinstance(error, ValueError) else 0.0)

    pipe = fl.from_arrays(np.arange(400, dtype=np.int64)).map(
        flaky_augment, backend=backend, workers=2, on_error=replacement
    ).batch(8)
    with pipe:
        batches = [(np.array(i), np.array(v)) for i, v in pipe]
    ids = np.concatenate([i for i, _ in batches])
    values = np.concatenate([v for _, v in batches])
    assert len(ids) == 400
    for k in range(400):
        if k in FAILING:
            assert ids[k] == -k, "the replacement function did not get the failing sample's index"
            assert values[k].tolist() == [1.0, 1.0, 1.0], "the replacement function did not get the exception"
        else:
            assert ids[k] == k


def _write_images(directory, n=12, truncated=(3, 8)):
    """Small PNG and JPEG files (alternating); the ``truncated`` ones are cut in half."""
    image_module = pytest.importorskip("PIL.Image")
    rng = np.random.default_rng(1)
    paths = []
    for k in range(n):
        fmt = "PNG" if k % 2 == 0 else "JPEG"
        path = directory / f"img_{k:02d}.{fmt.lower()}"
        image_module.fromarray(rng.integers(0, 255, (16, 16, 3), dtype=np.uint8)).save(path, fmt)
        if k in truncated:
            data = path.read_bytes()
            path.write_bytes(data[: len(data) // 2])
        paths.append(str(path))
    return paths


def decode_image(sample):
    from PIL import Image

    path, label = sample
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB")), np.int64(label)


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_truncated_png_and_jpeg_files_follow_on_error(on_error, tmp_path, no_leaks):
    paths = _write_images(tmp_path)  # 3 is a JPEG, 8 a PNG
    labels = np.arange(len(paths), dtype=np.int64)
    pipe = fl.from_files(paths, labels=labels).map(decode_image, backend="process", workers=2, on_error=on_error).batch(4)
    with pipe:
        if on_error == "raise":
            with pytest.raises(SampleError) as info:
                list(pipe)
            assert info.value.index == 3 and info.value.where == paths[3]
            assert paths[3] in str(info.value) and "OSError" in str(info.value)
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            it = iter(pipe)
            got = [int(v) for _, y in it for v in y]
        assert got == [k for k in range(12) if k not in (3, 8)]
        assert sorted(index for index, _ in it.stats().skipped) == [3, 8]


# ------------------------------------------------- interrupts and shutdown
LONG_RUN = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    import feedline as fl
    from feedline import testing

    mode = sys.argv[1]

    def work(x):
        if mode == "busy" and int(x[0]) >= 64:
            time.sleep(120)            # workers stuck in user code
        elif mode != "idle":
            time.sleep(0.02)
        return x

    data = np.arange(400_000, dtype=np.int64).reshape(100_000, 4)   # 3 MB: shared with workers
    pipe = fl.from_arrays(data).map(work, backend="process", workers=2).batch(8)
    it = iter(pipe)
    if mode != "starting":             # "starting": report at once, while workers start up
        first = next(it)
    print("PIDS", os.getpid(), *testing.worker_pids(pipe), flush=True)
    if mode == "starting":
        time.sleep(120)
    if mode == "idle":
        time.sleep(120)                # consumer busy elsewhere, workers idle
    for batch in it:
        pass
    """
)


def _start_long_run(tmp_path, mode):
    script = tmp_path / "long_run.py"
    script.write_text(LONG_RUN)
    temporary = tmp_path / "temporary"  # the consumer's temporary folder, looked at after it is killed
    temporary.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(script), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(temporary)},
        start_new_session=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("PIDS"):
        proc.kill()
        raise AssertionError(f"the pipeline did not start: {line!r} {proc.stderr.read()}")
    consumer, *workers = (int(p) for p in line.split()[1:])
    assert consumer == proc.pid and len(workers) == 2
    assert segments_of(consumer), "expected the consumer's shared array segment while running"
    return proc, workers


def _kill_leftovers(workers):
    for pid in workers:
        if is_live_worker(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize(("target", "mode"), [("consumer", "run"), ("process_group", "run"), ("process_group", "busy")])
def test_ctrl_c_stops_pipeline_with_keyboard_interrupt_and_leaves_nothing(target, mode, tmp_path, no_leaks):
    """SIGINT while the consumer waits for batches (workers running, or stuck in a long map)."""
    proc, workers = _start_long_run(tmp_path, mode)
    try:
        time.sleep(0.3)
        sent = time.monotonic()
        if target == "consumer":
            proc.send_signal(signal.SIGINT)
        else:  # what a terminal's Ctrl-C does: every process in the foreground group
            os.killpg(proc.pid, signal.SIGINT)
        try:
            _, stderr = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("the consumer did not exit within 20 s of SIGINT")
        exited = time.monotonic() - sent
        assert "KeyboardInterrupt" in stderr, stderr
        assert proc.returncode in (-signal.SIGINT, 1, 130), proc.returncode
        assert wait_for(lambda: not any(is_live_worker(p) for p in workers), 10), "workers outlived the interrupted consumer"
        assert wait_for(lambda: not segments_of(proc.pid), 10), f"segments left: {segments_of(proc.pid)}"
        print(f"SIGINT to {target} ({mode}): consumer exited after {exited:.2f} s")
    finally:
        _kill_leftovers(workers)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("workers_state", ["starting", "idle", "busy"])
def test_sigkilled_consumer_leaves_no_workers_or_segments(workers_state, tmp_path, no_leaks):
    """Workers still starting, idle (they learn of the death from their connection), or busy (watchdog).

    The idle case is repeated: its clean-up can race with the kernel's
    tear-down of the dead consumer, so a single run can miss a leak.
    """
    for attempt in range(3 if workers_state == "idle" else 1):
        proc, workers = _start_long_run(tmp_path, workers_state)
        try:
            if workers_state != "starting":
                time.sleep(0.3)
            killed = time.monotonic()
            proc.kill()
            proc.communicate(timeout=10)
            assert wait_for(lambda workers=workers: not any(is_live_worker(p) for p in workers), 15), (
                f"workers {[p for p in workers if is_live_worker(p)]} outlived their SIGKILLed consumer"
            )
            gone = time.monotonic() - killed
            assert wait_for(lambda pid=proc.pid: not segments_of(pid), 5), (
                f"attempt {attempt}: segments left by the killed consumer: {segments_of(proc.pid)}"
            )
            if sys.platform.startswith("linux"):  # the workers' socket has no file there (abstract namespace)
                left = [p.name for p in (tmp_path / "temporary").iterdir()]
                assert left == [], f"attempt {attempt}: the killed consumer left {left} in its temporary folder"
            print(f"consumer SIGKILLed ({workers_state} workers): workers gone after {gone:.2f} s")
        finally:
            _kill_leftovers(workers)
            remove_segments_of(proc.pid)  # do not leave a failed test's segments behind
            shutil.rmtree(tmp_path / "temporary", ignore_errors=True)  # the next attempt makes it again


def test_breaking_out_early_then_next_epoch_is_complete(backend, no_leaks):
    expected = serial_epochs(3)
    pipe = indexed_pipeline(augment, backend)
    with pipe:
        for k, batch in enumerate(pipe):
            assert snapshot(batch) == expected[0][k]
            if k == 2:
                break
        assert [snapshot(b) for b in pipe] == expected[1]
        it = iter(pipe)  # dropped after one batch, without close()
        assert snapshot(next(it)) == expected[2][0]
        del it
        gc.collect()
        assert [snapshot(b) for b in pipe.epoch(2)] == expected[2]


def test_dropping_an_unclosed_pipeline_releases_its_workers(no_leaks):
    before = child_pids()
    pipe = indexed_pipeline(augment, "process")
    it = iter(pipe)
    next(it)
    workers = child_pids() - before
    assert len(workers) == 2
    del pipe, it
    gc.collect()
    assert wait_for(lambda: not (child_pids() & workers), 10), "workers of a garbage-collected pipeline are still running"


def test_superseded_iterator_raises_clear_error(backend, no_leaks):
    expected = serial_epochs(2)
    with indexed_pipeline(augment, backend) as pipe:
        old = iter(pipe)
        assert snapshot(next(old)) == expected[0][0]
        new = iter(pipe)
        with pytest.raises(FeedlineError, match="superseded"):
            next(old)
        assert [snapshot(b) for b in new] == expected[1]


# ------------------------------------------------------------ resumption
def _flaky_every_fifth(sample, rng):
    if int(sample) % 5 == 2:
        raise ValueError("corrupt")
    return augment(sample, rng)


def _shard_factory(shard, num_shards):
    for j in range(shard + 5):
        yield np.int64(100 * shard + j)


def build_resumable(variant: str, backend: str, workers: int):
    if variant == "generator":
        source = fl.from_generator(_shard_factory, num_shards=3)
        return source.shuffle(seed=4).map(augment, backend=backend, workers=workers).batch(4)
    source = fl.from_arrays(np.arange(23 if variant == "plain" else 30, dtype=np.int64)).shuffle(seed=4)
    if variant == "filter":
        source = source.filter(lambda s: int(s) % 3 != 0)
    fn, on_error = (_flaky_every_fifth, "skip") if variant == "skip" else (augment, "raise")
    return source.map(fn, backend=backend, workers=workers, on_error=on_error).batch(4)


@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
@pytest.mark.parametrize("variant", ["plain", "filter", "skip", "generator"])
def test_resume_from_every_checkpoint_yields_exactly_the_remaining_batches(variant, backend, no_leaks):
    workers_cycle = {"serial": [1], "thread": [2, 1, 3], "process": [2, 1, 3]}[backend]
    with build_resumable(variant, "serial", 1) as reference_pipe:
        reference = [snapshot(b) for b in reference_pipe.epoch(1)]
    with build_resumable(variant, backend, 2) as pipe:
        it = pipe.epoch(1)
        states, full = [it.state()], []
        for batch in it:
            full.append(snapshot(batch))
            states.append(it.state())
        full_skipped = sorted(i for i, _ in it.stats().skipped)
    assert full == reference, "the uninterrupted run differs from serial"
    assert len(full) >= 5
    for k, state in enumerate(states):
        text = json.dumps(state)
        assert len(text) < 4096, f"state is {len(text)} bytes"
        workers = workers_cycle[k % len(workers_cycle)]
        with build_resumable(variant, backend, workers) as fresh:
            resumed = fresh.resume(json.loads(text))
            rest = [snapshot(b) for b in resumed]
            skipped = sorted(i for i, _ in resumed.stats().skipped)
        assert rest == full[k:], f"resume after {k} batches with {workers} workers gave different batches"
        if variant == "skip":
            assert skipped == full_skipped, f"after {k} batches: skipped {skipped}, uninterrupted run skipped {full_skipped}"


_TERM_SCRIPT = """
import sys, time
import numpy as np
import feedline as fl

def slow(x):
    time.sleep(0.05)
    return x

pipe = fl.from_arrays(np.arange(400)).map(slow, backend="process", workers=4).batch(4)
epoch = iter(pipe)
if sys.argv[1] == "running":
    next(epoch)
print("READY", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("start", ["forkserver", "fresh"])
@pytest.mark.parametrize("when", ["starting", "running"])
def test_sigterm_to_the_whole_process_group_leaves_no_segment(when, start, tmp_path):
    """A job scheduler's SIGTERM reaches the consumer and every worker at once: nothing may stay in /dev/shm."""
    script = tmp_path / "consumer.py"
    script.write_text(_TERM_SCRIPT)
    env = {**os.environ, "FEEDLINE_FORKSERVER": "1" if start == "forkserver" else "0"}
    proc = subprocess.Popen([sys.executable, str(script), when], stdout=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        if when == "starting":
            assert wait_for(lambda: segments_of(proc.pid), 10), "the workers never created their status segments"
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
        assert wait_for(lambda: not segments_of(proc.pid), 5), f"segments left: {segments_of(proc.pid)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        remove_segments_of(proc.pid)
