"""How long this process's garbage collector spends in full collections while in-process workers run: observed only.

Thread and serial workers run the per-sample Python in the training
process. There a map that allocates many containers triggers full
collections, and each walks every object the process holds (a framework's
hundreds of thousands), with the GIL held: every thread, the consumer's
among them, waits meanwhile. The collector is the user's, so feedline does
not change it (`feedline._gc_freeze` does only under the opt-in); while a
thread or serial executor lives, a callback in ``gc.callbacks`` times the
full collections, so that the epoch's report can say what they cost and
what to do (``gc.freeze()`` after set-up). The callback is removed when
the last such executor closes.
"""

from __future__ import annotations

import gc
import time

from ._counted import CountedSetting

__all__ = ["CollectorWatch", "full_collections"]

_seconds = 0.0  # in full collections while watched, so far
_count = 0
_began: float | None = None


def _on_collection(phase: str, info: dict) -> None:
    """``gc.callbacks`` entry: time each full (generation 2) collection; run by the collecting thread, under the GIL."""
    global _seconds, _count, _began
    if info.get("generation") != 2:
        return
    if phase == "start":
        _began = time.perf_counter()
    elif _began is not None:
        _seconds += time.perf_counter() - _began
        _count += 1
        _began = None


def full_collections() -> tuple[float, int]:
    """(seconds, count) of the full collections watched so far in this process: read twice, the difference is a span's."""
    return _seconds, _count


class CollectorWatch(CountedSetting):
    """A hold on the watch: ``hold = CollectorWatch()`` while in-process workers live, ``hold.release()`` after.

    >>> hold = CollectorWatch()
    >>> before = full_collections()
    >>> _ = gc.collect()
    >>> full_collections()[1] == before[1] + 1
    True
    >>> hold.release()
    """

    @staticmethod
    def apply() -> None:
        gc.callbacks.append(_on_collection)

    @staticmethod
    def undo(state) -> None:
        global _began
        if _on_collection in gc.callbacks:
            gc.callbacks.remove(_on_collection)
        _began = None
