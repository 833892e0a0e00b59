"""glibc's heap thresholds: freed temporaries kept for the next sample, not handed back and faulted in again.

glibc hands memory back to the OS once the free space at the top of a heap
passes its trim threshold, which starts at 128 KB and grows only to twice
the largest block it has seen freed from a mapping. A sample whose
temporaries together pass that (three 3 MB arrays; a tensor resized,
blurred and normalised) then faults every page of them in again, sample
after sample.

Process workers get the thresholds through their environment (glibc reads
it as it starts: `MALLOC_VARS`). Thread workers run in the user's own
process; `keep_freed_memory` sets the same values there with ``mallopt``
only where the user opted in (`feedline._process_tuning`), when the first
thread workers start. It cannot be undone (glibc stops adapting its
thresholds once they are set), so it stays: the program's heaps keep up to
`TRIM_THRESHOLD` of freed space each. Not done where the program chose its
own (``MALLOC_*_`` variables, or ``glibc.malloc`` tunables in
``GLIBC_TUNABLES``), or on another C library (musl, macOS, Windows);
``FEEDLINE_MALLOC=0`` leaves the process workers' environment alone too.
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading

from ._process_tuning import tuning_on

__all__ = ["MALLOC_VARS", "MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory", "turned_off"]

MMAP_THRESHOLD = 16 << 20  # bytes: blocks smaller than this come from the heap, not a mapping of their own
TRIM_THRESHOLD = 128 << 20  # bytes of free space a heap keeps at its top before handing memory back
MALLOC_VARS = {"MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD), "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD)}
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)
_USER_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")

_lock = threading.Lock()
_set: bool | None = None  # what `keep_freed_memory` did: None until its first call


def turned_off() -> bool:
    """``FEEDLINE_MALLOC=0``: glibc left as it is, here and in the process workers' environment."""
    return os.environ.get("FEEDLINE_MALLOC", "1") == "0"


def _chosen_by_program() -> bool:
    return any(os.environ.get(v) for v in _USER_VARS) or "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", "")


def keep_freed_memory() -> bool:
    """Set `MALLOC_VARS`' thresholds in this process, once, where the user opted in; True if they are set."""
    global _set
    if not tuning_on():
        return bool(_set)
    with _lock:
        if _set is None:
            _set = _mallopt()
        return _set


def _mallopt() -> bool:
    if turned_off() or _chosen_by_program() or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
