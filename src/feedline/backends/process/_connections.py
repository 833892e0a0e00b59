"""The consumer's end of its workers' connections: where they connect, and one poll set over their pipes."""

from __future__ import annotations

import math
import os
import select
import sys
from multiprocessing.connection import Client
from multiprocessing.connection import wait as wait_connections

__all__ = ["LISTEN_BACKLOG", "Readable", "listen_address", "wake_listener", "wake_pipe"]

# Connections the listener queues for its accept thread: every worker may connect at once, the tuner's
# grown ones too (a backlog of 1 made connects queue in the kernel, and a wake-up connect block, at 8+
# workers; 17 for 16 workers was filled by a pool grown to 38). An unused queue costs nothing.
LISTEN_BACKLOG = 256


def listen_address() -> str | None:
    """Where the workers connect: on Linux a socket with no file (abstract namespace), else multiprocessing's default.

    multiprocessing's default on POSIX is a socket file in a ``pymp-*``
    folder under the temporary directory, removed at a clean exit: a
    consumer that is killed (out of memory, a preempted job) left one
    behind each time. An abstract socket goes with the last descriptor.
    """
    if sys.platform.startswith("linux"):
        return f"\0feedline-{os.getpid()}-{os.urandom(8).hex()}"
    return None


def wake_listener(address) -> None:
    """Connect to ``address`` once, giving up after a second: never blocks close.

    A Linux listener's abstract address reads back as bytes
    (``Listener.address``), and multiprocessing's client connects with no
    time limit: where workers still connecting (the tuner had grown the
    pool past the listener's backlog) filled its queue after the accept
    thread had left, close waited for ever.
    """
    if isinstance(address, (str, bytes)) and sys.platform != "win32":
        import socket

        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            try:
                sock.connect(address)
            except OSError:  # the listener is gone or its queue is full: the thread is not in accept() for long
                pass
        return
    try:  # a named pipe: multiprocessing's client waits at most 1 s for it
        Client(address).close()
    except OSError:
        pass


class Readable:
    """The consumer's pipes, registered once, so a wait costs O(ready pipes), not O(workers).

    ``multiprocessing.connection.wait`` builds a selector and registers every
    pipe on each call: with 64 workers that is paid per batch. Where
    ``select.poll`` is missing (Windows) it is still what runs.
    """

    def __init__(self, wake):
        self.poll = select.poll() if hasattr(select, "poll") else None
        self.by_fd: dict = {}
        self.add(wake, None)

    def add(self, conn, worker) -> None:
        self.by_fd[conn.fileno()] = (conn, worker)
        if self.poll is not None:
            self.poll.register(conn.fileno(), select.POLLIN)

    def remove(self, conn) -> None:
        try:
            fd = conn.fileno()
        except OSError:  # already closed
            return
        if self.by_fd.pop(fd, None) is not None and self.poll is not None:
            self.poll.unregister(fd)

    def wait(self, timeout: float | None) -> list:
        """``(conn, worker)`` pairs with something to read (or at EOF); the wake pipe's worker is None."""
        if self.poll is None:
            conns = {conn: worker for conn, worker in self.by_fd.values()}
            return [(conn, conns[conn]) for conn in wait_connections(list(conns), timeout)]
        ms = -1 if timeout is None else max(0, math.ceil(timeout * 1000))
        events = self.poll.poll(ms)  # retried on EINTR by Python itself (PEP 475)
        return [self.by_fd[fd] for fd, _ in events if fd in self.by_fd]


def wake_pipe():
    from multiprocessing.connection import Pipe

    return Pipe(duplex=False)
