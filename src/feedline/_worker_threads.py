"""One intra-op thread inside each feedline worker thread, and nowhere else.

A sample's tensor ops (a resize, a blur, a normalisation) would each fan
out to an OpenMP thread per core, and those threads are not the workers:
thread workers are already one per core. OpenMP's thread count is a
setting of the calling thread, so each feedline worker thread sets its own
to one (``omp_set_num_threads`` on every OpenMP runtime loaded, torch's
bundled libgomp among them); the user's threads, and threads started
later, keep the count they had. ``torch.set_num_threads`` is never called:
it also changes the count that every new thread starts from.

PyTorch reads its count per thread, lazily, at the thread's first op, and
would then set the OpenMP count back to its own; so `limit_this_thread`
first asks torch for its count (which does that reading) and sets one
after. Called when a worker thread starts and again before a task where
torch was imported after that.

NumPy's OpenBLAS has no per-thread count in its pthreads build (its
``openblas_set_num_threads_local`` changes every thread's), so its pool
is left alone unless the user opts in (`feedline._process_tuning`). The
program's own choice (``OMP_NUM_THREADS`` above one) is left alone too.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading

__all__ = ["limit_this_thread"]

_lock = threading.Lock()
_runtimes: dict[str, object] = {}  # path -> the OpenMP runtime's omp_set_num_threads, found once per library
_scanned_with_torch: bool | None = None  # whether torch was imported at the last scan (it brings its own libgomp)
_NOLOAD = 0 if sys.platform == "win32" else os.RTLD_NOLOAD  # find the library already loaded, never load another


class _Done(threading.local):
    with_torch: bool | None = None  # what this thread was limited with: None until it was


_local = _Done()


def limit_this_thread() -> None:
    """One OpenMP (and so torch intra-op) thread for the calling thread; a no-op once done, until torch is imported."""
    with_torch = "torch" in sys.modules
    if _local.with_torch is with_torch or _chosen_by_program():
        return
    _local.with_torch = with_torch
    if with_torch:
        try:
            sys.modules["torch"].get_num_threads()  # torch's per-thread reading, before ours
        except Exception:  # a torch that cannot run (a stub, a partial import): OpenMP alone
            pass
    for set_num_threads in _openmp_runtimes(with_torch):
        set_num_threads(1)


def _chosen_by_program() -> bool:
    """The program chose its OpenMP threads (``OMP_NUM_THREADS`` other than one): its choice."""
    return os.environ.get("OMP_NUM_THREADS", "1").strip() not in ("", "1")


def _openmp_runtimes(with_torch: bool) -> list:
    global _scanned_with_torch
    with _lock:
        if _scanned_with_torch is not with_torch:
            _scanned_with_torch = with_torch
            for path in _openmp_paths():
                if path not in _runtimes:
                    _runtimes[path] = _omp_set_num_threads(path)
        return [f for f in _runtimes.values() if f is not None]


def _openmp_paths() -> list[str]:
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # installed without its dependencies: the OpenMP count stays as it is
        return []
    return [c.filepath for c in ThreadpoolController().lib_controllers if c.user_api == "openmp"]


def _omp_set_num_threads(path: str):
    try:
        library = ctypes.CDLL(path, mode=_NOLOAD)
        function = library.omp_set_num_threads
    except (OSError, AttributeError):  # not loadable again, or not an OpenMP runtime after all
        return None
    function.argtypes, function.restype = [ctypes.c_int], None
    return function
