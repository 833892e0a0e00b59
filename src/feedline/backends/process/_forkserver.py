"""A clean, pre-started interpreter that forks process workers: a worker starts in milliseconds.

A fresh interpreter takes 0.1-0.15 s of CPU to import NumPy, cloudpickle
and feedline; 16 workers on 2 cores take seconds. The fork server pays that
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

from . import _pipe_messages, _preload

__all__ = ["ForkServer", "ForkedProcess", "forkserver", "ready", "server_pids", "starting"]

_HEADER = _pipe_messages.HEADER
_SERVER_CODE = "import sys; from feedline.backends.process._forkserver import serve; serve(int(sys.argv[1]))"
START_TIMEOUT = 60.0  # seconds the server may take to answer a fork request (it is started on demand)
_servers: list["ForkServer"] = []
_lock = threading.Lock()


# ---------------------------------------------------------------- the server
def serve(reply_fd: int) -> None:
    """The server's main loop (runs in its own interpreter)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the consumer decides when workers stop
    # What every worker imports anyway; importing it once here is the point. The
    # description modules come too: unpickling the pipeline imports them in every worker.
    import multiprocessing.connection  # noqa: F401

    from ... import sources  # noqa: F401
    from ...pipeline import _plan, _steps  # noqa: F401
    from ...sources import _arrays, _files, _generator, _sequence  # noqa: F401
    from ...transport import _shm, _slots, _transfer  # noqa: F401
    from ...worker import _kernel, _protocol  # noqa: F401
    from . import _main  # noqa: F401

    _pipe_messages.answer(reply_fd, ("ready",))  # imports done: this server no longer competes for a core
    requests = _pipe_messages.Requests(0, reply_fd)
    zygotes = _Zygotes(reply_fd)

    def own_fds() -> tuple:  # what a child must close; read at each fork: zygotes retire and close theirs
        return (0, reply_fd, *requests.fds, *zygotes.fds())

    for kind, boot, libraries in requests:
        if kind == "zygote":  # a map described: its zygote imports while the consumer sets up (`ForkServer.prepare`)
            zygotes.get(libraries, boot, own_fds)
        elif kind == "fork":
            forked = zygotes.fork(libraries, boot, own_fds) if libraries else None
            if forked is None:  # (a zygote that declined just now closed its pipes: own_fds() no longer has them)
                pid = os.fork()
                if pid == 0:
                    _child(boot, own_fds())
                forked = pid, os.getpid()
            _pipe_messages.answer(reply_fd, ("forked", *forked))  # the pid, and its parent (this server or a zygote)


class _Zygote:
    """The server's end of a zygote (`_preload`): its pid, the pipe for requests and the one for answers."""

    def __init__(self, pid: int, requests: int, answers: int):
        self.pid, self.requests, self.answers = pid, requests, answers
        self.reader = _pipe_messages.Reader(answers)  # one answer per request, in order


KEY_IGNORED_VARS = frozenset({  # set in the consumer behind the user's back, read by no library as it is imported:
    "KMP_DUPLICATE_LIB_OK",  # threadpoolctl's import sets it (thread workers' BLAS limit): every automatic map's
})  # zygote, started when the map was described, was replaced by a second one importing torch again (1.6 s)


