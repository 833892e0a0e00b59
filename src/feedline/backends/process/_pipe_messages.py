"""Length-prefixed pickles over a pipe: the fork server's and its zygotes' messages.

Each message goes out in one ``os.write`` of a 4-byte length and the
pickle; a message under ``PIPE_BUF`` (4 KiB on Linux) is written whole, so
several writers (the server and its zygotes on the reply pipe) never
interleave. Readers buffer partial messages (`Reader`).
"""

from __future__ import annotations

import collections
import os
import pickle
import select
import signal
import struct

HEADER = struct.Struct("<I")


def send(fd: int, message) -> None:
    data = pickle.dumps(message)
    os.write(fd, HEADER.pack(len(data)) + data)


def answer(fd: int, message) -> None:
    """`send` to the process this one serves; where it is gone (a broken pipe), exit at once, quietly.

    The fork server and its zygotes answer the consumer (and the server);
    a consumer that finished its epoch exits while a zygote may still be
    importing torch, and the answer that follows then raised
    ``BrokenPipeError`` with a traceback on the terminal the consumer had
    left (the automatic choice's trial on a torch map, every run).
    """
    try:
        send(fd, message)
    except BrokenPipeError:
        os._exit(0)  # nobody reads us any more: our children see their parent gone and exit too


class Reader:
    """The whole messages read from ``fd``: those one read completes (`read`), or the next one (`next`).

    >>> r, w = os.pipe()
    >>> send(w, ("forked", 41)); send(w, ("forked", 42)); os.close(w)
    >>> reader = Reader(r)
    >>> reader.next(), reader.next(), reader.next()
    (('forked', 41), ('forked', 42), None)
    >>> os.close(r)
    """

    def __init__(self, fd: int):
        self.fd = fd
        self.pending = b""
        self._whole: collections.deque = collections.deque()  # complete messages `next` has not returned yet

    def next(self):
        """The next message, blocking until it is whole; None at end of file. (Not mixed with `read` on one reader.)"""
        while not self._whole:
            messages = self.read()
            if messages is None:
                return None
            self._whole.extend(messages)
        return self._whole.popleft()

    def read(self) -> list | None:
        data = os.read(self.fd, 1 << 16)
        if not data:
            return None
        self.pending += data
        messages = []
        while len(self.pending) >= HEADER.size:
            (size,) = HEADER.unpack_from(self.pending)
            if len(self.pending) < HEADER.size + size:
                break
            messages.append(pickle.loads(self.pending[HEADER.size : HEADER.size + size]))
            self.pending = self.pending[HEADER.size + size :]
        return messages


def report_exits(reply_fd: int) -> None:
    """Reap every child that has exited and send ``("exited", pid, code)`` for each (the fork server, a zygote)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        answer(reply_fd, ("exited", pid, os.waitstatus_to_exitcode(status)))


class Requests:
    """The main loop of a process that forks workers on request (the fork server, a zygote).

    Iterating yields each message read from ``fd``; meanwhile it reaps the
    children that exit and reports them on ``reply_fd`` (`report_exits`).
    The process exits when ``fd`` reaches end of file or its parent is gone
    (its children then see theirs gone and exit); with ``linger`` (a
    zygote), end of file means retired: it exits once its children have.
    A child forked while a message is handled must close `fds` (the loop's
    own).
    """

    def __init__(self, fd: int, reply_fd: int, linger: bool = False):
        self.fd, self.reply_fd = fd, reply_fd
        self.linger = linger  # at end of file, wait for the children to exit first (a zygote retired by the server)
        self.parent = os.getppid()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through the wakeup fd
        self.fds = (wake_r, wake_w)

    def __iter__(self):
        reader = Reader(self.fd)
        wake_r = self.fds[0]
        watched = [self.fd, wake_r]
        while True:
            try:
                ready, _, _ = select.select(watched, [], [], 0.2)
            except InterruptedError:
                ready = []
            if os.getppid() != self.parent:
                os._exit(0)  # our parent is gone: so are we (our children notice and exit)
            if wake_r in ready:
                os.read(wake_r, 4096)
            report_exits(self.reply_fd)
            if len(watched) == 1 and not _children_left():
                os._exit(0)  # retired, and the last of our children is gone
            if self.fd not in ready:
                continue
            messages = reader.read()
            if messages is None and not self.linger:
                os._exit(0)  # closed by the one that sends us requests
            if messages is None:
                watched = [wake_r]  # retired: no more requests; our children finish their pipelines first
                continue
            yield from messages


def _children_left() -> bool:
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    return True
