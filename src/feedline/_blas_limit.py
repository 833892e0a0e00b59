"""One BLAS thread per call in this process while thread workers live: only with ``FEEDLINE_TUNE_PROCESS=1``.

NumPy's OpenBLAS starts a thread per core and splits each matrix product
among them; thread workers are already one per core, so a small product
per sample fans out to threads the other workers need. Its pthreads build
has no per-thread count, so limiting it limits the user's own NumPy in
the training process too: feedline does so only where the user opted in
(`feedline._process_tuning`), and gives the limits back when the last
thread executor closes. Process workers get one thread through their
environment (``backends.process``). Not done where the program set a BLAS
thread count above one itself (one of `USER_BLAS_VARS`), or without
threadpoolctl.
"""

from __future__ import annotations

import os

from ._counted import CountedSetting
from ._process_tuning import tuning_on

__all__ = ["USER_BLAS_VARS", "OneBlasThread"]

USER_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")  # a program that set one of these chose its BLAS threads (process workers: 1)


def _chosen_by_program() -> bool:
    """The program chose more than one thread in one of `USER_BLAS_VARS`."""
    chosen = {os.environ[v].strip() for v in USER_BLAS_VARS if os.environ.get(v)}
    return bool(chosen - {"1"})


class OneBlasThread(CountedSetting):
    """A hold on the limit: ``hold = OneBlasThread()`` while thread workers live, ``hold.release()`` after."""

    @staticmethod
    def apply():
        if not tuning_on() or _chosen_by_program():
            return None
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # installed without its dependencies: the pool keeps its default
            return None
        try:
            return threadpool_limits(limits=1, user_api="blas")
        except Exception:  # a library threadpoolctl cannot drive: leave it as it is
            return None

    @staticmethod
    def undo(limiter) -> None:
        if limiter is not None:
            limiter.restore_original_limits()
