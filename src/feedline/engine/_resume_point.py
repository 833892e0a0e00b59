"""Resume points: where an epoch starts again, and the state ``it.state()`` writes from one.

A resume point is the dict every output of `EpochIterator` carries (the
point just after it): ``task`` and ``offset`` on an indexed epoch's task
grid, or ``streams`` (each shard's position) for a generator source, plus
the place of each step that holds rows across tasks (``buckets``,
``pack``, ``deal``, ``window``). `start_point` is the point an epoch
starts at, fresh or resumed; `checkpoint` turns the point of the last
batch handed out into the sealed state (`feedline.engine._state`).
"""

from __future__ import annotations

from ._state import STATE_VERSION, seal

__all__ = ["checkpoint", "index_from_json", "jsonable", "resumed_skips", "start_point"]

HELD_FIELDS = ("buckets", "pack", "deal", "window")  # places of steps that hold rows across tasks, as a state lists them


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


def start_point(plan, state: dict | None) -> dict:
    """The resume point an epoch of ``plan`` starts at: its start, or the point a checked ``state`` saved."""
    if state is None:
        return {"task": 0, "offset": 0, **_fresh_places(plan)}
    point = {"task": state["task"], "offset": state["offset"]}
    if plan.streaming:
        point["streams"] = state["streams"]
    if "buckets" in state:
        point["buckets"] = state["buckets"]
    for name in _fresh_places(plan):  # the steps this plan has hold their saved places
        point[name] = state[name]
    return point


def resumed_skips(state: dict) -> list:
    """The ``(index, reason)`` of the samples a resumed epoch skipped before its point."""
    return [(index_from_json(i), r) for i, r in state.get("skipped", [])]


def checkpoint(plan, point: dict, *, epoch: int, batches: int, skip_log: list, fingerprint: str, parts: list | None,
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
        "skipped": [[jsonable(i), r] for t, i, r in skip_log if t < point.get("task", 0)],
        "fingerprint": fingerprint,
        # Index steps that shuffle carry a seed (duck-typed: the engine sees only the Plan).
        "seeds": [int(step.seed) for step in plan.index_steps if getattr(step, "seed", None) is not None],
    }
    if parts:
        state["parts"] = parts
    if plan.order_seed is not None:
        state["mix_seed"] = int(plan.order_seed)  # so that resume can say when only it differs
    state.update(_position(plan, point, chunk))
    for name in HELD_FIELDS:  # rows of each bucket handed out, the items packed rows hold, batches dealt, the window's rows
        if name in point:
            state[name] = point[name]
    if shard is not None:
        state["shard"] = shard
    if elastic is not None:
        state["elastic"] = elastic
    return seal(state)


def _position(plan, point: dict, chunk: int | None) -> dict:
    """``task`` and ``offset`` (with ``chunk``: the grid they count in), or a generator's ``streams``."""
    if plan.streaming:
        streams = point.get("streams", {"positions": {}, "exhausted": [], "cursor": 0})  # none back yet: the start
        return {"task": 0, "offset": point.get("offset", 0), "streams": streams}
    position = {"task": point["task"], "offset": point["offset"]}
    if chunk is not None:
        position["chunk"] = chunk  # samples per task: the grid "task" counts in
    return position


def index_from_json(index):
    """A skipped sample's index as the iterator keeps it: a (shard, item) pair is a tuple."""
    return tuple(index) if isinstance(index, list) else index


def jsonable(index):
    """A skipped sample's index as a state writes it."""
    return list(index) if isinstance(index, tuple) else int(index)
