"""The checks of a checkpoint state against the pipeline that resumes it.

After `feedline.engine._state_fields.check_fields` has checked each
field's type, `check_against_plan` checks that the fields fit this
pipeline: the fields of its steps (``buckets``, ``pack``, ``deal``,
``window``), then its position (``task``, ``offset``, ``batches``,
``skipped``) on an indexed epoch's task grid or in a generator's
``streams``. Each check writes the clean value into ``out`` or raises a
`StateRefused` that names the field; they run in a fixed order, so that
a state with several faults is refused for the same one every time.
"""

from __future__ import annotations

from ._shares import epoch_order
from ._state_fields import OTHER_PIPELINE, StateRefused, are_integers, is_count, is_integer, shard_id
from ._task_grid import OLD_CHUNK, task_grid

__all__ = ["check_against_plan"]


def check_against_plan(state: dict, out: dict, plan) -> None:
    """Check the checked fields ``out`` of ``state`` against ``plan``, completing ``out``; `StateRefused` otherwise."""
    _check_buckets(state, out, plan)
    _check_pack(state, out, plan)
    _check_deal(state, out, plan)
    _check_window(state, out, plan)
    if plan.streaming:
        _check_streams(state, out, plan)
    else:
        _check_indexed(state, out, plan)


# ------------------------------------------------------------ step fields
def _step_field(state: dict, name: str, step, written_for: str):
    """``state[name]``, which only a pipeline with ``step`` writes: refused without the step, required with it (None: no step)."""
    if step is None:
        _refuse_unless_written(state, name, f"pipelines with {written_for}")
        return None
    value = state.get(name)
    if value is None:
        raise StateRefused(name, f"is missing: this pipeline has {step.describe()}, whose resume needs it")
    return value


def _refuse_unless_written(state: dict, name: str, written_for: str, this: str = "this one") -> None:
    """Refuse ``state[name]`` if present: only ``written_for`` write it, and ``this`` pipeline is not one."""
    if name in state:
        raise StateRefused(name, f"is written only for {written_for}; {this} has none", OTHER_PIPELINE)


def _refuse_offset(out: dict, written_by: str, why: str) -> None:
    """Refuse a non-zero offset: the states ``written_by`` a step keep their place elsewhere (``why``)."""
    if out["offset"]:
        raise StateRefused("offset", f"is {out['offset']}, but a state of {written_by} always has offset 0 ({why})")


def _check_window(state: dict, out: dict, plan) -> None:
    """shuffle(window=N): rows delivered, and the oldest row the buffer held (where the resumed stream starts again)."""
    window = _step_field(state, "window", plan.window, "shuffle(window=...)")
    if window is None:
        return
    ok = isinstance(window, dict) and set(window) == {"delivered", "first"} and all(is_count(v) for v in window.values())
    if not ok:
        raise StateRefused("window", f"must be a dict of 'delivered' and 'first' (integers >= 0), got {window!r:.100}")
    if window["first"] >= window["delivered"] + plan.window.window:
        raise StateRefused("window", f"names row {window['first']} as the oldest held, but after {window['delivered']} "
                           f"rows delivered a window of {plan.window.window} holds none newer than "
                           f"{window['delivered'] + plan.window.window - 1}")
    out["window"] = {"delivered": int(window["delivered"]), "first": int(window["first"])}


def _bucketed(plan) -> bool:
    return plan.padder is not None and plan.padder.buckets is not None


def _runs_ahead(plan) -> bool:
    """Batches may outnumber the samples before the state's task (rows wait in buckets or packed rows since an older one)."""
    return _bucketed(plan) or plan.pack is not None


_PACK_SHAPE = ("a dict of 'first', 'next' (integers >= 0), 'open' and 'pending' (lists of rows, each a list of "
               "item numbers)")


def _check_pack(state: dict, out: dict, plan) -> None:
    """pack(): the held rows' items (ordinals from the epoch's start), each in [first, next), each once."""
    pack = _step_field(state, "pack", plan.pack, "pack()")
    if pack is None:
        return
    _check_pack_shape(pack)
    _check_pack_room(pack, plan)
    _check_pack_items(pack)
    _refuse_offset(out, "pack()", "state['pack'] names the items held")
    out["pack"] = {"first": int(pack["first"]), "next": int(pack["next"]),
                   "open": [[int(g) for g in r] for r in pack["open"]],
                   "pending": [[int(g) for g in r] for r in pack["pending"]]}


