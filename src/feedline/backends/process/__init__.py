"""The process backend: workers in processes of their own, batches through shared memory.

Workers are forked from the fork server on Linux and macOS and are fresh
interpreters on Windows (`_workers`). `_executor` is the consumer's side,
`_main` the worker's entry point, `_forkserver_main` the fork server's; the
messages between consumer and workers are `feedline.worker._protocol`'s dataclasses.
Imported lazily so that a worker importing `_main` loads nothing else.
"""


def __getattr__(name: str):
    if name in ("ProcessExecutor", "MAX_ATTEMPTS"):
        from . import _executor

        return getattr(_executor, name)
    raise AttributeError(f"module 'feedline.backends.process' has no attribute {name!r}")


__all__ = ["MAX_ATTEMPTS", "ProcessExecutor"]
