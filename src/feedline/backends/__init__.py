"""Execution backends: where a pipeline's per-sample work runs.

Every backend runs the same `feedline.worker.run_task` on the same tasks
and returns the same `Result` objects; they differ only in where the work
runs. The engine sees only the `Executor` interface and `make_executor`.
The executors themselves are imported on first use: a process worker
imports `backends.process._main` and needs none of them.
"""

from ._base import Event, Executor, PartNotPicklable, check_not_loading, in_worker
from ._factory import check_sendable, load_process_backend, make_executor, warm_up, warmed_up, warming_up

__all__ = ["Event", "Executor", "PartNotPicklable", "check_not_loading", "check_sendable", "in_worker", "load_process_backend", "make_executor", "warm_up", "warmed_up",
           "warming_up"]
