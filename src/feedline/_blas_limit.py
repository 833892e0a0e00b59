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

PyTorch's intra-op pool is the same trap (`OneTorchThread`): a sample's
tensor ops (a resize, a blur, a normalisation) each fan out to a thread
per core, and those threads are not the workers, so the automatic choice
saw two thread workers keep one core busy between them, judged them held
back by the GIL, and started process workers, each importing torch (2 cores, three
ops on a 3x320x320 tensor per sample, 512 samples, `python -m
benchmarks.blas_threads --workload torch`: the automatic choice's first
epoch 289 samples/s with the pool as is, 610 limited, which keeps the
threads at once; threads by hand 653 and 776 in later epochs). It
applies where torch is imported before the thread workers start (a thread
picks its count up at its first op); `OMP_NUM_THREADS` or
`MKL_NUM_THREADS` above one, or ``FEEDLINE_BLAS_LIMIT=0``, leave it alone.
"""

from __future__ import annotations

import os
import sys

from ._counted import CountedSetting

__all__ = ["USER_BLAS_VARS", "OneBlasThread", "OneTorchThread"]

USER_BLAS_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                  "VECLIB_MAXIMUM_THREADS")  # a program that set one of these chose its BLAS threads (process workers: 1)


def _left_alone(variables=USER_BLAS_VARS) -> bool:
    """Turned off (``FEEDLINE_BLAS_LIMIT=0``), or the program chose more than one thread in one of ``variables``."""
    chosen = {os.environ[v].strip() for v in variables if os.environ.get(v)}
    return os.environ.get("FEEDLINE_BLAS_LIMIT", "1") == "0" or bool(chosen - {"1"})


class OneBlasThread(CountedSetting):
    """A hold on the limit: ``hold = OneBlasThread()`` while thread workers live, ``hold.release()`` after."""

    @staticmethod
    def apply():
        if _left_alone():
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


class OneTorchThread(CountedSetting):
    """One PyTorch intra-op thread while thread workers live, where torch is imported (see the module docstring)."""

    @staticmethod
    def apply():
        torch = sys.modules.get("torch")
        if torch is None or _left_alone(("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
            return None
        try:
            before = torch.get_num_threads()
            if before <= 1:
                return None
            torch.set_num_threads(1)
            return before
        except Exception:  # a torch this build cannot drive (a stub module, a partial import): leave it
            return None

    @staticmethod
    def undo(before) -> None:
        torch = sys.modules.get("torch")
        if before is not None and torch is not None:
            torch.set_num_threads(before)
