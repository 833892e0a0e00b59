"""`NotStarted`: the stand-in executor for a backend the automatic choice's trial has not started.

The process workers before the trial starts them, or the threads of a run
that starts on a remembered verdict for processes. It implements the whole
`Executor` protocol with nothing behind it: it holds no task, so the trial
never waits on it, and every capability gives its neutral default (nothing
watched, steered or taken back). A task routed to it is a bug.
"""

from __future__ import annotations

from ..backends import Executor

__all__ = ["NotStarted"]


class NotStarted(Executor):
    """A backend `feedline.engine._trial.BackendTrial` has not started: no tasks, nothing to wait for."""

    restarts = 0

    def __init__(self, workers: int, name: str = "process", cores: int = 1):
        self.workers, self.name, self.cores = workers, name, cores

    def submit(self, key, task, affinity=None):
        raise RuntimeError("feedline: a task went to process workers that were never started (a bug; please report it)")

    def wait(self, timeout):
        return []

    def outstanding(self) -> int:
        return 0

    def cancel(self, generation: int) -> None:
        pass  # nothing queued or running here

    def set_window_share(self, tasks) -> None:
        pass  # `BackendTrial` passes it on once the workers start

    def close(self) -> None:
        pass
