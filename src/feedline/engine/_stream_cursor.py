"""The shards of a generator source's epoch, from the consumer's side: which to read next, how far each was read.

Tasks go to the shards in turn (round robin over the epoch's shards,
skipping the exhausted ones). Each task's result says how many items of
its shard have been read in all and whether the shard ran out; taken in
task order, those give every output its resume point (``state["streams"]``).
"""

from __future__ import annotations

__all__ = ["StreamCursor"]


class StreamCursor:
    """Where each shard of one epoch stands, and the shard the next task reads.

    ``streams``: the ``"streams"`` field of a resumed state (None: the
    epoch's start).
    """

    def __init__(self, shards: list, streams: dict | None):
        streams = streams or {}
        self.shards = shards
        self.exhausted = set(streams.get("exhausted", []))
        self.positions = {int(k): v for k, v in streams.get("positions", {}).items()}
        self.cursor = streams.get("cursor", 0)  # position in self.shards of the next shard to dispatch
        # Every shard's first task in this iterator names its start, so a worker
        # holding a stale open shard (from a superseded iterator) reopens it.
        self._restart = {s: self.positions.get(s, 0) for s in shards}
        self._task_shard: dict[int, tuple[int, int]] = {}  # task number -> (its shard, the cursor after it)

    def next_task(self, number: int) -> tuple[int, int | None] | None:
        """``(shard, start)`` of task ``number``: the next live shard, and where to (re)open it (None: read on); None: all exhausted."""
        if all(s in self.exhausted for s in self.shards):
            return None
        for _ in range(len(self.shards)):
            shard = self.shards[self.cursor % len(self.shards)]
            self.cursor = (self.cursor + 1) % len(self.shards)
            if shard not in self.exhausted:
                self._task_shard[number] = (shard, self.cursor)
                return shard, self._restart.pop(shard, None)
        return None

    def slot(self, shard: int) -> int:
        """The position of ``shard`` among the epoch's shards."""
        return self.shards.index(shard)

    def advance(self, number: int, consumed: int, exhausted: bool) -> tuple[dict, dict]:
        """Take task ``number``'s result (its shard's items read in all, whether it ran out).

        Returns the ``streams`` positions just before the task (a point inside
        it: read the task again, from its start) and just after it.
        """
        shard, cursor = self._task_shard.pop(number)
        before = self._streams(self.slot(shard))
        self.positions[shard] = consumed
        if exhausted:
            self.exhausted.add(shard)
        return before, self._streams(cursor)

    def _streams(self, cursor: int) -> dict:
        return {"positions": dict(self.positions), "exhausted": sorted(self.exhausted), "cursor": cursor}
