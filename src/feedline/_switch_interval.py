"""A shorter GIL switch interval while feedline sets up and process workers start: only with ``FEEDLINE_TUNE_PROCESS=1``.

Each blocking call the consumer makes gives up the GIL, and getting it
back waits for whichever thread holds it to let go: up to the switch
interval, 5 ms by default. Starting process workers takes many such calls,
so beside Python threads that hold the GIL (a user's own, a second
pipeline on threads, the automatic choice's threads on GIL-bound work)
the first batch waits far longer than the workers take to start
(``python -m benchmarks.busy_threads``). The interval is the user's,
process-wide, with no per-thread form: feedline shortens it only where
the user opted in (`feedline._process_tuning`).

The holders (each takes its hold whether or not the opt-in is on, so the
count is the same either way): the automatic choice's trial
(`feedline.engine._trial`) while it has tasks in flight, every
`ProcessExecutor` from its first spawn until every worker has the
pipeline and while it closes, feedline's set-up in the consumer (the lazy
imports of `feedline.__getattr__` and ``map()``, `feedline.engine._runtime`),
and the consumer while it waits for batches from workers in other
processes (`Executor.workers_elsewhere`). Never while thread workers run:
a short interval costs GIL-bound threads CPU a sample. One class for every
holder, so the first hold saves the user's interval and only the last
release puts it back, whatever the order.
"""

from __future__ import annotations

import contextlib
import sys
import threading

from ._counted import CountedSetting
from ._process_tuning import tuning_on

__all__ = ["STARTUP_SWITCH_INTERVAL", "ShortSwitchInterval", "SwitchHold", "short_switch_interval"]

STARTUP_SWITCH_INTERVAL = 0.0005  # seconds: the GIL hand-over interval while process workers start beside busy threads


class ShortSwitchInterval(CountedSetting):
    """Hold `STARTUP_SWITCH_INTERVAL` (or the user's own, if shorter); the last `release` restores the previous one.

    >>> import os, sys
    >>> os.environ["FEEDLINE_TUNE_PROCESS"] = "1"  # the opt-in (`feedline._process_tuning`)
    >>> before = sys.getswitchinterval()
    >>> a, b = ShortSwitchInterval(), ShortSwitchInterval()
    >>> sys.getswitchinterval() <= STARTUP_SWITCH_INTERVAL
    True
    >>> a.release(); sys.getswitchinterval() <= STARTUP_SWITCH_INTERVAL
    True
    >>> b.release(); sys.getswitchinterval() == before
    True
    >>> del os.environ["FEEDLINE_TUNE_PROCESS"]
    """

    @staticmethod
    def apply() -> float | None:
        saved = sys.getswitchinterval()
        if not tuning_on():
            return None  # the user's interval, untouched
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
