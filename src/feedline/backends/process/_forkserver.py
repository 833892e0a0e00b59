"""A clean, pre-started interpreter that forks process workers: a worker starts in milliseconds.

A fresh interpreter spends a good share of a core importing NumPy,
cloudpickle and feedline; many workers on few cores take seconds. The fork server pays that
once per consumer process: it imports those modules (never the user's code,
never ``__main__``), then forks one child per worker on request, so every
worker is still a clean interpreter with no user state, and a script needs
no ``__main__`` guard. POSIX only: on Windows (no fork) every worker is a
fresh interpreter, the path ``FEEDLINE_FORKSERVER=0`` also selects here.

Protocol (`_pipe_messages`): the consumer writes ``("fork", boot,
libraries)`` to the server's stdin and reads ``("forked", pid, parent)`` from a reply
pipe, answers in the order of the requests; the server reaps its children
and reports ``("exited", pid, returncode)``. Where ``libraries`` names
installed packages the pipeline imports, the worker is forked by a zygote
that imported them once (`_preload`), or by the server where it cannot be
(the server then waits for the zygote's answer: replies stay in order). The
server is single-threaded (safe to fork), ignores SIGINT like the workers,
and exits when its stdin closes or its parent (the consumer) is gone; its
workers then see their parent gone and exit too (see `_main`).

This module is the consumer's side (`ForkServer`, `ForkedProcess`); the
server's own process runs `_forkserver_main`, which nothing here imports.
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

from . import _pipe_messages

__all__ = ["ForkServer", "ForkedProcess", "forkserver", "ready", "server_pids", "starting"]

_HEADER = _pipe_messages.HEADER
_SERVER_CODE = "import sys; from feedline.backends.process._forkserver_main import serve; serve(int(sys.argv[1]))"
START_TIMEOUT = 60.0  # seconds the server may take to answer a fork request (it is started on demand)
_servers: list["ForkServer"] = []
_lock = threading.Lock()


class ForkedProcess:
    """A worker forked by the server, with the part of `subprocess.Popen`'s interface the executor uses.

    The fork request is answered asynchronously (the server may still be
    importing): `pid` waits for the answer, `poll` does not.
    """

    def __init__(self, server: "ForkServer"):
        self._server = server
        self._pid = None
        self.parent = None  # the fork server, or the zygote that forked it
        self._signal_lock = threading.Lock()
        self._on_answer: int | None = None  # a signal asked for before the server answered: sent with the answer
        self.known = threading.Event()  # set once the server answered (pid, or failure: pid stays None)
        self.returncode = None

    def _answer(self, pid: int | None, parent: int | None = None) -> None:
        with self._signal_lock:
            self._pid, self.parent = pid, parent
            self.known.set()
            sig = self._on_answer
        if sig is not None and pid is not None:
            try:
                os.kill(pid, sig)  # stopped before it was forked (a zygote still importing): it goes at once
            except ProcessLookupError:
                pass

    @property
    def pid(self) -> int:
        if not self.known.wait(START_TIMEOUT) or self._pid is None:
            raise OSError("feedline's fork server did not start the worker; is the machine overloaded?")
        return self._pid

    def poll(self) -> int | None:
        if self.returncode is None and self.known.is_set():
            self.returncode = -signal.SIGKILL if self._pid is None else self._server.exit_code(self._pid, self.parent)
        if self.returncode is None and not self.known.is_set() and not self._server.alive():
            self.returncode = -signal.SIGKILL  # the server died before forking it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"feedline worker {self.pid}", timeout)
            time.sleep(0.01)  # the reader thread records the exit code the server reports
        return self.returncode

    def _signal(self, sig: int) -> None:
        with self._signal_lock:
            if not self.known.is_set():
                self._on_answer = sig  # not forked yet: signalled when it is, without waiting for it here
                return
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # exited; its code arrives from the server
                pass

    def terminate(self) -> None:
        self._signal(signal.SIGTERM)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)


class ForkServer:
    """The consumer's handle on one fork server process."""

    def __init__(self, env: dict):
        self.env = env
        reply_r, reply_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER_CODE, str(reply_w)], stdin=subprocess.PIPE, env=env, pass_fds=(reply_w,),
        )
        os.close(reply_w)
        self._replies = os.fdopen(reply_r, "rb")
        self._pending: collections.deque = collections.deque()  # ForkedProcess per request, answered in order
        self._codes: dict[int, int] = {}
        self._request_lock = threading.Lock()
        self.ready = threading.Event()  # its imports are done (see `starting`)
        self.zygotes: list[int] = []  # pids of its zygotes (`_preload`), each alive until it reports an exit
        self._reader = threading.Thread(target=self._read, name="feedline-forkserver", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def helper_pids(self) -> list[int]:
        """The server and its live zygotes: long-lived helpers, not workers."""
        if not self.alive():
            return []
        return [self.pid, *(pid for pid in self.zygotes if pid not in self._codes)]

    def _read(self) -> None:
        while True:
            header = self._replies.read(_HEADER.size)
            if len(header) < _HEADER.size:
                self.ready.set()  # gone: not starting either
                with self._request_lock:  # the server is gone: unanswered requests fail
                    while self._pending:
                        self._pending.popleft()._answer(None)
                return
            (size,) = _HEADER.unpack(header)
            message = pickle.loads(self._replies.read(size))
            if message[0] == "ready":
                self.ready.set()
            elif message[0] == "zygote":
                self.zygotes.append(message[1])
            elif message[0] == "forked":
                with self._request_lock:
                    self._pending.popleft()._answer(message[1], message[2])
            else:
                self._codes[message[1]] = message[2]

    def exit_code(self, pid: int, parent: int | None = None) -> int | None:
        code = self._codes.get(pid)
        if code is None and (not self.alive() or parent in self._codes):
            return self._orphan_code(pid)  # its parent is gone: the server, or the zygote that forked it
        return code

    @staticmethod
    def _orphan_code(pid: int) -> int | None:
        """The server died: its children were re-parented, so only their liveness is known."""
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return -signal.SIGKILL  # gone without a reported status
        return None

    def start(self, boot: dict, libraries: tuple[str, ...] = ()) -> ForkedProcess:
        """Ask for a worker that runs `_main.run(boot)`; returns at once (see `ForkedProcess`).

        ``libraries`` (`_preload.libraries_to_preload`): the worker forks from
        a zygote that imported them once, where it can.
        """
        handle = ForkedProcess(self)
        with self._request_lock:
            self._pending.append(handle)
            try:
                self._request(("fork", boot, tuple(libraries)))
            except OSError:  # the server is gone
                self._pending.remove(handle)
                raise
        return handle

    def _request(self, message) -> None:
        """Write one framed request to the server's stdin (under ``_request_lock``)."""
        data = pickle.dumps(message)
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)
        self.proc.stdin.flush()

    def prepare(self, setting: dict, libraries: tuple[str, ...]) -> None:
        """Have the zygote for ``libraries`` start importing now (no answer): workers asked for later fork from it.

        ``setting``: the ``cwd``, ``sys_path`` and ``env`` the workers' boot
        records will carry (part of the zygote's key).
        """
        with self._request_lock:
            try:
                self._request(("zygote", setting, tuple(libraries)))
            except OSError:  # the server is gone: the workers' start reports it
                pass

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def forkserver(env: dict, fixed: tuple) -> ForkServer:
    """The running fork server started with ``env`` (on first use; again if it died).

    ``fixed`` names the variables that native libraries read once, when they
    load (thread pools, malloc): a server whose values differ is not reused.
    Every other variable reaches a worker through its boot record.
    """
    with _lock:
        live = [s for s in _servers if s.alive()]
        _servers[:] = live
        for server in live:
            if all(server.env.get(k) == env.get(k) for k in fixed):
                return server
        server = ForkServer(env)
        _servers.append(server)
        return server


def starting() -> bool:
    """Whether a fork server of this process is still importing (it then takes a core meanwhile)."""
    return any(not s.ready.is_set() for s in list(_servers))


def ready() -> bool:
    """Whether a fork server of this process is up: process workers would fork from it at once."""
    return any(s.ready.is_set() and s.alive() for s in list(_servers))


def server_pids() -> list[int]:
    """Process ids of this process's fork servers and their zygotes (long-lived helper processes, not workers)."""
    return [pid for s in _servers for pid in s.helper_pids()]
