"""Keep the cyclic garbage collector off the objects that existed before in-process workers started.

Thread and serial workers run the per-sample Python in the training
process, which often holds a framework's hundreds of thousands of objects
(Keras and TensorFlow: ~275k; a bare NumPy interpreter: ~17k). Python's
full collections walk all of them, and a per-sample function that
allocates many containers triggers one every sample or two: in story 1
(examples/, a Keras Sequence with Python augmentation) an item took 126 ms
on a thread in the parent against 50 ms once those objects were frozen
(``gc.freeze()``) and 47 ms with the collector off. So while any thread or
serial executor lives, the objects that existed when the first one started
are moved to the collector's permanent generation; they go back when the
last one closes (``gc.unfreeze()``). Objects made meanwhile are collected as
usual, and reference counting still frees everything that is not in a
cycle; a cycle among the frozen objects that becomes garbage meanwhile
waits until the unfreeze.

Not done when the program froze objects itself (it manages the collector),
when the collector is disabled, or with ``FEEDLINE_GC_FREEZE=0``.
"""

from __future__ import annotations

import gc
import os

from ._counted import CountedSetting

__all__ = ["GcFreeze"]


class GcFreeze(CountedSetting):
    """A hold on the freeze: ``hold = GcFreeze()`` while in-process workers live, ``hold.release()`` after."""

    @staticmethod
    def apply() -> bool:
        allowed = os.environ.get("FEEDLINE_GC_FREEZE", "1") != "0" and gc.isenabled() and gc.get_freeze_count() == 0
        if allowed:
            gc.freeze()
        return allowed

    @staticmethod
    def undo(froze: bool) -> None:
        if froze:
            gc.unfreeze()
