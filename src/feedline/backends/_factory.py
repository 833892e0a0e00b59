"""One place that turns a backend choice into a running executor."""

from __future__ import annotations

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
    """Start, ahead of time, what an executor of ``backend="process"`` will need.

    The process backend's fork server imports NumPy and feedline once
    (~0.1-0.2 s of a core); started before the pickling of the pipeline,
    that overlaps them. It holds no user state. Not for the automatic
    choice (None) here: it starts process workers only once threads have
    shown they hold the GIL (`feedline.engine._trial`), and on 2 cores a
    fork server importing beside threads that keep every core busy took
    the cores they needed (measured: the story examples whose threads win
    ran 0.76-0.90 of threads set by hand with it, 0.98-1.04 without); on
    8 cores or more, `feedline.engine._runtime.start_early` starts it for
    the automatic choice too, when its map is described.

    ``described``: the source and steps of a map being described. The
    installed libraries they use (torch: ~1.5 s) are then imported by the
    server's zygote in the background (`process._executor.prepare_zygote`),
    while the user builds a model, as a DataLoader's workers fork from a
    process that has them already.
    """
    if backend != "process":
        return
    from .process._executor import FIXED_VARS, prepare_zygote, use_forkserver, worker_env
    from .process._forkserver import forkserver

    if use_forkserver():
        forkserver(worker_env(), FIXED_VARS)
        if described:
            prepare_zygote(described)


def load_process_backend() -> None:
    """Import the process backend's modules now (multiprocessing, subprocess, the fork server's client: ~15 ms).

    For the automatic choice, before its threads start: its trial asks
    whether a fork server is up while it measures the threads, and that
    first question imported these in the consumer thread, holding the GIL
    for 10-15 ms in the threads' first 50 ms; threads that release it
    (jpeg) then kept 0.5-0.9 of 2 cores busy there and were judged held
    back by the GIL in a fresh interpreter.
    """
    from .process import _executor, _forkserver  # noqa: F401


def warmed_up() -> bool:
    """Whether process workers would start at once here: what `warm_up` starts is up (POSIX, the fork server on)."""
    from .process._executor import use_forkserver
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
            at `Executor.release` (the automatic choice, before its verdict).

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
