"""Whether this process imports a module: a stretch of work with an import in it says nothing of the GIL.

An import runs a module's code once, under that module's lock: a thread
that needs the module waits on the lock (not on the GIL, and using no
core), and the importing thread runs Python that no later sample runs. The
automatic choice leaves short ones out of the stretches it judges threads
on (`feedline.engine._trial`, `IMPORTS_SKIPPED`). CPython keeps an entry per module being
imported in its import bootstrap's ``_module_locks`` while that module
runs; where an interpreter has none, only the count of modules is read.
"""

from __future__ import annotations

import sys

__all__ = ["imports_seen"]

_MODULE_LOCKS: dict = getattr(sys.modules.get("_frozen_importlib"), "_module_locks", None) or {}


def imports_seen() -> tuple[int, bool]:
    """``(modules imported so far, whether a module is being imported now)``; cheap enough for every look (two dictionary reads)."""
    return len(sys.modules), bool(_MODULE_LOCKS)
