"""The fork server's own process: import once, then fork workers (and zygotes) on request.

Its entry point (`serve`) runs in an interpreter the consumer starts
(`feedline.backends.process._forkserver.ForkServer`); nothing in the
consumer imports this module. The protocol and the server's life are in
`_forkserver`'s docstring: requests on stdin, answers in order on the reply
pipe, single-threaded (safe to fork), gone when its stdin closes.
"""

from __future__ import annotations

import os
import signal
import sys

from . import _pipe_messages, _preload

__all__ = ["serve"]

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
})  # zygote, started when the map was described, would be replaced by a second one importing its libraries again


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
        would hold its libraries' memory unused as long as the server. Its request
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
