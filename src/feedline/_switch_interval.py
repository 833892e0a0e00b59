"""A shorter GIL switch interval while feedline sets up and process workers start: one process-wide hold, counted.

Each blocking call the consumer makes gives up the GIL, and getting it
back waits for whichever thread holds it to let go: up to the switch
interval, 5 ms by default. Starting two process workers takes ~150 such
calls (spawning, the hand-shake on the accept thread, the workers' first
messages), and describing the first pipeline imports ~120 modules, each
read from disk. Beside Python threads that hold the GIL (a user's own, a
second pipeline on threads, the automatic choice's threads on GIL-bound
work) a ``map(fn, backend="process", workers=2)`` took 2.5 s to its first
batch instead of 0.25 s; holding 0.5 ms meanwhile, 0.6 s
(``python -m benchmarks.busy_threads``, 2 cores). With no busy thread
nothing waits, and the shorter interval changes nothing.

Held by the automatic choice's trial (`feedline.engine._trial`) from its
start while it has tasks in flight, by every `ProcessExecutor` from its
first spawn until every worker has the pipeline (held workers: until
they are connected and waiting for it) and while it closes, by feedline's set-up in
the consumer (the lazy imports of `feedline.__getattr__` and ``map()``,
building the running pipeline in `feedline.engine._runtime`), and by the
consumer while it waits for batches from workers in other processes
(`Executor.workers_elsewhere`; 4,096 tiny samples beside two spinning
threads: 0.89 s an epoch instead of 1.52). Not while thread workers run:
a 0.5 ms interval costs GIL-bound threads ~5 % more CPU a sample. One
class for every holder, so the first hold saves the user's interval and
only the last release puts it back, whatever the order.
"""

from __future__ import annotations

import contextlib
import sys
import threading

from ._counted import CountedSetting

__all__ = ["STARTUP_SWITCH_INTERVAL", "ShortSwitchInterval", "SwitchHold", "short_switch_interval"]

STARTUP_SWITCH_INTERVAL = 0.0005  # seconds: the GIL hand-over interval while process workers start beside busy threads


class ShortSwitchInterval(CountedSetting):
    """Hold `STARTUP_SWITCH_INTERVAL` (or the user's own, if shorter); the last `release` restores the previous one.

    >>> import sys
    >>> before = sys.getswitchinterval()
    >>> a, b = ShortSwitchInterval(), ShortSwitchInterval()
    >>> sys.getswitchinterval() <= STARTUP_SWITCH_INTERVAL
    True
    >>> a.release(); sys.getswitchinterval() <= STARTUP_SWITCH_INTERVAL
    True
    >>> b.release(); sys.getswitchinterval() == before
    True
    """

    @staticmethod
    def apply() -> float | None:
        saved = sys.getswitchinterval()
        if saved <= STARTUP_SWITCH_INTERVAL:
            return None  # untouched: Python keeps whole microseconds, so setting it again would not give it back exactly
        sys.setswitchinterval(STARTUP_SWITCH_INTERVAL)
        return saved

    @staticmethod
    def undo(saved: float | None) -> None:
        if saved is not None:
            sys.setswitchinterval(saved)


@contextlib.contextmanager
def short_switch_interval():
    """Hold `ShortSwitchInterval` for a ``with`` block: feedline's set-up in the consumer."""
    hold = ShortSwitchInterval()
    try:
        yield
    finally:
        hold.release()


class SwitchHold:
    """One owner's hold on `ShortSwitchInterval`, taken and given back as its state changes.

    `take` and `give_back` may each be called any number of times, from
    any thread: the owner holds at most one count. Used by the trial (while
    it has tasks in flight) and by process executors (while workers start).

    >>> hold = SwitchHold()
    >>> hold.take(); hold.take(); hold.held
    True
    >>> hold.give_back(); hold.give_back(); hold.held
    False
    """

    def __init__(self):
        self._hold: ShortSwitchInterval | None = None
        self._lock = threading.Lock()

    @property
    def held(self) -> bool:
        return self._hold is not None

    def take(self) -> None:
        with self._lock:
            if self._hold is None:
                self._hold = ShortSwitchInterval()

    def give_back(self) -> None:
        with self._lock:
            if self._hold is not None:
                self._hold.release()
                self._hold = None