def _check_pack_shape(pack) -> None:
    """The four keys; 'first' <= 'next', integers >= 0; 'open' and 'pending' lists of non-empty rows of item numbers."""
    if not isinstance(pack, dict) or set(pack) != {"first", "next", "open", "pending"}:
        raise StateRefused("pack", f"must be {_PACK_SHAPE}, got {pack!r:.100}")
    first, upto = pack["first"], pack["next"]
    lists = isinstance(pack["open"], list) and isinstance(pack["pending"], list)
    rows = pack["open"] + pack["pending"] if lists else []
    bounds = are_integers([first, upto]) and 0 <= first <= upto
    if not lists or not bounds or not all(are_integers(r) and r for r in rows):
        raise StateRefused("pack", f"must be {_PACK_SHAPE}, got {pack!r:.100}")


def _check_pack_room(pack: dict, plan) -> None:
    """No more open rows than pack()'s buffer, nor more rows waiting for a batch than a batch holds."""
    rows_per_batch = plan.rows_per_batch or 1
    if len(pack["open"]) > plan.pack.buffer or len(pack["pending"]) >= rows_per_batch:
        raise StateRefused("pack", f"holds {len(pack['open'])} open and {len(pack['pending'])} unbatched rows, more than "
                           f"{plan.pack.describe()} with {rows_per_batch} rows a batch ever holds")


def _check_pack_items(pack: dict) -> None:
    """Each held item once, each row in order, all in [first, next)."""
    first, upto = pack["first"], pack["next"]
    rows = pack["open"] + pack["pending"]
    held = [g for r in rows for g in r]
    if len(set(held)) != len(held) or any(not first <= g < upto for g in held) or any(r != sorted(r) for r in rows):
        raise StateRefused("pack", f"must name each held item once, in order, between 'first' ({first}) and 'next' ({upto})")


def _check_deal(state: dict, out: dict, plan) -> None:
    """shard(even=...) before pack() / batch_by_budget(): the batches of the whole epoch cut before the point."""
    if plan.deal is None:
        _refuse_unless_written(state, "deal", "sharded pack() / batch_by_budget()", "this pipeline")
        return
    deal = state.get("deal")
    if not (isinstance(deal, dict) and set(deal) == {"made"} and is_count(deal["made"])):
        raise StateRefused("deal", f"must be a dict {{'made': batches of the whole epoch cut so far}}, got {deal!r:.100}")
    out["deal"] = {"made": int(deal["made"])}


def _check_buckets(state: dict, out: dict, plan) -> None:
    """bucket_by_length: one count per bucket; its point is the oldest task with rows waiting, so ``batches`` may exceed it."""
    if not _bucketed(plan):
        _refuse_unless_written(state, "buckets", "pipelines with bucket_by_length()")
        return
    count = len(plan.padder.buckets)
    if len(out.setdefault("buckets", [0] * count)) != count:
        raise StateRefused("buckets", f"has {len(out['buckets'])} counts, but this pipeline has {count} buckets",
                           OTHER_PIPELINE)
    _refuse_offset(out, "bucket_by_length()", "state['buckets'] counts the rows handed out")


# ---------------------------------------------------------- indexed epochs
def _check_indexed(state: dict, out: dict, plan) -> None:
    """The position of an indexed epoch: a task of its grid, an offset in it, the batches and skips before it."""
    if "streams" in state:
        raise StateRefused("streams", "is for a generator source; this pipeline reads an indexed source", OTHER_PIPELINE)
    _check_chunk(state, out, plan)
    order = _resumed_order(out, plan)
    unbatched = plan.part.batch_size is None
    step, tasks, covered = task_grid(plan, len(order), out.get("chunk", OLD_CHUNK) if unbatched else out.get("chunk"))
    _check_task_offset(out, plan, step, tasks, covered)
    consumed = min(covered, out["task"] * step)  # samples of the tasks before the state's task
    _check_indexed_batches(out, plan, consumed)
    _check_indexed_skips(state, out, plan, order, consumed)


