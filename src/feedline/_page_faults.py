"""What the calling thread has taken from the kernel so far: minor page faults and system CPU time (Linux; zeros elsewhere).

A task's difference of the two says how much memory its samples got fresh
from the kernel, each page zeroed on first touch. glibc hands freed memory
back once the free space at a heap's top passes its trim threshold, which
by default is only twice the largest block it saw freed; a map whose
samples' arrays together pass it faults every page of them in again,
batch after batch. Process workers avoid that through their environment
(`feedline._malloc`); thread workers run in the user's process, whose
allocator is the user's, so the epoch's report says what it cost instead.
"""

from __future__ import annotations

import mmap

__all__ = ["PAGE_SIZE", "thread_kernel_use"]

PAGE_SIZE = mmap.PAGESIZE  # bytes a page fault gives (4 KiB on x86-64 Linux)

try:
    import resource

    _THREAD = resource.RUSAGE_THREAD
except (ImportError, AttributeError):  # Windows has no resource module; macOS no per-thread usage
    resource, _THREAD = None, None


def thread_kernel_use() -> tuple[int, float]:
    """``(minor page faults, system CPU seconds)`` of the calling thread so far; ``(0, 0.0)`` where unknown.

    >>> faults, seconds = thread_kernel_use()
    >>> faults >= 0 and seconds >= 0.0
    True
    """
    if _THREAD is None:
        return 0, 0.0
    usage = resource.getrusage(_THREAD)
    return usage.ru_minflt, usage.ru_stime