class _Zygotes:
    """The server's zygotes, one per set of libraries and the setting they are imported in (directory, path, environment)."""

    def __init__(self, reply_fd: int):
        self.reply_fd = reply_fd
        self.by_key: dict[tuple, _Zygote | None] = {}  # None: it declined or died; the server forks for that key
        self.declined: set[str] = set()  # packages whose import started a thread: never imported by a zygote again

    def fds(self) -> list[int]:
        return [fd for z in self.by_key.values() if z is not None for fd in (z.requests, z.answers)]

    def fork(self, libraries: tuple, boot: dict, own_fds) -> tuple[int, int] | None:
        """``(pid, zygote pid)`` of a worker forked by the zygote that has ``libraries`` (started on first use).

        None where there is none: nothing left to import once the declined
        packages are left out, or the zygote declined (an import started a
        thread) or died; the server then forks the worker itself.
        """
        key = self._key(libraries, boot)  # before any decline below changes what it leaves out
        zygote = self._get(key, boot, own_fds)
        if zygote is None:
            return None
        try:
            _pipe_messages.send(zygote.requests, ("fork", boot))
            answer = zygote.reader.next()
        except OSError:
            answer = None
        if answer and answer[0] == "forked":
            return answer[1], zygote.pid
        if answer and answer[0] == "declined":
            self.declined.add(answer[1])
        self.by_key[key] = None
        for fd in (zygote.requests, zygote.answers):
            os.close(fd)  # it exits (end of its requests)
        return None

    def get(self, libraries: tuple, boot: dict, own_fds) -> _Zygote | None:
        """The zygote for ``libraries`` in ``boot``'s setting (``cwd``, ``sys_path``, ``env``), started if there is none yet.

        None where there is none to use: nothing left to import once the
        declined packages are left out, or it declined or died.
        ``own_fds()``: the server's descriptors, which a new zygote closes.
        """
        return self._get(self._key(libraries, boot), boot, own_fds)

    def _get(self, key: tuple, boot: dict, own_fds) -> _Zygote | None:
        if not key[0]:
            return None
        if key not in self.by_key:
            self.by_key[key] = self._start(key[0], boot, own_fds())
            self._retire_others_of(key)  # (after the fork: the new zygote closed their pipes' ends as they were)
        return self.by_key[key]

    def _retire_others_of(self, key: tuple) -> None:
        """Retire the zygotes of the same libraries in another setting: each exits once its workers have.

        A zygote started when a map was described (`ForkServer.prepare`)
        and a run after the environment changed (Lightning's
        ``seed_everything`` sets a variable) have different keys: the first
        would hold torch's ~135 MB unused as long as the server. Its request
        pipe is closed; it forks nothing more and lingers only while a
        worker of its lives (`_pipe_messages.Requests`, ``linger``).
        """
        for other in [k for k, z in self.by_key.items() if k[0] == key[0] and k != key and z is not None]:
            zygote = self.by_key.pop(other)
            for fd in (zygote.requests, zygote.answers):
                os.close(fd)

    def _key(self, libraries: tuple, boot: dict) -> tuple:
        libraries = tuple(name for name in libraries if name.partition(".")[0] not in self.declined)
        env = tuple(sorted(item for item in boot["env"].items() if item[0] not in KEY_IGNORED_VARS))
        return libraries, boot["cwd"], tuple(boot["sys_path"]), env

    def _start(self, libraries: tuple, boot: dict, own_fds: tuple) -> _Zygote:
        requests_r, requests_w = os.pipe()
        answers_r, answers_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in own_fds:
                    if fd not in (0, self.reply_fd):
                        os.close(fd)
                os.close(requests_w)
                os.close(answers_r)
                devnull = os.open(os.devnull, os.O_RDONLY)
                os.dup2(devnull, 0)  # stdin is never the consumer's pipe
                os.close(devnull)
                signal.set_wakeup_fd(-1)
                _preload.serve_zygote(libraries, boot, requests_r, answers_w, self.reply_fd, _child)
            finally:
                os._exit(1)
        os.close(requests_r)
        os.close(answers_w)
        _pipe_messages.answer(self.reply_fd, ("zygote", pid))  # a helper of the consumer's, like this server
        return _Zygote(pid, requests_w, answers_r)


def _child(boot: dict, server_fds) -> None:
    """Become a worker: drop the server's files and handlers, then run `_main.run`."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in server_fds:
            os.close(fd)
        os.open(os.devnull, os.O_RDONLY)  # takes fd 0: stdin is never the server's pipe
        from . import _main

        _main.run(boot)
        code = 0
    except BaseException:  # a worker that fails to run says why on stderr, as a fresh one would
        import traceback

        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed stream: nothing left to say
                pass
        os._exit(code)


# ---------------------------------------------------------------- the consumer's side
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
    """Whether a fork server of this process is still importing (it then takes a core for ~0.1 s)."""
    return any(not s.ready.is_set() for s in list(_servers))


def ready() -> bool:
    """Whether a fork server of this process is up: process workers would fork from it at once."""
    return any(s.ready.is_set() and s.alive() for s in list(_servers))


def server_pids() -> list[int]:
    """Process ids of this process's fork servers and their zygotes (long-lived helper processes, not workers)."""
    return [pid for s in _servers for pid in s.helper_pids()]
