"""Starting a process worker, and the consumer's handle on one (`Worker`).

A worker is forked by the fork server (`_forkserver`; by its zygote where
the pipeline's installed libraries were imported once, `_preload`) on
Linux and macOS, or starts as a fresh interpreter (``python -c``) on
Windows and with ``FEEDLINE_FORKSERVER=0`` (`feedline._forking`). Either
way it runs `_main` with a boot record (its id, the consumer's address and
key, ``sys.path``) and the environment of `worker_env`.
"""

from __future__ import annotations

import collections
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from ..._forking import use_forkserver
from ..._malloc import MALLOC_VARS, turned_off
from ._forkserver import forkserver
from ._main import BLAS_VARS, CANCELLED_WORD, STATUS_WORDS, TF_POOL_VARS
from ._preload import libraries_of, preload_allowed

__all__ = ["FIXED_VARS", "START_TIMEOUT", "Worker", "describe_exit", "prepare_zygote", "start_process", "worker_env"]

START_TIMEOUT = 60.0  # seconds a worker may take to import and connect
_WORKER_CODE = "from feedline.backends.process._main import main; main()"
FIXED_VARS = BLAS_VARS + tuple(MALLOC_VARS)  # read once by native libraries when they load


def worker_env() -> dict:
    """The consumer's environment, with one native thread per worker and malloc thresholds, unless set.

    glibc's default heap thresholds make a new worker hand temporaries of a
    few hundred KB back to the OS after every call and fault them in again;
    a worker keeps freed memory up to `feedline._malloc`'s bounds instead.
    Other C libraries ignore the variables; the user's own settings win,
    and ``FEEDLINE_MALLOC=0`` leaves them out.
    """
    env = dict(os.environ)
    for var in BLAS_VARS + TF_POOL_VARS:
        env.setdefault(var, "1")  # one native thread per worker: N workers x N threads thrash
    if not turned_off():
        for var, value in MALLOC_VARS.items():
            env.setdefault(var, value)
    return env


def prepare_zygote(described: tuple) -> None:
    """Start, in a background thread, the fork server's zygote for the libraries ``described`` uses (a map's source and steps).

    Reading them pickles the functions and the source (arrays left out,
    `_preload.libraries_of`), which can take a while for a large list of
    paths: not in the thread that describes the pipeline. The key is this
    process's directory, path and environment now; a pipeline run after
    they changed gets a zygote of its own. Errors are left for the
    executor, whose pickling reports them with context.
    """
    if not preload_allowed():
        return

    def prepare():
        try:
            libraries = libraries_of(*described)
            if libraries:
                env = worker_env()
                setting = {"cwd": os.getcwd(), "sys_path": list(sys.path), "env": env}
                forkserver(env, FIXED_VARS).prepare(setting, libraries)
        except Exception:  # noqa: S110 - a head start only: the executor's own start reports what is wrong
            pass

    threading.Thread(target=prepare, name="feedline-preload", daemon=True).start()


def start_process(boot: dict, libraries: tuple[str, ...] = ()):
    """Start the worker of ``boot``: forked by the fork server where it is used, else a fresh interpreter.

    Returns a `_forkserver.ForkedProcess` or a `subprocess.Popen` (the
    executor uses the same part of either). ``libraries``: the zygote to
    fork from (`_preload.libraries_to_preload`).
    """
    env = worker_env()
    if not use_forkserver():
        return _fresh_interpreter(env, boot)
    server = forkserver(env, FIXED_VARS)
    forked = dict(boot, parent_pid=server.pid, consumer_pid=os.getpid(), cwd=os.getcwd(), env=env)
    try:
        return server.start(forked, libraries)
    except OSError:  # the server died or hangs: this worker starts the slow way
        return _fresh_interpreter(env, boot)


def _fresh_interpreter(env: dict, boot: dict) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _WORKER_CODE], stdin=subprocess.PIPE, env=env)
    try:
        proc.stdin.write(pickle.dumps(boot))
        proc.stdin.close()
    except OSError:
        pass  # it died at once; noticed as a failed start
    return proc


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class Worker:
    """The consumer's handle on one worker: its process, connection, tasks sent, status words and release ring."""


    __slots__ = ("id", "position", "proc", "conn", "ready", "has_part", "outstanding", "reader", "status", "ring",
                 "started", "finishing")

    def __init__(self, wid, position, proc, reader):
        self.id, self.position, self.proc, self.reader = wid, position, proc, reader
        self.conn = None
        self.ready = False
        self.has_part = False  # the accept thread sent it the pipeline: starting is up to the worker from then on
        self.outstanding: collections.OrderedDict = collections.OrderedDict()
        self.status = None
        self.ring = None  # its `ReleaseRing`, in the status segment: freed slots go back without a message
        self.started = time.monotonic()
        self.finishing = None  # key of the cancelled task it may still be on, up to its next sample (`mark_cancelled`)

    def current_index(self) -> int:
        """The sample the worker was on (from its status word), or -1."""
        if self.status is None:
            return -1
        return int(np.ndarray((2,), np.int64, buffer=self.status.buf)[1])

    def mark_cancelled(self, generation: int) -> None:
        """Tell the worker that tasks of ``generation`` and older are not wanted: it stops them before their next sample.

        The oldest task sent to it, if cancelled now, may be running: the
        worker is `busy_finishing` it until its (empty) answer comes back.
        The tasks queued behind it end before their first sample.
        """
        np.ndarray((STATUS_WORDS,), np.int64, buffer=self.status.buf)[CANCELLED_WORD] = generation
        if not self.busy_finishing() and self.outstanding:
            oldest = next(iter(self.outstanding))
            if oldest[0] <= generation:
                self.finishing = oldest

    def busy_finishing(self) -> bool:
        """Whether it may still be inside a sample of a cancelled task (one sample at most), its answer not back yet."""
        return self.finishing is not None and self.finishing in self.outstanding

    def live_outstanding(self, live) -> int:
        """Tasks sent to it that someone will read (a cancelled one ends at its next sample and takes no room)."""
        return sum(1 for key in self.outstanding if live(key))

    def current_sample(self) -> tuple[int, int, int] | None:
        """``(task number, sample index, monotonic_ns when it began)`` of the sample running now, or None.

        The worker writes the start time before the index; reading the time on
        both sides of the index and requiring it unchanged never pairs a new
        index with the previous sample's start.
        """
        if self.status is None:
            return None
        words = np.ndarray((STATUS_WORDS,), np.int64, buffer=self.status.buf)
        began, index, number, again = int(words[2]), int(words[1]), int(words[0]), int(words[2])
        return (number, index, began) if index >= 0 and began == again else None
