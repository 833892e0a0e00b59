"""Resume points: where an epoch starts again, and the state ``it.state()`` writes from one.

A `ResumePoint` is what every output of `EpochIterator` carries: the point
just after it. `start_point` is the point an epoch starts at, fresh or
resumed; `checkpoint` turns the point of the last batch handed out into the
sealed state (`feedline.engine._state`), whose fields carry the same names.
"""

from __future__ import annotations

import dataclasses

from ._state import STATE_VERSION, seal

__all__ = ["ResumePoint", "checkpoint", "index_from_json", "jsonable", "resumed_skips", "start_point"]

HELD_FIELDS = ("buckets", "pack", "deal", "window")  # places of steps that hold rows across tasks, as a state lists them


@dataclasses.dataclass(frozen=True)
class ResumePoint:
    """The point just after an output, where an epoch starts again from it.

    ``task`` and ``offset`` place it on the epoch's task grid: the task
    whose rows come next and how many of them were delivered already. A
    generator source adds ``streams``, each shard's position. The other
    fields are the places of the steps that hold rows across tasks (None
    where the plan has no such step); a state stores each under its name.

    >>> ResumePoint.after_rows(3, 8, 8, before=None, after=None)
    ResumePoint(task=4, offset=0, streams=None, buckets=None, pack=None, deal=None, window=None)
    """

    task: int = 0
    offset: int = 0
    streams: dict | None = None  # a generator source: each shard's position (`feedline.engine._stream_cursor`)
    buckets: list | None = None  # bucket_by(): the rows of each bucket handed out
    pack: dict | None = None  # pack(): the items the rows held hold
    deal: dict | None = None  # batches dealt to ranks: how many of the whole epoch's were cut
    window: dict | None = None  # shuffle(window=N): the rows delivered and the oldest row held

    @classmethod
    def after_rows(cls, task: int, used: int, task_rows: int, *, before, after) -> ResumePoint:
        """The point after ``used`` of the ``task_rows`` rows of ``task``: the next task's start once all are.

        ``before`` and ``after``: the streams' positions before and after
        that task (None for an indexed epoch).
        """
        if used < task_rows:
            return cls(task, used, before)
        return cls(task + 1, 0, after)

    def held(self) -> dict:
        """The places of the steps that hold rows, by the state's names for them."""
        return {name: getattr(self, name) for name in HELD_FIELDS if getattr(self, name) is not None}


def _fresh_places(plan) -> dict:
    """The places a fresh epoch's steps start at: nothing packed, dealt or delivered through the window yet."""
    places = {}
    if plan.pack is not None:  # pack(): the items the rows hold (none yet at the start)
        places["pack"] = {"first": 0, "next": 0, "open": [], "pending": []}
    if plan.deal is not None:  # batches dealt to ranks: how many the whole epoch cut (none yet at the start)
        places["deal"] = {"made": 0}
    if plan.window is not None:  # shuffle(window=N): rows delivered and the oldest row held (none yet at the start)
        places["window"] = {"delivered": 0, "first": 0}
    return places


def start_point(plan, state: dict | None) -> ResumePoint:
    """The resume point an epoch of ``plan`` starts at: its start, or the point a checked ``state`` saved."""
    if state is None:
        return ResumePoint(**_fresh_places(plan))
    return ResumePoint(state["task"], state["offset"], state["streams"] if plan.streaming else None,
                       state.get("buckets"), **{name: state[name] for name in _fresh_places(plan)})


def resumed_skips(state: dict) -> list:
    """The ``(index, reason)`` of the samples a resumed epoch skipped before its point."""
    return [(index_from_json(i), r) for i, r in state.get("skipped", [])]


def checkpoint(plan, point: ResumePoint, *, epoch: int, batches: int, skip_log: list, fingerprint: str, parts: list | None,
               chunk: int | None, shard: dict | None, elastic: dict | None) -> dict:
    """The sealed state of an epoch of ``plan`` at ``point`` (see `EpochIterator.state`).

    ``skip_log``: ``(task, index, reason)`` of every skip; the state keeps
    those of tasks before the point, because resuming re-runs the rest.
    ``chunk``: the samples per task, where the grid is not a batch a task.
    """
    state = {
        "version": STATE_VERSION,
        "epoch": epoch,
        "batches": batches,
        "skipped": [[jsonable(i), r] for t, i, r in skip_log if t < point.task],
        "fingerprint": fingerprint,
        # Index steps that shuffle carry a seed (duck-typed: the engine sees only the Plan).
        "seeds": [int(step.seed) for step in plan.index_steps if getattr(step, "seed", None) is not None],
    }
    if parts:
        state["parts"] = parts
    if plan.order_seed is not None:
        state["mix_seed"] = int(plan.order_seed)  # so that resume can say when only it differs
    state.update(_position(plan, point, chunk))
    state.update(point.held())  # rows of each bucket handed out, the items packed rows hold, batches dealt, the window's rows
    if shard is not None:
        state["shard"] = shard
    if elastic is not None:
        state["elastic"] = elastic
    return seal(state)


def _position(plan, point: ResumePoint, chunk: int | None) -> dict:
    """``task`` and ``offset`` (with ``chunk``: the grid they count in), or a generator's ``streams``."""
    if plan.streaming:
        streams = point.streams if point.streams is not None else {"positions": {}, "exhausted": [], "cursor": 0}  # the start
        return {"task": 0, "offset": point.offset, "streams": streams}
    position = {"task": point.task, "offset": point.offset}
    if chunk is not None:
        position["chunk"] = chunk  # samples per task: the grid "task" counts in
    return position


def index_from_json(index):
    """A skipped sample's index as the iterator keeps it: a (shard, item) pair is a tuple."""
    return tuple(index) if isinstance(index, list) else index


def jsonable(index):
    """A skipped sample's index as a state writes it."""
    return list(index) if isinstance(index, tuple) else int(index)
