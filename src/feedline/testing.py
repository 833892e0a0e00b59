"""A small window into feedline's machinery, for tests and benchmarks (not for training code).

Tests that check the machinery (worker processes, the prefetch window,
shared memory, the remote cache) need to see it; they use these functions
instead of private modules and attributes, so the inside can change
without breaking them (tests/test_tests_use_public_names.py checks that).

>>> import numpy as np, feedline as fl
>>> from feedline import testing
>>> pipe = fl.from_arrays(np.arange(4)).map(lambda x: x, backend="thread", workers=2).batch(2)
>>> testing.runtime(pipe) is None  # nothing runs before the first iteration
True
>>> _ = list(pipe)
>>> testing.runtime(pipe).backend, testing.worker_pids(pipe)
('thread', [])
>>> pipe.close()
"""

from __future__ import annotations

import contextlib
import dataclasses
import types

from ._testing_policies import choice_policy, mechanism_policy, memory_seen, start_speculation

__all__ = [
    "available_memory",
    "backend_trial",
    "batches_ahead",
    "bounded_shared_memory",
    "choice_policy",
    "convert",
    "cpu_quota",
    "executor",
    "explain_demo",
    "helper_pids",
    "join_pieces",
    "libraries_to_preload",
    "mechanism_policy",
    "memory_seen",
    "not_started",
    "order_draws",
    "read_ahead",
    "remembering_refused",
    "remote_client",
    "remove_segment",
    "runtime",
    "seal_state",
    "segment_folders",
    "shard_cache",
    "short_switch_interval",
    "start_speculation",
    "switch_interval_holds",
    "task_measure",
    "trial_clock",
    "trial_fork_server",
    "trial_skipped_spans",
    "trial_snapshot",
    "usable_cores",
    "wait_ready",
    "worker_pids",
    "zygote_count",
]


def runtime(pipe):
    """The pipeline's `feedline.engine.Runtime` (backend, workers, depth, decision), or None before it runs.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(4)).map(abs, backend="thread", workers=2).batch(2)
    >>> runtime(pipe) is None
    True
    >>> _ = list(pipe)
    >>> runtime(pipe).backend, runtime(pipe).workers
    ('thread', 2)
    >>> pipe.close()
    """
    return pipe._runtime


def executor(pipe):
    """The running `feedline.backends.Executor`, or None before the pipeline runs.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(4)).map(abs, backend="thread", workers=2).batch(2)
    >>> executor(pipe) is None
    True
    >>> _ = list(pipe)
    >>> executor(pipe) is not None
    True
    >>> pipe.close()
    """
    rt = pipe._runtime
    return rt.executor if rt is not None else None


def worker_pids(pipe) -> list[int]:
    """Process ids of the pipeline's worker processes (empty for serial and thread backends).

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(4)).map(abs, backend="process", workers=2).batch(2)
    >>> _ = list(pipe)
    >>> len(worker_pids(pipe))
    2
    >>> pipe.close()
    """
    ex = executor(pipe)
    return ex.worker_pids() if ex is not None else []


def helper_pids() -> list[int]:
    """Long-lived helper processes of this process that are not workers: the process backend's fork servers.

    A fork server lives until this process exits; its children are the
    process workers (so a worker's parent is a fork server, not this process).

    >>> import os
    >>> os.getpid() in helper_pids()  # this process is never one of its own helpers
    False
    """
    from .backends.process._forkserver import server_pids

    return server_pids()


def wait_ready(pipe, timeout: float | None = None) -> bool:
    """Block until every worker of a running pipeline can take tasks; False on timeout (or before it runs).

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(8)).map(abs, backend="thread", workers=2).batch(2)
    >>> wait_ready(pipe, timeout=0.1)  # not running yet
    False
    >>> it = iter(pipe)
    >>> _ = next(it)
    >>> wait_ready(pipe, timeout=30)
    True
    >>> pipe.close()
    """
    ex = executor(pipe)
    return ex.wait_ready(timeout) if ex is not None else False


