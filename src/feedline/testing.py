"""A small window into a running pipeline, for tests and benchmarks (not for training code).

Tests that check the machinery (worker processes, the prefetch window)
need to see it; they use these functions instead of private attributes,
so the inside can change without breaking them.

>>> import numpy as np, feedline as fl
>>> from feedline import testing
>>> pipe = fl.from_arrays(np.arange(4)).map(lambda x: x, backend="thread", workers=2).batch(2)
>>> testing.runtime(pipe) is None  # nothing runs before the first iteration
True
>>> _ = list(pipe)
>>> testing.runtime(pipe).backend, testing.worker_pids(pipe)
('thread', [])
>>> pipe.close()
"""

from __future__ import annotations

__all__ = ["executor", "helper_pids", "runtime", "wait_ready", "worker_pids"]


def runtime(pipe):
    """The pipeline's `feedline.engine.Runtime` (backend, workers, depth, decision), or None before it runs."""
    return pipe._runtime


def executor(pipe):
    """The running `feedline.backends.Executor`, or None before the pipeline runs."""
    rt = pipe._runtime
    return rt.executor if rt is not None else None


def worker_pids(pipe) -> list[int]:
    """Process ids of the pipeline's worker processes (empty for serial and thread backends)."""
    ex = executor(pipe)
    return ex.worker_pids() if ex is not None else []


def helper_pids() -> list[int]:
    """Long-lived helper processes of this process that are not workers: the process backend's fork servers.

    A fork server lives until this process exits; its children are the
    process workers (so a worker's parent is a fork server, not this process).
    """
    from .backends.process._forkserver import server_pids

    return server_pids()


def wait_ready(pipe, timeout: float | None = None) -> bool:
    """Block until every worker of a running pipeline can take tasks; False on timeout."""
    ex = executor(pipe)
    return ex.wait_ready(timeout) if ex is not None else False
