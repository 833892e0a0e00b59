"""The one opt-in that lets feedline change the training process's global settings: ``FEEDLINE_TUNE_PROCESS=1``.

The training process is the user's (DESIGN.md, principle 4). By default
feedline changes none of its global settings; its thread workers limit
themselves, per thread (`feedline._worker_threads`). With the variable set
to ``1``, while thread or serial executors live feedline also limits the
process's BLAS pools to one thread (`feedline._blas_limit`), freezes the
collector's view of the objects already made (`feedline._gc_freeze`),
sets glibc's heap thresholds for good (`feedline._malloc`), and shortens
the GIL switch interval while feedline sets up, process workers start and
the consumer waits for them (`feedline._switch_interval`). Each speeds up
the map on threads and slows down, or changes, the user's own code beside
it; ``print(pipe)`` says when it is on.
"""

from __future__ import annotations

import os

__all__ = ["TUNE_PROCESS_VAR", "describe", "tuning_on"]

TUNE_PROCESS_VAR = "FEEDLINE_TUNE_PROCESS"


def tuning_on() -> bool:
    """True where the user set ``FEEDLINE_TUNE_PROCESS=1``: read at each use, so a program may change it."""
    return os.environ.get(TUNE_PROCESS_VAR, "").strip() == "1"


def describe() -> str | None:
    """The line ``print(pipe)`` shows while the opt-in is on, else None."""
    if not tuning_on():
        return None
    return (f"# {TUNE_PROCESS_VAR}=1: while in-process workers live, this process runs BLAS on one thread, "
            "its collector skips the objects made before them, glibc keeps freed memory, "
            "and the GIL switch interval is short while process workers start")
