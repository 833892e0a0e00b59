"""Execution backends: where a pipeline's per-sample work runs.

Every backend runs the same `feedline._plan.run_task` on the same tasks and
returns the same `Result` objects; they differ only in where the work runs.
The consumer-side loop (`feedline._iterator`) does not know which one it
drives.
"""

from ._base import Event, Executor
from ._process import ProcessExecutor
from ._serial import SerialExecutor
from ._thread import ThreadExecutor

__all__ = ["Event", "Executor", "ProcessExecutor", "SerialExecutor", "ThreadExecutor"]
