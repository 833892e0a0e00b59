"""How long a thread waited for a CPU while runnable: to tell threads that other programs starve from threads that wait on I/O."""

from __future__ import annotations

import os

__all__ = ["CpuWaitClock"]

_SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: CPU ns, ns runnable but waiting for a CPU, time slices


class CpuWaitClock:
    """Seconds the thread that made it has been runnable but waiting for a CPU (Linux); 0.0 where the system does not say.

    A thread waiting on a file or the network is blocked; one that other
    programs keep off the cores is runnable. Both use little CPU, and only
    the first is helped by more threads: the automatic choice adds this wait
    to a thread task's CPU time before calling it I/O-bound
    (`feedline.engine._trial`), and the report says when the workers waited
    for a CPU (`feedline.engine._report`). Made, read and closed by the
    thread it measures (``/proc/thread-self`` names the opener): one
    ``pread`` a read.
    """

    def __init__(self):
        try:
            self._fd: int | None = os.open(_SCHEDSTAT, os.O_RDONLY)
        except OSError:  # not Linux, or /proc is not mounted
            self._fd = None

    def read(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            return 0.0

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