def _check_chunk(state: dict, out: dict, plan) -> None:
    """A batched pipeline names a grid only if its tasks are whole batches, and then a whole number of them."""
    batch = plan.part.batch_size
    if "chunk" not in state or batch is None or (plan.part.aligned and out["chunk"] % batch == 0):
        return
    problem = (f"is {out['chunk']} samples per task, not a whole number of batches of {batch}" if plan.part.aligned
               else "is written only for pipelines whose tasks are whole batches (or without batch()); this one "
               "re-cuts its batches (filter or on_error='skip'), a batch's worth of samples per task")
    raise StateRefused("chunk", problem, OTHER_PIPELINE)


def _resumed_order(out: dict, plan):
    """The epoch's index order (on other ranks' positions, for ``"elastic"``), kept for the iterator that follows."""
    try:
        return epoch_order(plan, out["epoch"], out.get("elastic"), keep=True)
    except ValueError as e:
        raise StateRefused("elastic", str(e), OTHER_PIPELINE) from e


def _check_task_offset(out: dict, plan, step: int, tasks: int, covered: int) -> None:
    """The task is one of the grid's (or the end); the offset is rows of it not all delivered, whole batches if tasks are."""
    batch = plan.part.batch_size
    task, offset = out["task"], out["offset"]
    if task > tasks:
        raise StateRefused("task", f"is {task}, but epoch {out['epoch']} of this pipeline has {tasks} tasks of {step} samples "
                           f"(the task after the last batch is at most {tasks}, the end of the epoch)")
    rows = min(step, covered - task * step) if task < tasks else 0
    whole_batches = plan.part.aligned and batch is not None  # each task is one batch, or several whole ones
    if offset and task == tasks:
        raise StateRefused("offset", f"is {offset}, but a state at the end of the epoch always has offset 0")
    if offset % (batch or 1) and whole_batches:
        raise StateRefused("offset", f"is {offset}, but the tasks of this pipeline are whole batches, so its offset "
                           f"is always a multiple of the batch size, {batch}")
    if task < tasks and offset >= rows:
        raise StateRefused("offset", f"is {offset}, but task {task} holds only {rows} samples (the offset counts "
                           "those already delivered, fewer than the task holds)")


