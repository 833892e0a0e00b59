"""A full /dev/shm (Docker's default is 64 MB): segments go to memory files or spill to files, or a clear error, or threads.

Each test runs a child interpreter in a private mount namespace whose
/dev/shm is a small tmpfs (``unshare -m``, root only; skipped elsewhere).
Batches of 8 images of 512x512x3 need 6 MiB slots, a 4 MB /dev/shm has no
room for one. Before, the worker writing a batch died of SIGBUS three times
and the epoch ended blaming the sample. Now a segment that finds no room
is a memory file (Linux ``memfd_create``: not limited by /dev/shm, never on
a disk), or, with those off (``FEEDLINE_MEMFD=0``, as on macOS), a file in
the spill folder (``FEEDLINE_SPILL_DIR``, default a folder of the temporary
directory), with one warning; with both off or full, process workers set by
hand raise `SharedMemoryFull` and the automatic choice runs threads.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

_CHILD = """
import os, sys, numpy as np, feedline as fl
backend = None if sys.argv[1] == "auto" else sys.argv[1]

def image(v):
    total = 0
    for k in range(120000):  # ~4 ms of Python: processes beat threads plainly (with ~1.5 ms, 1 run in ~40 kept threads)
        total += k % 3
    return np.full((512, 512, 3), v % 251, np.uint8)

pipe = fl.from_arrays(np.arange(480)).map(image, backend=backend).batch(8)
try:
    with pipe:
        firsts = [int(b[:, 0, 0, 0].sum()) for b in pipe]
        stats = pipe.stats()
except fl.SharedMemoryFull as e:
    print("SharedMemoryFull|" + str(e))
    sys.exit(0)
