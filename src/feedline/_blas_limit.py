"""One BLAS thread per call while thread workers live: NumPy's own thread pool beside them oversubscribes the cores.

NumPy's OpenBLAS starts a thread per core and splits each matrix product
among them. Thread workers are already one per core, so every small
product a sample makes (a log-mel filter bank, a colour matrix) fans out to
threads that the other workers need: the suite's audio workload (one
matrix product per sample) on two thread workers ran at 3,406 samples/s
with the pool at its default and 4,805 with one BLAS thread (2 cores,
medians of four interpreters; `python -m benchmarks.blas_threads`). Process workers get
one thread through their environment (``backends.process``); threads share
this process, so while any thread executor lives, the BLAS libraries loaded
here are limited to one thread (threadpoolctl), and the limits they had
come back when the last one closes.

Meanwhile BLAS calls elsewhere in this process (a NumPy model trained on
the CPU beside the loader) run on one thread too. Not done when the program
set a BLAS thread count above one itself (one of `USER_BLAS_VARS`: its
choice), with ``FEEDLINE_BLAS_LIMIT=0``, or without threadpoolctl. A count
of one set in the environment is done all the same: set after NumPy was
imported (a script's ``os.environ["OMP_NUM_THREADS"] = "1"`` below its
imports), it reaches only processes started later, and this process's pool
kept a thread per core; after each product those threads spin, waiting for
the next (the suite's audio workload, 2 cores, automatic choice: its one
extra thread spun ~0.1 s of CPU in each 0.75 s epoch, most of it in the
first 0.25 s while the process workers started; 6,739 samples/s against
7,266 limited, medians of ten epochs in one interpreter).
"""

from __future__ import annotations

import os

from ._counted import CountedSetting

__all__ = ["USER_BLAS_VARS", "OneBlasThread"]

USER_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")  # a program that set one of these chose its BLAS threads (process workers: 1)


class OneBlasThread(CountedSetting):
    """A hold on the limit: ``hold = OneBlasThread()`` while thread workers live, ``hold.release()`` after."""

    @staticmethod
    def apply():
        chosen = {os.environ[v].strip() for v in USER_BLAS_VARS if os.environ.get(v)}
        if os.environ.get("FEEDLINE_BLAS_LIMIT", "1") == "0" or chosen - {"1"}:
            return None  # turned off, or the program chose more than one BLAS thread
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