def _check_indexed_batches(out: dict, plan, consumed: int) -> None:
    """``batches``: no more than the samples before the point; on an aligned plan, exactly the batches they make."""
    batch, task, offset = plan.part.batch_size, out["task"], out["offset"]
    delivered = consumed + offset
    if out["batches"] > delivered and not _runs_ahead(plan):
        raise StateRefused("batches", f"is {out['batches']}, more than the {delivered} samples delivered before "
                           f"task {task}, offset {offset}")
    if not plan.part.aligned:
        return
    expected = delivered if batch is None else -(-delivered // batch)
    if out["batches"] != expected:
        what = (f"every sample is one item, so {delivered} items come before task {task}, offset {offset}"
                if batch is None else f"every batch holds {batch} samples (the epoch's last may hold fewer), so "
                f"{expected} batches come before task {task}, offset {offset}")
        raise StateRefused("task", f"is {task} and state['offset'] {offset}, but state['batches'] is {out['batches']}: "
                           f"in this pipeline {what}")


def _check_indexed_skips(state: dict, out: dict, plan, order, consumed: int) -> None:
    """``skipped``: samples of the tasks before the point, each once, and only where the pipeline skips."""
    skipped = out["skipped"] = [list(item) for item in state["skipped"]]
    if not skipped:
        return
    if plan.part.aligned:
        raise StateRefused("skipped", "lists skipped samples, but this pipeline never skips any (no on_error='skip')",
                           OTHER_PIPELINE)
    before = set(order[:consumed].tolist())
    for k, (index, _) in enumerate(skipped):
        if not is_integer(index) or index not in before:
            raise StateRefused("skipped", f"item {k} names sample {index!r}, which is not among the "
                               f"{consumed} samples of the tasks before task {out['task']}")
        skipped[k][0] = int(index)
    if len({i for i, _ in skipped}) != len(skipped):
        raise StateRefused("skipped", "names a sample twice")


# ------------------------------------------------------- generator sources
def _check_streams(state: dict, out: dict, plan) -> None:
    """The position of a generator source: each shard's items read, the exhausted shards, the next shard to read."""
    for name in ("chunk", "elastic"):
        if name in state:
            raise StateRefused(name, "is for an indexed source; this pipeline reads a generator source", OTHER_PIPELINE)
    _check_stream_task_offset(out, plan)
    streams = state.get("streams")
    if not isinstance(streams, dict) or set(streams) != {"positions", "exhausted", "cursor"}:
        raise StateRefused("streams", f"must be a dict with 'positions', 'exhausted' and 'cursor', got {streams!r:.100}")
    shards = plan.epoch_shards(out["epoch"])
    positions = _stream_positions(streams["positions"], shards, plan)
    done = _stream_exhausted(streams["exhausted"], shards)
    cursor = _stream_cursor(streams["cursor"], shards)
    offset = out["offset"]
    if offset and shards[cursor] in done:
        raise StateRefused("offset", f"is {offset}, items of a task of shard {shards[cursor]}, which state['streams'] lists as exhausted")
    out["streams"] = {"positions": positions, "exhausted": sorted(done), "cursor": int(cursor)}
    read = sum(positions.values()) + offset
    if out["batches"] > read and not _runs_ahead(plan) and plan.window is None:
        raise StateRefused("batches", f"is {out['batches']}, more than the {read} items read from the shards")
    _check_stream_skips(state, out, shards, positions)


def _check_stream_task_offset(out: dict, plan) -> None:
    """``task`` is 0 (the place is in ``streams``); ``offset`` is fewer items than a task reads."""
    if out["task"]:
        raise StateRefused("task", f"is {out['task']}, but the state of a generator source keeps its place in "
                           "state['streams'] and always has 0 here")
    offset = out["offset"]
    size = plan.part.batch_size or plan.part.stream_chunk  # items a task reads (batches are re-cut across shards)
    if offset >= size:
        raise StateRefused("offset", f"is {offset}, but a task of this generator source reads at most "
                           f"{size} items (the offset counts those already delivered, fewer)")


def _stream_positions(positions, shards: list, plan) -> dict:
    """``streams['positions']`` as ``{shard: items read}``, each a shard of this epoch, within its length if known."""
    known = set(shards)
    shard_length = getattr(plan.part.source, "shard_length", None)  # a generator with samples_per_epoch
    if not isinstance(positions, dict):
        raise StateRefused("streams", f"['positions'] must map shard numbers to items read, got {positions!r:.80}")
    clean = {}
    for key, value in positions.items():
        shard = shard_id(key, "streams")
        if shard not in known:
            raise StateRefused("streams", f"['positions'] names shard {shard}, which is not among this epoch's shards {sorted(known)!r:.80}")
        if not is_count(value):
            raise StateRefused("streams", f"['positions'][{key!r}] must be the number of items read (an integer >= 0), got {value!r}")
        length = shard_length(shard) if shard_length is not None else None
        if length is not None and value > length:
            raise StateRefused("streams", f"['positions'][{key!r}] is {value}, but shard {shard} gives {length} items per epoch")
        clean[shard] = int(value)
    return clean


def _stream_exhausted(exhausted, shards: list) -> list:
    """``streams['exhausted']`` as shard numbers, each a shard of this epoch, once."""
    known = set(shards)
    if not isinstance(exhausted, list):
        raise StateRefused("streams", f"['exhausted'] must be a list of shard numbers, got {exhausted!r:.80}")
    done = [shard_id(s, "streams") for s in exhausted]
    if any(s not in known for s in done) or len(set(done)) != len(done):
        raise StateRefused("streams", f"['exhausted'] must list shards of this epoch {sorted(known)!r:.80} once each, got {exhausted!r:.80}")
    return done


def _stream_cursor(cursor, shards: list):
    """``streams['cursor']``: the position in this epoch's shards of the next one to read."""
    if not is_integer(cursor) or not 0 <= cursor < len(shards):
        raise StateRefused("streams", f"['cursor'] must be an integer from 0 to {len(shards) - 1} (the next shard to read), got {cursor!r}")
    return cursor


def _check_stream_skips(state: dict, out: dict, shards: list, positions: dict) -> None:
    """``skipped``: (shard, item) pairs of items already read."""
    known = set(shards)
    skipped = out["skipped"] = [list(item) for item in state["skipped"]]
    for k, (index, _) in enumerate(skipped):
        ok = isinstance(index, (list, tuple)) and len(index) == 2 and all(is_integer(v) for v in index)
        if not ok or index[0] not in known or not 0 <= index[1] < positions.get(index[0], 0):
            raise StateRefused("skipped", f"item {k} names {index!r}, which is not a (shard, item) already read")
        skipped[k][0] = [int(v) for v in index]