assert firsts == [sum(v % 251 for v in range(k, k + 8)) for k in range(0, 480, 8)], "every batch, right, in order"
print("ran|" + stats.backend + "|" + stats.decision)
"""


def _run_child(setting: str, small_shm: bool, env: dict, child: str = _CHILD, size: str = "4m", spill_size: str = ""):
    """``(the child's last line split at "|", its stderr)``; ``spill_size``: the spill folder is a tmpfs that small."""
    command = [sys.executable, "-c", child, setting]
    if small_shm:
        mounts = f"mount -t tmpfs -o size={size} tmpfs /dev/shm"
        if spill_size:
            mounts += f' && mkdir -p "$FEEDLINE_SPILL_DIR" && mount -t tmpfs -o size={spill_size} tmpfs "$FEEDLINE_SPILL_DIR"'
        command = ["unshare", "-m", "sh", "-c", f'{mounts} && exec "$0" "$@"', *command]
    run = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    return tuple(run.stdout.strip().splitlines()[-1].split("|")), run.stderr


def _run(setting: str, small_shm: bool, env: dict, child: str = _CHILD, size: str = "4m") -> tuple[str, ...]:
    return _run_child(setting, small_shm, env, child, size)[0]


@pytest.fixture
def child_env(tmp_path):
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs `unshare -m` (root on Linux) to give a child a small /dev/shm")
    return {**os.environ, "FEEDLINE_REMEMBER": str(tmp_path / "choices.json"), "FEEDLINE_SPILL_DIR": str(tmp_path / "spill"),
            "FEEDLINE_MEMFD": "0"}  # the spill folder's tests; the memory files' tests turn them on


@pytest.fixture
def memfd_env(child_env, tmp_path):
    """Memory files on; the spill folder cannot be made (as on a read-only file system), so nothing can go there."""
    if not hasattr(os, "memfd_create"):
        pytest.skip("memory files (memfd_create) are Linux only")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the spill folder would go")
    return {**child_env, "FEEDLINE_MEMFD": "1", "FEEDLINE_SPILL_DIR": str(blocker / "spill")}


def test_process_workers_on_a_full_dev_shm_hand_batches_over_through_the_spill_folder_and_warn_once(child_env, tmp_path):
    (kind, backend, _), stderr = _run_child("process", small_shm=True, env=child_env)
    assert (kind, backend) == ("ran", "process"), stderr[-2000:]  # every batch, right, in order (the child checks)
    assert stderr.count("feedline: /dev/shm has no room for what process workers hand over") == 1, stderr[-2000:]
    assert f"through files in {tmp_path / 'spill'} instead" in stderr and "--shm-size" in stderr, stderr[-2000:]
    assert os.listdir(tmp_path / "spill") == [], "no file left behind"


def test_process_workers_set_by_hand_raise_an_error_that_says_so_where_nothing_can_spill(child_env):
    child_env["FEEDLINE_SPILL_DIR"] = "0"  # spilling off
    kind, message = _run("process", small_shm=True, env=child_env)
    assert kind == "SharedMemoryFull", message
    assert "shared memory is full: a batch slot needs 6.0 MiB and /dev/shm has" in message, message
    assert "--shm-size" in message and "backend='thread'" in message, "it says what to do"


def test_a_spill_folder_without_room_either_is_shared_memory_full_naming_both(child_env, tmp_path):
    (kind, message), _ = _run_child("process", small_shm=True, env=child_env, spill_size="4m")
    assert kind == "SharedMemoryFull", message
    assert f"and the spill folder {tmp_path / 'spill'} (FEEDLINE_SPILL_DIR) has" in message, message


def test_the_automatic_choice_on_a_full_dev_shm_runs_on_threads_and_says_why(child_env):
    child_env["FEEDLINE_REMEMBER"] = "0"
    child_env["FEEDLINE_SPILL_DIR"] = "0"  # spilling off: the fallback the automatic choice has left
    kind, backend, decision = _run("auto", small_shm=True, env=child_env)
    assert (kind, backend) == ("ran", "thread"), decision
    assert "process workers cannot hand batches over: shared memory is full" in decision, decision


def test_a_remembered_process_verdict_on_a_full_dev_shm_runs_on_threads(child_env):
    for _ in range(2):  # two trials agree on processes (the work holds the GIL), as on a machine with room
        kind, backend, decision = _run("auto", small_shm=False, env=child_env)
        if backend != "process":
            pytest.skip(f"the trial chose {backend} on this machine: {decision}")
    child_env["FEEDLINE_SPILL_DIR"] = "0"
    kind, backend, decision = _run("auto", small_shm=True, env=child_env)
    assert "at once, remembered" in decision, decision  # it started on the remembered verdict ...
    assert (kind, backend) == ("ran", "thread"), decision  # ... and went to threads, not to an error
    assert "shared memory is full" in decision, decision


_SMALL_BATCHES = """
import os, sys, numpy as np, feedline as fl
rows = np.lib.format.open_memmap(os.path.join(sys.argv[1], "rows.npy"), "w+", np.uint8, (20000, 4096))
rows[:, 0] = np.arange(20000) % 251
rows.flush()
pipe = fl.from_arrays(rows).map(lambda r: r, backend="process", workers=2).batch(256)  # batches of 1 MiB
with pipe:
    for epoch in range(3):
        firsts = [int(b[:, 0].astype(np.int64).sum()) for b in pipe.epoch(epoch)]
        assert firsts == [sum(v % 251 for v in range(k, min(k + 256, 20000))) for k in range(0, 20000, 256)], epoch
print("ran|" + pipe.stats().backend)
"""


def test_process_workers_on_a_small_dev_shm_reuse_the_slots_handed_back_instead_of_failing(child_env, tmp_path):
    # 12 MiB of /dev/shm holds the slots two workers need at once for 1 MiB batches, but not the few extra ones a
    # worker made when the consumer had not yet handed its slots back: one epoch in two ended in SharedMemoryFull.
    child_env["FEEDLINE_SPILL_DIR"] = "0"  # the wait alone, no spilling
    for _ in range(3):
        assert _run(str(tmp_path), small_shm=True, env=child_env, child=_SMALL_BATCHES, size="12m") == ("ran", "process")


_BIG_SOURCE = """
import sys, numpy as np, feedline as fl
try:
    with fl.from_arrays(np.zeros((2048, 4096), np.uint8)).map(lambda r: r, backend=None if sys.argv[1] == "auto" else sys.argv[1]).batch(64) as pipe:
        print("ran|" + str(sum(len(b) for b in pipe)) + "|" + pipe.stats().decision)
except fl.SharedMemoryFull as e:
    print("SharedMemoryFull|" + str(e))
"""


def test_a_source_array_too_big_for_dev_shm_spills_or_is_shared_memory_full_not_a_pickling_error(child_env):
    # An 8 MiB in-memory array goes to the workers through /dev/shm: 4 MiB of it was reported as a TypeError
    # saying the pipeline "cannot be sent to worker processes", with advice about open files and locks.
    (kind, rows, _), stderr = _run_child("process", small_shm=True, env=child_env, child=_BIG_SOURCE)
    assert (kind, rows) == ("ran", "2048"), stderr[-2000:]  # spilled: a file the workers map
    assert "feedline: /dev/shm has no room" in stderr
    child_env["FEEDLINE_SPILL_DIR"] = "0"
    kind, message = _run("process", small_shm=True, env=child_env, child=_BIG_SOURCE)
    assert kind == "SharedMemoryFull", message
    assert "an array of the source, for the workers, needs 8.0 MiB" in message and "--shm-size" in message, message
    child_env["FEEDLINE_REMEMBER"] = "0"
    kind, rows, decision = _run("auto", small_shm=True, env=child_env, child=_BIG_SOURCE)
    assert (kind, rows) == ("ran", "2048"), decision  # the automatic choice keeps every row (threads, or no workers)


def test_files_a_killed_consumer_left_in_the_spill_folder_go_at_the_next_spill(child_env, tmp_path):
    spill = tmp_path / "spill"
    spill.mkdir()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    (spill / f"feedline_{gone}_w3_0").write_bytes(b"x" * 4096)  # a slot whose consumer and workers were killed
    (spill / "notes.txt").write_text("not ours")
    (kind, backend, _), stderr = _run_child("process", small_shm=True, env=child_env)
    assert (kind, backend) == ("ran", "process"), stderr[-2000:]
    assert sorted(os.listdir(spill)) == ["notes.txt"]


@pytest.mark.timeout(600)
def test_fault_suite_passes_with_every_segment_spilled(child_env, tmp_path):
    """Killed, dying, replaced and many workers with 128 KB of /dev/shm: segments spilled, and every file gone after."""
    here = os.path.dirname(os.path.abspath(__file__))
    tests = ["tests/test_faults.py", "tests/test_scale.py::test_close_returns_and_leaves_nothing_with_many_workers"]
    command = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=128k tmpfs /dev/shm && exec "$0" "$@"',
               sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-W", "ignore::RuntimeWarning", *tests]
    done = subprocess.run(command, env=child_env, capture_output=True, text=True, timeout=580, cwd=os.path.dirname(here))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert (tmp_path / "spill").is_dir(), "nothing spilled: the test no longer tests the spill folder"
    assert os.listdir(tmp_path / "spill") == [], "no spilled file left behind"


def test_a_spill_folder_that_cannot_be_made_is_named_in_the_error(child_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder would go")  # as a read-only file system refuses it
    child_env["FEEDLINE_SPILL_DIR"] = str(blocker / "spill")
    kind, message = _run("process", small_shm=True, env=child_env)
    assert kind == "SharedMemoryFull", message
    assert f"the spill folder {blocker / 'spill'} (FEEDLINE_SPILL_DIR) could not be made" in message, message
    assert "set FEEDLINE_SPILL_DIR to a writable folder with room" in message, message


# ------------------------------------------------------------------ memory files (memfd), the first fallback
def test_process_workers_on_a_full_dev_shm_hand_batches_over_in_memory_files_with_no_warning(memfd_env):
    # A read-only root file system (Kubernetes' readOnlyRootFilesystem) and Docker's 64 MB /dev/shm: the spill
    # folder cannot be made either, and process workers set by hand raised SharedMemoryFull.
    (kind, backend, _), stderr = _run_child("process", small_shm=True, env=memfd_env)
    assert (kind, backend) == ("ran", "process"), stderr[-2000:]  # every batch, right, in order (the child checks)
    assert "feedline: /dev/shm has no room" not in stderr, "memory files cost nothing: no warning"


def test_a_source_array_too_big_for_dev_shm_reaches_the_workers_in_a_memory_file(memfd_env):
    (kind, rows, _), stderr = _run_child("process", small_shm=True, env=memfd_env, child=_BIG_SOURCE)
    assert (kind, rows) == ("ran", "2048"), stderr[-2000:]  # the workers mapped the consumer's memory file


def test_the_automatic_choice_on_a_full_dev_shm_keeps_process_workers_through_memory_files(memfd_env):
    memfd_env["FEEDLINE_REMEMBER"] = "0"
    kind, backend, decision = _run("auto", small_shm=True, env=memfd_env)
    assert (kind, backend) == ("ran", "process"), decision  # the work holds the GIL: processes, not threads
    assert "shared memory is full" not in decision, decision


_EXITS_AFTER_HANDING_OVER = """
import os, sys, threading, time, numpy as np, feedline as fl
marker = os.path.join(sys.argv[1], "exited")

def image(v):
    if v == 8 and not os.path.exists(marker):  # the second batch, its first run only
        open(marker, "w").close()
        threading.Timer(0.3, os._exit, (0,)).start()  # the worker exits once it has handed the batch over
    return np.full((512, 512, 3), v % 251, np.uint8)

with fl.from_arrays(np.arange(64)).map(image, backend="process", workers=1).batch(8) as pipe:
    it = iter(pipe)
    first = next(it)  # held: the next batches need new slots, so each is announced by a memory file's name
    time.sleep(1.5)  # meanwhile the worker hands batches over and exits: its memory files are gone unmapped
    firsts = [int(first[:, 0, 0, 0].sum())] + [int(b[:, 0, 0, 0].sum()) for b in it]
    assert firsts == [sum(v % 251 for v in range(k, k + 8)) for k in range(0, 64, 8)], firsts
    print("ran|" + str(pipe.stats().worker_restarts) + "|" + str(os.path.exists(marker)))
"""


def test_a_worker_that_exits_before_its_batch_in_a_memory_file_is_mapped_has_that_task_run_again(memfd_env, tmp_path):
    # A memory file lives with its owner's descriptor: a worker that exits between handing a batch over and the
    # consumer mapping it takes the batch along. The consumer must count that task as not done (not crash on
    # the missing file, and not lose the batch), and run it again on the replacement worker.
    (kind, restarts, exited), stderr = _run_child(str(tmp_path), small_shm=True, env=memfd_env, child=_EXITS_AFTER_HANDING_OVER)
    assert (kind, exited) == ("ran", "True"), stderr[-2000:]  # every batch once, right, in order (the child checks)
    assert restarts == "1", stderr[-2000:]


@pytest.mark.timeout(600)
def test_fault_suite_passes_with_every_segment_in_a_memory_file(memfd_env, tmp_path):
    """Killed, dying, replaced and many workers with 128 KB of /dev/shm and no spill folder: memory files, nothing left."""
    here = os.path.dirname(os.path.abspath(__file__))
    tests = ["tests/test_faults.py", "tests/test_scale.py::test_close_returns_and_leaves_nothing_with_many_workers"]
    command = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs -o size=128k tmpfs /dev/shm && exec "$0" "$@"',
               sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests]
    done = subprocess.run(command, env=memfd_env, capture_output=True, text=True, timeout=580, cwd=os.path.dirname(here))
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert not (tmp_path / "not-a-folder" / "spill").exists()


def test_dev_shm_bounds_the_batches_in_flight_only_where_segments_have_nowhere_else_to_go(monkeypatch):
    from feedline.testing import bounded_shared_memory as bounded_room

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    monkeypatch.setenv("FEEDLINE_MEMFD", "0")
    monkeypatch.setenv("FEEDLINE_SPILL_DIR", "0")
    stats = os.statvfs("/dev/shm")
    assert bounded_room() == stats.f_blocks * stats.f_frsize  # the depth tuner keeps within half of it
    monkeypatch.setenv("FEEDLINE_SPILL_DIR", "/tmp/somewhere")
    assert bounded_room() is None, "a spill folder takes what /dev/shm cannot"
    monkeypatch.setenv("FEEDLINE_SPILL_DIR", "0")
    monkeypatch.delenv("FEEDLINE_MEMFD")
    if hasattr(os, "memfd_create"):
        assert bounded_room() is None, "memory files take what /dev/shm cannot"
