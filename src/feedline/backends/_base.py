"""The interface every execution backend implements."""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Event", "Executor", "requeue"]


class Event(NamedTuple):
    """A finished task: its key ``(generation, task number)`` and `Result`."""

    key: tuple
    result: object


class Executor:
    """Runs tasks for one pipeline; workers live as long as the executor.

    The consumer calls `submit` for each task (at most the prefetch depth
    outstanding) and `wait` to collect finished ones in any order. Task keys
    carry an iterator generation so results of an abandoned epoch can be
    told apart and dropped.
    """

    name = "base"
    workers = 1

    def submit(self, key: tuple, task, affinity: int | None = None) -> None:
        """Queue ``task``; ``affinity`` pins tasks of one stream shard to one worker."""
        raise NotImplementedError

    def wait(self, timeout: float | None) -> list[Event]:
        """Finished tasks (possibly none if ``timeout`` passed)."""
        raise NotImplementedError

    def outstanding(self) -> int:
        """Tasks submitted and not yet returned by `wait`."""
        raise NotImplementedError

    def cancel(self, generation: int) -> None:
        """Forget the unreturned tasks of ``generation``: their results are dropped."""

    def close(self) -> None:
        """Stop the workers and release every resource; idempotent."""


def requeue(backlog, redo, position: int, shard_positions: dict) -> None:
    """Put the unfinished tasks of a dead worker back at the front of ``backlog``.

    Indexed tasks go to any worker; a generator shard's tasks stay with the
    worker's replacement (``position``) and restart the shard where its last
    delivered result left it, so no streamed sample is repeated or lost.
    """
    restarted = set()
    for _, task in redo:
        if task.shard is not None and task.shard not in restarted:
            restarted.add(task.shard)
            task.start = shard_positions.get((task.epoch, task.shard), task.start or 0)
    backlog.extendleft(reversed([(key, task, position if task.shard is not None else None) for key, task in redo]))
