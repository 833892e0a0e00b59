"""Scheduling shared by the executors whose workers live in other processes (process, Ray).

A task waits in the backlog until a ready worker has room in its share of
the prefetch window (late binding: the first worker up cannot take the
whole window, and the end of the epoch stays balanced); a stream shard's
tasks always go to the same worker. When a worker dies, its unfinished
tasks go back to the front of the backlog (`requeue`) and the one it was
running counts an attempt (`blame`); after `MAX_ATTEMPTS` the executor
fails that task with an error naming the sample instead of looping.
"""

from __future__ import annotations

import collections
from typing import Callable

__all__ = ["MAX_ATTEMPTS", "PER_WORKER", "TaskPool"]

MAX_ATTEMPTS = 3  # a task that kills its worker this many times fails instead of looping
PER_WORKER = 2  # default tasks per worker (one running, one queued); the runtime sets its share of the window


class TaskPool:
    """The backlog, attempts, cancelled generations and stream positions of one executor."""

    def __init__(self):
        self.backlog: collections.deque = collections.deque()  # (key, task, affinity)
        self.attempts: collections.Counter = collections.Counter()
        self.cancelled: set[int] = set()
        self.shard_positions: dict = {}  # (epoch, shard) -> raw position after the last delivered result
        self._held: list = []  # Events for the next wait(): tasks that cannot be redone, results taken early
        self.per_worker = PER_WORKER

    def __len__(self) -> int:
        return len(self.backlog)

    def add(self, key, task, affinity: int | None = None, first: bool = False) -> None:
        """Queue a task (``first``: ahead of the others, e.g. the next probe of an isolated task)."""
        (self.backlog.appendleft if first else self.backlog.append)((key, task, affinity))

    def live(self, key) -> bool:
        """False once ``key``'s generation (epoch iterator) was cancelled."""
        return key[0] not in self.cancelled

    def cancel(self, generation: int) -> None:
        """Drop ``generation``'s tasks from the backlog; the executor stops those its workers hold."""
        self.cancelled.add(generation)
        self.backlog = collections.deque(item for item in self.backlog if item[0][0] != generation)

    def take_unpinned(self):
        """Remove and return the first live ``(key, task)`` not pinned to a worker, or None."""
        for number, (key, task, affinity) in enumerate(self.backlog):
            if affinity is None and self.live(key):
                del self.backlog[number]
                return key, task
        return None

    def dispatch(self, pick: Callable, send: Callable) -> None:
        """Send every task that ``pick(key, task, affinity)`` finds a worker for; keep the rest, in order."""
        kept = collections.deque()
        while self.backlog:
            key, task, affinity = self.backlog.popleft()
            if not self.live(key):
                continue
            worker = pick(key, task, affinity)
            if worker is None:
                kept.append((key, task, affinity))
                continue
            send(worker, key, task)
        self.backlog = kept

    def least_loaded(self, workers, eligible: Callable, load: Callable, piece: bool = False):
        """The eligible worker with the fewest tasks, if it has room in its share of the window (late binding).

        A ``piece`` of a batch (`feedline.engine._tail`) goes only to a
        worker with nothing to run: queued behind a whole batch, it would
        end the epoch on that worker while another idles.
        """
        room = 1 if piece else self.per_worker
        ready = [w for w in workers if w is not None and eligible(w) and load(w) < room]
        return min(ready, key=load) if ready else None

    def finished(self, key, task, consumed: int) -> None:
        """A task's result arrived: forget its attempts, remember where its stream shard stands."""
        self.attempts.pop(key, None)
        if task.shard is not None and self.live(key):  # a cancelled task stopped anywhere: its position is no one's
            self.shard_positions[(task.epoch, task.shard)] = consumed

    def blame(self, key) -> int:
        """Count one more worker death on ``key``; return how many so far."""
        self.attempts[key] += 1
        return self.attempts[key]

    def requeue(self, redo, position: int) -> None:
        """Put a dead worker's unfinished ``(key, task)`` pairs back at the front, in order.

        Indexed tasks go to any worker; a generator shard's tasks stay with the
        worker's replacement (``position``) and restart the shard where its last
        delivered result left it, so no streamed sample is repeated or lost.
        """
        restarted = set()
        for _, task in redo:
            if task.shard is not None and task.shard not in restarted:
                restarted.add(task.shard)
                task.start = self.shard_positions.get((task.epoch, task.shard), task.start or 0)
        self.backlog.extendleft(reversed([(key, task, position if task.shard is not None else None) for key, task in redo]))

    def hold(self, events: list) -> None:
        """Keep events for the next `take_held` (a failed task, or results collected outside `wait`)."""
        self._held.extend(events)

    def take_held(self) -> list:
        held, self._held = self._held, []
        return held
