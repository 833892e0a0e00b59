"""Execution backends: where a pipeline's per-sample work runs.

Every backend runs the same `feedline._plan.run_task` on the same tasks and
returns the same `Result` objects; they differ only in where the work runs.
The consumer-side loop (`feedline._iterator`) does not know which one it
drives.
"""

import importlib

from ._base import Event, Executor

# The executors are imported on first use: a process worker imports
# `backends._worker` and needs none of them.
_WHERE = {"ProcessExecutor": "._process", "SerialExecutor": "._serial", "ThreadExecutor": "._thread"}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline.backends' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)

__all__ = ["Event", "Executor", "ProcessExecutor", "SerialExecutor", "ThreadExecutor"]