def batches_ahead(it) -> int:
    """Batches an epoch iterator has in flight or finished but not yet handed out: what the prefetch depth bounds.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(8)).map(abs, backend="thread", workers=2).batch(2)
    >>> it = iter(pipe)
    >>> _ = list(it)
    >>> batches_ahead(it)  # an epoch read to its end holds none
    0
    >>> pipe.close()
    """
    return it._in_flight + len(it._done) + len(it._out)


def read_ahead(store):
    """A remote store's background read-ahead (``done``: it has ended; ``fetched``: files fetched), or None before one starts.

    ``store`` is the object ``fl.from_store(url)`` reads a remote store
    through; tests/test_remote_store.py waits on it against a local S3
    server. It has no example here, which would need one.
    """
    return store._ahead


def segment_folders() -> list[str]:
    """Folders where this process's shared-memory segments can lie as files: ``/dev/shm`` and the spill folder, where on.

    A segment's name starts with ``feedline_<pid of the consumer>_``.

    >>> segment_folders()[0]
    '/dev/shm'
    """
    from .transport._shm import spill_dir

    spill = spill_dir()
    return ["/dev/shm", spill] if spill else ["/dev/shm"]


def remove_segment(name: str) -> bool:
    """Remove a segment by the name found in `segment_folders`; True if it existed. For cleaning up after a killed consumer.

    >>> remove_segment("feedline_0_no_such_segment")
    False
    """
    from .transport._shm import unlink

    return unlink(name)


def switch_interval_holds() -> int:
    """Live holds on feedline's shorter GIL switch interval; 0 once every holder released it (and the user's is back).

    >>> switch_interval_holds()  # no pipeline running: no hold, the user's own interval
    0
    """
    from ._switch_interval import ShortSwitchInterval

    return ShortSwitchInterval.holders()


def cpu_quota(cgroup_root: str = "/sys/fs/cgroup", own_cgroup: str = "/proc/self/cgroup") -> float | None:
    """The CPU quota (in CPUs) feedline reads from a cgroup tree, v1 or v2; None: no quota. Tests pass a fake tree.

    A cgroup v2 tree whose ``cpu.max`` allows 150 ms of CPU every 100 ms:

    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "cpu.max").write_text("150000 100000\\n")
    >>> _ = (root / "own_cgroup").write_text("0::/\\n")
    >>> cpu_quota(str(root), str(root / "own_cgroup"))
    1.5
    >>> _ = (root / "cpu.max").write_text("max 100000\\n")
    >>> cpu_quota(str(root), str(root / "own_cgroup")) is None
    True
    """
    from ._cores import cpu_quota as read

    return read(cgroup_root, own_cgroup)


def usable_cores() -> int:
    """Cores this process may use, as the automatic choice counts them: one worker per core.

    The count the user set (``PYTHON_CPU_COUNT``, ``-X cpu_count``), else the
    affinity mask capped by the CPU quota (`cpu_quota`). Tests that need two
    cores for a trial to run skip on fewer.

    >>> usable_cores() >= 1
    True
    """
    from ._cores import usable_cores as count

    return count()


