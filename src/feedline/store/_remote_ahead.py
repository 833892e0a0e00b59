"""Read-ahead: fetch a remote store's files into the cache in the order the epoch will read them.

Protocol: `ReadAhead` is given the files in first-use order (from the
epoch's index list, or file order) and runs ``concurrency`` threads
(``feedline-readahead``) that take the next file, fetch it through the
cache (which skips files already there and waits for one another process
is fetching), and mark it prefetched. Back-pressure: a thread waits while
``ahead`` files it fetched are still unread (their mtime still says
prefetched, so reads in any process count), which bounds both the requests
in flight and the disk the read-ahead takes. Start: the first ``first``
files (those the epoch's first task reads) are fetched alone, and only
when they have arrived do the other requests start, so the first batch
does not wait behind requests for files it does not need. A failed prefetch is counted
and left for the reader, which retries it and reports it with its sample; one the cache
has no room for right now (`CacheFull`) is left for the reader too, not counted.
`stop()` ends the threads after their current request; they also end when
every file is fetched, or after ``MechanismPolicy.read_ahead_idle_stop`` seconds in which no fetched file
was read (an epoch abandoned half-way).
"""

from __future__ import annotations

import threading
import time

from .._mechanism_policy import current_mechanisms
from ._remote_cache import CacheFull

__all__ = ["ReadAhead"]

_POLL = 0.05  # seconds between checks of which fetched files have been read (reacts well within one request)


class ReadAhead:
    """Fetch ``files`` in order, at most ``concurrency`` at once and ``ahead`` unread.

    Args:
        files: file ids in the order they will first be read.
        fetch: ``fetch(file_id)`` downloads one file into the cache, marked unread.
        unread: ``unread(file_id)`` is True while no reader has used the file.
        concurrency: requests in flight at most.
        ahead: fetched-but-unread files at most.
        first: how many of the first files are fetched before any other request starts.
    """

    def __init__(self, files, fetch, unread, *, concurrency: int, ahead: int, first: int = 0):
        self._files = list(files)
        self._fetch, self._unread = fetch, unread
        self._ahead = max(1, int(ahead))
        self._next = 0
        self._pending: list = []  # fetched by us, not yet seen read
        self._in_flight = 0
        self._first = min(max(0, int(first)), len(self._files))
        self._ended = 0  # fetches ended (done or failed)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # a finished fetch wakes one waiting thread
        self._checked = 0.0  # when the pending files were last checked for reads
        self._progress = time.monotonic()  # when a fetched file was last seen read
        self._idle_stop = current_mechanisms().read_ahead_idle_stop
        self._stop = threading.Event()
        self.fetched = 0
        self.failed: list = []  # (file id, error) of prefetches that failed; readers retry them
        self._threads = [threading.Thread(target=self._run, name=f"feedline-readahead-{k}", daemon=True)
                         for k in range(max(1, int(concurrency)))]
        for thread in self._threads:
            thread.start()

    def _take(self):
        """The next file to fetch, once fewer than ``ahead`` are unread; None when done or stopped."""
        with self._wake:
            while not self._stop.is_set():
                if self._next >= len(self._files):
                    return None
                now = time.monotonic()
                if now - self._checked >= _POLL:  # one thread looks (a stat per pending file), not every thread
                    unread = [f for f in self._pending if self._unread(f)]
                    if len(unread) < len(self._pending):
                        self._progress = now
                    self._pending, self._checked = unread, now
                opening = self._next >= self._first > self._ended  # the first files are still on their way
                if not opening and len(self._pending) + self._in_flight < self._ahead:
                    file = self._files[self._next]
                    self._next += 1
                    self._in_flight += 1
                    return file
                if now - self._progress > self._idle_stop:  # nobody reads (an epoch left early): end, do not wait forever
                    return None
                self._wake.wait(_POLL)
        return None

    def _run(self) -> None:
        while True:
            file = self._take()
            if file is None:
                return
            try:
                self._fetch(file)
            except CacheFull:  # the cache is full of files in use: the reader fetches this one when it needs it
                with self._lock:
                    self._end_one()
            except Exception as e:  # counted here, retried and reported by the reader that needs it
                with self._lock:
                    self.failed.append((file, e))
                    self._end_one()
            else:
                with self._lock:
                    self._pending.append(file)
                    self.fetched += 1
                    self._end_one()

    def _end_one(self) -> None:
        """A fetch ended (called under the lock): wake the threads that wait for a free slot or for the first files."""
        self._in_flight -= 1
        self._ended += 1
        if self._ended == self._first:
            self._wake.notify_all()
        else:
            self._wake.notify()

    @property
    def done(self) -> bool:
        """Every thread has ended."""
        return not any(t.is_alive() for t in self._threads)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop taking files and wait (up to ``timeout`` s) for requests in flight."""
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout)
