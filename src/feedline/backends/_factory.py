"""One place that turns a backend choice into a running executor."""

from __future__ import annotations

from .._forking import use_forkserver
from ._base import Executor, PartNotPicklable

__all__ = ["check_sendable", "load_process_backend", "make_executor", "warm_up", "warmed_up", "warming_up"]


def check_sendable(part) -> None:
    """Raise `PartNotPicklable` if ``part`` cannot be sent to process workers (a dry run: large arrays are not copied)."""
    from ..transport._transfer import check_picklable

    try:
        check_picklable(part)
    except Exception as e:
        raise PartNotPicklable(str(e)) from e


def warm_up(backend: str | None, described: tuple = ()) -> None:
    """Start, ahead of time, what an executor of ``backend="process"`` will need: the fork server (POSIX).

    It holds no user state and serves every pipeline of this process.
    ``described``: the source and steps of a map being described; the
    installed libraries they use are then imported by the server's zygote
    in the background (`process._workers.prepare_zygote`), as a
    DataLoader's workers fork from a process that has them already. When
    this is called (a map described, a start after set-up, a pipeline about
    to run) is the start-up policy's, in `feedline._startup`; the automatic
    choice's trial also calls it once its threads show they need processes.
    """
    if backend != "process" or not use_forkserver():
        return
    from .process._forkserver import forkserver
    from .process._workers import FIXED_VARS, prepare_zygote, worker_env

    forkserver(worker_env(), FIXED_VARS)
    if described:
        prepare_zygote(described)


def load_process_backend() -> None:
    """Import the process backend's modules now (multiprocessing, subprocess, the fork server's client).

    For the automatic choice, before its threads start: its trial asks
    whether a fork server is up while it measures the threads, and
    importing these then, in the consumer's thread, would hold the GIL in
    the threads' first moments and make threads that release it look held
    back by it.
    """
    from .process import _executor, _forkserver  # noqa: F401


def warmed_up() -> bool:
    """Whether process workers would start at once here: what `warm_up` starts is up (POSIX, the fork server on)."""
    from .process._forkserver import ready

    return use_forkserver() and ready()


def warming_up() -> bool:
    """Whether what `warm_up` started is still starting (a fork server importing takes a core meanwhile)."""
    from .process._forkserver import starting

    return starting()


def make_executor(backend: str, part, workers: int, *, cores: int, ray=None, held: bool = False) -> Executor:
    """Start the executor for ``backend`` with ``workers`` workers.

    Args:
        part: the `WorkerPart` every worker runs.
        cores: cores available here (the report's denominator).
        ray: the `feedline.Ray` settings, for ``backend="ray"`` (its worker
            count, if None, is chosen from the cluster).
        held: process workers start and connect but get the pipeline only
            at `Executor.release` (the automatic choice, before its verdict);
            forked from the fork server, their pipeline is pickled (its
            large arrays copied into shared memory) and they fork in a
            thread of their own, so this returns at once and the consumer
            goes on with its threads' batches meanwhile.

    Raises:
        PartNotPicklable: the part cannot travel to other processes.
    """
    if backend == "process":
        from .process import ProcessExecutor

        executor = ProcessExecutor(part, workers, held=held)
    elif backend == "ray":
        from .ray import RayExecutor

        executor = RayExecutor(part, workers, ray)
    elif backend == "thread":
        from ._thread import ThreadExecutor

        executor = ThreadExecutor(part, workers)
    else:
        from ._serial import SerialExecutor

        executor = SerialExecutor(part)
    if backend != "ray":
        executor.cores = cores
    return executor