def available_memory(cgroup_root: str = "/sys/fs/cgroup", own_cgroup: str = "/proc/self/cgroup",
                     meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes this process could still allocate, as the worker tuner reads them; None: unknown. Tests pass a fake tree.

    The machine's ``MemAvailable`` capped by the room its cgroups (v1 or v2)
    leave: what bounds how far process workers grow. A container limited
    to 8 GiB of which 3 are used, on a machine with 16 GiB available:

    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (root / "meminfo").write_text(f"MemAvailable: {16 << 20} kB\\n")
    >>> _ = (root / "own_cgroup").write_text("0::/\\n")
    >>> _ = (root / "memory.max").write_text(f"{8 << 30}\\n")
    >>> _ = (root / "memory.current").write_text(f"{3 << 30}\\n")
    >>> available_memory(str(root), str(root / "own_cgroup"), str(root / "meminfo")) == 5 << 30
    True
    """
    from .engine._memory import available_memory as read

    return read(cgroup_root, own_cgroup, meminfo)


def bounded_shared_memory() -> int | None:
    """Bytes of ``/dev/shm`` that bound the batches in flight (segments have nowhere else to go); None: unbounded.

    >>> room = bounded_shared_memory()
    >>> room is None or room > 0
    True
    """
    from .transport._shm import bounded_room

    return bounded_room()


def seal_state(state: dict) -> dict:
    """``state`` (an ``it.state()`` edited by hand) with its digest made to match, for tests of the checks behind it.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(8)).batch(2)
    >>> it = pipe.epoch(0)
    >>> _ = next(it)
    >>> state = it.state()
    >>> seal_state(dict(state))["digest"] == state["digest"]  # unedited: the digest it had
    True
    >>> pipe.close()
    """
    from .engine._state import seal

    return seal(state)


def convert(src, dst, **options):
    """Run ``feedline convert SRC DST`` as a function (``options`` as its flags, plus ``progress``); returns its summary.

    For tests that check the summary's counts and lists rather than the printed text.

    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for label in ("cat", "dog"):
    ...     (root / "images" / label).mkdir(parents=True)
    ...     Image.fromarray(np.zeros((12, 16, 3), np.uint8)).save(root / "images" / label / "0.png")
    >>> summary = convert(root / "images", root / "store", size=(8, 8), backend="serial", progress=False)
    >>> summary.samples, summary.skipped
    (2, [])
    """
    from .store._convert import convert as run

    return run(src, dst, **options)


def explain_demo(samples: int, naive: float, cold: float, warm: float, cold_stats, warm_stats,
                 load: float | None = None) -> list[str]:
    """The lines ``feedline demo`` prints about its timings (speed-up, or why there is none), for given stats.

    Lets tests check each reason (one core, a busy machine, start-up) without making the machine so.

    >>> from types import SimpleNamespace
    >>> one_core = SimpleNamespace(workers=1, cores=1, backend="serial", cpu_share=None, trial={}, batches=4)
    >>> lines = explain_demo(64, naive=0.20, cold=0.21, warm=0.20, cold_stats=one_core, warm_stats=one_core)
    >>> lines[1].startswith("  no speed-up at this size: feedline runs 1 worker here (1 core available)")
    True
    """
    from ._demo import explain

    return explain(samples, naive, cold, warm, cold_stats, warm_stats, load)


def remote_client(protocol: str, storage_options: dict) -> str:
    """``"obstore"`` or ``"fsspec"``: the client feedline reads a remote URL of ``protocol`` with (``FEEDLINE_FS_BACKEND`` too).

    Raises:
        ValueError: ``FEEDLINE_FS_BACKEND`` names an unknown client, or one that cannot read ``protocol``.

    >>> remote_client("memory", {})  # obstore reads s3, gs and http(s) only
    'fsspec'
    """
    from .store._remote_fs import choose_backend

    return choose_backend(protocol, storage_options)


def shard_cache(cache_dir, limit: int = 1 << 40):
    """The download cache of remote shards in ``cache_dir``, as workers share it: ``get``, ``files()``, ``used_bytes()``, ``counts()``.

    >>> import tempfile
    >>> cache = shard_cache(tempfile.mkdtemp())
    >>> cache.files(), cache.used_bytes(), cache.counts()["downloads"]
    ([], 0, 0)
    """
    from .store._remote_cache import ShardCache

    return ShardCache(str(cache_dir), limit)


def libraries_to_preload(pickled: bytes) -> tuple[str, ...]:
    """The installed libraries a process worker's zygote imports ahead for ``pickled`` (a pickled pipeline part), sorted.

    Never the standard library, nor what every worker imports anyway:

    >>> import json, pickle
    >>> import numpy as np
    >>> libraries_to_preload(pickle.dumps([json.dumps, np.add]))
    ()
    """
    from .backends.process._preload import libraries_to_preload as read

    return read(pickled)


def zygote_count() -> int:
    """Zygotes (pre-importing parents of process workers) that this process's fork servers hold now.

    >>> zygote_count() >= 0  # one per set of libraries that process workers of this process imported ahead
    True
    """
    from .backends.process._forkserver import _servers

    return sum(len(server.zygotes) for server in _servers)


@contextlib.contextmanager
def remembering_refused(reason: str):
    """Context manager: the automatic choice reads its remembered verdicts, but every write of them answers ``reason``.

    As a file it can read but not write answers (read-only; ``reason`` is
    the text the write's failure gives, as in ``"not remembered (...)"``).
    A test cannot make such a file where it runs as root, which writes
    through file modes; this stands in for it, and nothing else changes.

    >>> with remembering_refused("not remembered (PermissionError: read-only)"):
    ...     pass
    """
    from .engine import _remembered

    write = _remembered._write
    _remembered._write = lambda path, entries: reason
    try:
        yield
    finally:
        _remembered._write = write


def order_draws() -> int:
    """How many epoch orders of indexed pipelines this process has drawn (each one pass of the shuffles' permutations).

    Starting an epoch draws one; so does resuming a state, whatever checks
    come before its first batch (they hand the order they drew to the epoch).

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(8)).shuffle(seed=0).batch(2)
    >>> it = iter(pipe)
    >>> _ = next(it)
    >>> before = order_draws()
    >>> _ = list(pipe.resume(it.state()))
    >>> order_draws() - before
    1
    """
    from .engine import _shares

    return _shares.DRAWS


def short_switch_interval() -> float:
    """The GIL switch interval (seconds) feedline holds while process workers start (the user's, where that is shorter).

    >>> import sys
    >>> short_switch_interval() < sys.getswitchinterval()  # Python's default is 5 ms
    True
    """
    from ._switch_interval import STARTUP_SWITCH_INTERVAL

    return STARTUP_SWITCH_INTERVAL


def join_pieces(results: list, indices: list):
    """The `feedline.worker.Result` one task would have returned, from its pieces' results and indices (as the engine joins).

    >>> import numpy as np
    >>> from feedline.worker import Result
    >>> first, rest = Result(payload=np.arange(3), rows=3), Result(payload=np.arange(3, 5), rows=2)
    >>> join_pieces([first, rest], [[0, 1, 2], [3, 4]]).payload.tolist()
    [0, 1, 2, 3, 4]
    """
    from .engine._tail import join

    return join(results, indices)


def not_started(workers: int, name: str = "process", cores: int = 1):
    """The automatic choice's stand-in `feedline.backends.Executor` for a backend not started: it holds and steers nothing.

    >>> waiting = not_started(4, "thread", cores=2)
    >>> waiting.outstanding(), waiting.wait(0), waiting.side_by_side()
    (0, [], None)
    """
    from .engine._trial import NotStarted

    return NotStarted(workers, name, cores)


def backend_trial(threads, make_processes, workers: int, **options):
    """The automatic choice's trial over executors a test makes: ``threads`` judged first, ``make_processes()`` if they lose.

    An `feedline.backends.Executor`, driven as the engine drives it: each
    ``submit`` and ``wait`` looks at the threads' clocks while the GIL is
    judged, and at the workers while they start. It decides under the
    policy in force (`choice_policy`); ``options``: ``park``, ``restart``,
    ``policy``, ``clock`` (`trial_clock`), ``fork_server``
    (`trial_fork_server`). ``phase``, ``winner``, ``note``,
    ``processes_started`` tell where it stands, `trial_snapshot` what it
    has seen. Clocks that cannot be read (as on Windows) start the process
    workers at the first look:

    >>> trial = backend_trial(not_started(2, "thread", cores=2), lambda: not_started(2), 2)
    >>> trial.wait(0), trial.processes_started, trial.phase.name
    ([], True, 'MEASURING_PROCESSES')
    >>> trial.close()
    """
    from .engine._trial import BackendTrial

    return BackendTrial(threads, make_processes, workers, **options)


@dataclasses.dataclass(frozen=True)
class TrialSnapshot:
    """What a trial (`backend_trial`, or a pipeline's automatic choice) had seen when `trial_snapshot` read it."""

    observations: object  # the `feedline.engine.choice.Observations` its model reads now (`decide`, `predict`)
    cores_note: str  # what the report says of the threads judged side by side ("" before their verdict on the GIL)
    fork_server: str  # the fork server the trial started at a first sign of the GIL: "" none, "importing", then "up"
    early_workers: bool  # process workers started before the verdict are waiting for it (not yet taken, nor closed)


def trial_snapshot(trial) -> TrialSnapshot:
    """A frozen `TrialSnapshot` of ``trial`` now: its observations, the report's note on the threads' cores, its start-ups.

    >>> trial = backend_trial(not_started(2, "thread", cores=2), lambda: not_started(2), 2)
    >>> seen = trial_snapshot(trial)
    >>> seen.observations.pool, seen.observations.cores_kept, seen.cores_note, seen.fork_server, seen.early_workers
    (2, None, '', '', False)
    >>> trial.close()
    """
    return TrialSnapshot(trial._observations(), trial._cores_note(), trial._server_early, trial._early is not None)


def task_measure(workers: int, cores: int, min_span: float | None = None):
    """The trial's measure of one backend's finished tasks (``add(result)``, ``per_second``, ``cores_busy``, ``measured()``).

    A pool of ``workers`` is credited at most the ``cores`` it runs on; it
    is complete with ``min_span`` seconds of tasks per worker (default:
    `Policy.evidence_span`). ``measured()`` is what the model reads.

    >>> from feedline.worker import Result
    >>> measure = task_measure(2, 2)
    >>> measure.add(Result(rows=8, span=(0.0, 0.1), cpu=0.1))
    >>> measure.per_second, measure.cores_busy, measure.measured().done
    (160.0, 2.0, False)
    """
    from .engine._trial_measure import Measure
    from .engine.choice import DEFAULT_POLICY

    return Measure(workers, cores, DEFAULT_POLICY.evidence_span if min_span is None else min_span)


def trial_skipped_spans() -> dict[str, float]:
    """Seconds the trial's judging leaves out at most, fixed (not `Policy` thresholds), as a new dict.

    ``imports_skipped``: first samples that import modules. (Held workers
    connecting once the fork server is up: `EarlyStart.connecting_skipped`.)

    >>> sorted(trial_skipped_spans())
    ['imports_skipped']
    """
    from .engine._trial_gil import IMPORTS_SKIPPED

    return {"imports_skipped": IMPORTS_SKIPPED}


def trial_clock(wall, consumer_cpu=lambda: 0.0):
    """A clock for `backend_trial` (``clock=``): the time (``perf_counter``, ``monotonic``) from ``wall()``, the consumer's CPU from ``consumer_cpu()``.

    For trials on scripted executors, whose clocks a test advances.

    >>> trial = backend_trial(not_started(2, "thread", cores=2), lambda: not_started(2), 2, clock=trial_clock(lambda: 1.5))
    >>> trial.clock.perf_counter()
    1.5
    >>> trial.close()
    """
    return types.SimpleNamespace(perf_counter=wall, monotonic=wall, thread_time=consumer_cpu)


def trial_fork_server(warming_up, warmed_up, warm_up):
    """A scripted fork server for `backend_trial` (``fork_server=``), asked instead of `feedline.backends`' own.

    ``warming_up()``: its imports run; ``warmed_up()``: it is up; ``warm_up(backend)``: the trial asks for it.

    >>> server = trial_fork_server(lambda: False, lambda: True, lambda backend: None)
    >>> server.warmed_up()
    True
    """
    from .engine._trial_start import ForkServer

    return ForkServer(warming_up, warmed_up, warm_up)
