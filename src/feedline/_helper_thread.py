"""One helper thread for work the training loop should not wait on: results come back in submission order.

Used where the consumer's own thread would otherwise do bulk work between
training steps: the pinned copy and device copy of each batch
(`adapters.torch`), and the GPU decode of the next batch
(`vision.DeviceJpegDecoder.ahead`). The work there runs in native code
with the GIL released, so the loop's thread keeps launching the step.
"""

from __future__ import annotations

import collections
import concurrent.futures

__all__ = ["OrderedHelper"]


class OrderedHelper:
    """Runs ``fn(item)`` on one helper thread (or at once, with ``threaded=False``); `result` takes them in order.

    A context manager: leaving it cancels the calls that have not started
    and waits for the one running, so nothing it reads (a batch in shared
    memory) is released under it.

    >>> with OrderedHelper(lambda v: v * 2) as helper:
    ...     pending = [helper.submit(v) for v in range(3)]
    ...     [helper.result(p) for p in pending]
    [0, 2, 4]
    """

    def __init__(self, fn, threaded: bool = True, name: str = "feedline-helper"):
        self._fn = fn
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name) if threaded else None

    def submit(self, item):
        """Start ``fn(item)``; returns what `result` takes (its result at once when not threaded)."""
        if self._pool is None:
            return self._fn(item)
        return self._pool.submit(self._fn, item)

    def result(self, pending):
        """The result of a `submit` (waits for it; its exception is raised here)."""
        return pending if self._pool is None else pending.result()

    def ahead(self, items, depth: int):
        """``fn(item)`` for each of ``items``, in order, each submitted ``depth`` items before it is yielded.

        >>> with OrderedHelper(lambda v: v + 1) as helper:
        ...     list(helper.ahead(range(4), depth=2))
        [1, 2, 3, 4]
        """
        pending: collections.deque = collections.deque()
        for item in items:
            pending.append(self.submit(item))
            del item  # the helper holds it only as long as it needs it
            if len(pending) > depth:
                yield self.result(pending.popleft())
        while pending:
            yield self.result(pending.popleft())

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
