"""Keep the cyclic collector off the objects made before in-process workers started: only with ``FEEDLINE_TUNE_PROCESS=1``.

Thread and serial workers run the per-sample Python in the training
process, which often holds a framework's hundreds of thousands of objects;
full collections walk all of them, and a per-sample function that
allocates many containers triggers one every sample or two. Where the
user opted in (`feedline._process_tuning`), while any thread or serial
executor lives the objects that existed when the first one started are
moved to the collector's permanent generation (``gc.freeze()``), and go
back when the last one closes. The collector is the user's, so by default
it is left alone. Not done either when the program froze objects itself
or disabled the collector.
"""

from __future__ import annotations

import gc

from ._counted import CountedSetting
from ._process_tuning import tuning_on

__all__ = ["GcFreeze"]


class GcFreeze(CountedSetting):
    """A hold on the freeze: ``hold = GcFreeze()`` while in-process workers live, ``hold.release()`` after."""

    @staticmethod
    def apply() -> bool:
        allowed = tuning_on() and gc.isenabled() and gc.get_freeze_count() == 0
        if allowed:
            gc.freeze()
        return allowed

    @staticmethod
    def undo(froze: bool) -> None:
        if froze:
            gc.unfreeze()
