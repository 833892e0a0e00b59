"""A shorter GIL switch interval while process workers start: one process-wide hold, counted.

Starting a process worker takes the consumer process a few hundred
blocking calls (spawning, the hand-shake on the accept thread, reading
each worker's first messages). Each gives up the GIL, and getting it back
waits for whichever thread holds it to let go: up to the switch interval,
5 ms by default. Beside Python threads that hold the GIL (the automatic
choice's threads on GIL-bound work, a user's own threads, a second
pipeline on threads) two process workers took 0.6-0.75 s to deliver a
first batch instead of 12-170 ms; at 0.5 ms, 54 ms (fork server) and
0.33 s (fresh interpreters), 2 cores. With no busy thread nothing waits,
and the shorter interval costs nothing.

Held by the automatic choice's trial (`feedline.engine._trial`) from its
start, by every `ProcessExecutor` while any of its workers is starting or
closing, and by feedline's own set-up in the consumer: the lazy imports of
`feedline.__getattr__` and ``map()`` (about 120 modules, each read from
disk: 2-3.5 s of describing a pipeline beside two spinning threads instead
of 60 ms) and building the running pipeline (`feedline.engine._runtime`).
One class for both, so the first hold saves the user's interval and only
the last release puts it back, whatever the order.
"""

from __future__ import annotations

import contextlib
import sys

from ._counted import CountedSetting

__all__ = ["STARTUP_SWITCH_INTERVAL", "ShortSwitchInterval", "short_switch_interval"]

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
