"""The process backend: fresh interpreters as workers, batches through shared memory.

`_executor` is the consumer's side, `_main` the worker's entry point; the
messages between them are `feedline.worker._protocol`'s dataclasses.
Imported lazily so that a worker importing `_main` loads nothing else.
"""


def __getattr__(name: str):
    if name in ("ProcessExecutor", "MAX_ATTEMPTS"):
        from . import _executor

        return getattr(_executor, name)
    raise AttributeError(f"module 'feedline.backends.process' has no attribute {name!r}")


__all__ = ["MAX_ATTEMPTS", "ProcessExecutor"]
