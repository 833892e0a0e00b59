"""The workers' hand-shake: each starting worker connects, says `Hello`, and gets the pipeline (`SendPart`).

It runs in a thread of its own (`feedline-accept`), not in the consumer's,
so that a consumer busy with a long task, or between epochs, does not hold
starting workers back. The protocol:
- Accept: the listener authenticates each connection with the key that
  went to the worker in its boot record; the thread then reads its `Hello`
  (at most `START_TIMEOUT`). A worker that dies meanwhile is dropped here;
  the consumer's start-up check sees its exit.
- Held: until `release` names the pipeline (the executor was started held,
  or it is still being pickled), a worker that said hello waits in a list;
  `release` sends it the pipeline in the caller's thread. The lock orders
  that list between the accept thread and the consumer.
- Hand-over: once a worker has the pipeline, its connection goes into a
  queue and a byte down the wake pipe makes the consumer's poll return;
  `take` hands each to the consumer, in its own thread, and from then on
  only the consumer touches it.
- Shutdown: `closing` first (set by the executor as its close begins: no
  worker gets the pipeline from then on), then `stop_waiting` tells the
  held workers to stop, and `close` wakes the accept thread out of
  ``accept()``, closes the listener and the connections never taken over.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from multiprocessing.connection import Listener

from ...worker._protocol import SendPart, Stop
from ...worker._wire import decode, encode
from ._connections import LISTEN_BACKLOG, listen_address, wake_listener, wake_pipe
from ._workers import START_TIMEOUT

__all__ = ["Handshake"]


class Handshake:
    """The listener the workers connect to, and the thread that greets each and sends it the pipeline.

    Args:
        workers: how many workers start at first (the listener queues at least that many connections).
        by_id: the executor's workers by id; a worker sent the pipeline gets ``has_part`` set.
        after_hello: called in the accept thread after each hello is answered or held (the executor
            gives its shorter switch interval back once every worker is that far).
    """

    def __init__(self, workers: int, by_id: dict, after_hello: Callable[[], None]):
        self.authkey = os.urandom(32)
        self.listener = Listener(listen_address(), backlog=max(LISTEN_BACKLOG, workers + 1), authkey=self.authkey)
        self.accepted: queue.SimpleQueue = queue.SimpleQueue()
        self.wake_r, self._wake_w = wake_pipe()  # the consumer polls ``wake_r`` beside the workers' pipes
        self.part_known = threading.Event()
        self._part: bytes | None = None  # the pickled pipeline, once `release` names it
        self._waiting: list = []  # (conn, hello) of workers that said hello before the pipeline was theirs to get
        self._waiting_lock = threading.Lock()
        self.closing = False
        self._by_id = by_id
        self._after_hello = after_hello
        self._thread = threading.Thread(target=self._accept_loop, name="feedline-accept", daemon=True)

    @property
    def address(self):
        """Where the workers connect (goes into each worker's boot record, with `authkey`)."""
        return self.listener.address

    def start(self) -> None:
        self._thread.start()

    def release(self, part: bytes) -> None:
        """``part`` goes to every worker: those waiting for it now, the others as they say hello."""
        self._part = part
        with self._waiting_lock:
            self.part_known.set()
            waiting, self._waiting = self._waiting, []
        for conn, hello in waiting:
            self._send_part(conn, hello)

    def waiting_count(self) -> int:
        """Workers that said hello and wait for the pipeline."""
        return len(self._waiting)

    def waiting_ids(self) -> set[int]:
        """The ids of the workers that said hello and wait for the pipeline."""
        with self._waiting_lock:
            return {hello.worker_id for _, hello in self._waiting}

    def take(self, adopt: Callable) -> None:
        """In the consumer's thread: ``adopt(worker, conn, hello)`` for each connection that got the pipeline.

        A connection whose worker is gone meanwhile (it is no longer in ``by_id``) is closed.
        """
        while True:
            try:
                conn, hello = self.accepted.get_nowait()
            except queue.Empty:
                return
            worker = self._by_id.get(hello.worker_id)
            if worker is None:
                conn.close()
                continue
            adopt(worker, conn, hello)

    def _accept_loop(self) -> None:
        while not self.closing:
            try:
                conn = self.listener.accept()  # authenticates with the key, or raises
            except Exception:  # closed, a failed handshake, or a worker dying mid-connect
                if self.closing:
                    return
                continue
            if self.closing:
                conn.close()
                return
            # The handshake happens here, not in the consumer's thread, so a
            # consumer busy with a long task does not hold workers back.
            try:
                if not conn.poll(START_TIMEOUT):
                    raise EOFError
                hello = decode(conn.recv_bytes())
            except (EOFError, OSError):
                conn.close()  # it died before saying hello; the start-up check sees its exit
                continue
            with self._waiting_lock:
                held = not self.part_known.is_set()  # held, or still pickling: `release` sends it
                if held:
                    self._waiting.append((conn, hello))
            if held:
                self._after_hello()  # held workers may wait long for the pipeline: nothing starts meanwhile
                continue
            self._send_part(conn, hello)
            self._after_hello()  # here too: the consumer may not poll again for long (an epoch ended)

    def _send_part(self, conn, hello) -> None:
        """Send a worker that said hello the pipeline; it is the consumer's from then on (`take`)."""
        if self.closing:
            conn.close()
            return
        try:
            conn.send_bytes(encode(SendPart(self._part)))
        except (EOFError, OSError):
            conn.close()  # it died meanwhile; the start-up check sees its exit
            return
        worker = self._by_id.get(hello.worker_id)
        if worker is not None:
            worker.has_part = True
        self.accepted.put((conn, hello))
        self._wake_w.send_bytes(b"w")

    def stop_waiting(self) -> None:
        """Tell the held workers, never given the pipeline, to stop; a hello from now on is not kept waiting."""
        with self._waiting_lock:
            self.part_known.set()
            waiting, self._waiting = self._waiting, []
        for conn, _ in waiting:  # they stop as told (or the executor terminates them)
            try:
                conn.send_bytes(encode(Stop()))
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        """Wake the accept thread (it sees `closing` and exits), close the listener and what was never taken over."""
        wake_listener(self.listener.address)
        self.listener.close()
        self._thread.join(timeout=1.0)
        while True:  # connections accepted but never taken over
            try:
                conn, _ = self.accepted.get_nowait()
            except queue.Empty:
                break
            conn.close()
