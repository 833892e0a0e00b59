"""Checkpoint states: what `EpochIterator.state` writes and what `Pipeline.resume` accepts.

A state is a small JSON-able dict. Nothing in it is trusted on the way
back in: `check` validates every field (type, range, and consistency with
the pipeline that resumes it) and returns a clean copy, or raises a
`ValueError` that names the field and says what to do.

The digest. `seal` adds ``"digest"``: a SHA-256 (first 16 hex digits) of
the other fields in a canonical JSON form, so it survives a JSON or pickle
round trip (integer dict keys become strings in JSON; both hash the same).
It detects a state that was edited or damaged after ``state()`` wrote it
(an offset changed from 1 to 2 passes every range check, but not the
digest). It is not a signature: there is no secret, so anyone can compute
a digest for a forged state. A state without ``"digest"`` (written before
feedline added it) is accepted when every field validates; there is no
separate version number for this, since the format is otherwise unchanged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import numbers

from .._errors import FeedlineError

__all__ = ["STATE_VERSION", "StateRefused", "check", "check_fields", "digest", "fingerprint_refused", "mix_seed_refused",
           "parts_differ", "seal", "task_grid"]

STATE_VERSION = 1
OLD_CHUNK = 64  # samples per task of an unbatched epoch in states that do not name their grid
FIELDS = ("version", "epoch", "batches", "skipped", "fingerprint", "task", "offset", "chunk", "streams", "seeds", "digest",
          "buckets", "window", "pack", "mix_seed", "parts")
_ADVICE = ("use the state it.state() returned, unchanged (json.dump and json.load keep it), "
           "or start the epoch over with pipe.epoch(k)")


class StateRefused(FeedlineError, ValueError):
    """A state that ``resume()`` will not use (a ``ValueError``); ``field`` names the culprit."""

    def __init__(self, field: str | None, problem: str, advice: str = _ADVICE):
        where = f"state[{field!r}] " if field else "the state "
        super().__init__(f"resume(): {where}{problem}" + (f"; {advice}" if advice else ""))
        self.field = field


# ------------------------------------------------------------------ digest
def _canonical(value, path: str):
    if isinstance(value, dict):
        return {str(k): _canonical(v, path) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, path) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, float):
        return value
    raise StateRefused(path, f"holds a {type(value).__name__}, which it.state() never writes (only JSON data)")


def digest(state: dict) -> str:
    """The digest of every field but ``"digest"`` (see the module docstring)."""
    fields = {k: _canonical(v, k) for k, v in state.items() if k != "digest"}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(b"feedline state\n" + text.encode()).hexdigest()[:16]


def seal(state: dict) -> dict:
    """``state`` with its ``"digest"`` field added."""
    state["digest"] = digest(state)
    return state


# ------------------------------------------------------------ the task grid
TARGET_TASK_SECONDS = 0.01  # an unbatched task's work, once measured: ~100x a task's messaging (0.1 ms), so it costs ~1 %
MAX_CHUNK = 4096  # samples per task at most (unbatched, or several batches): bounds what one task holds in memory ...
MAX_TASK_BYTES = 4 << 20  # ... and the bytes of the batches one task holds (its slot is reused once all are dropped)
TASKS_PER_WORKER = 8  # an unbatched epoch keeps at least this many tasks per worker: balance, and work queued behind each


def measured_chunk(task_seconds: float, rows: int, count: int, workers: int, batch: int | None = None,
                   batch_bytes: int = 0, max_bytes: int = MAX_TASK_BYTES, previous: int | None = None) -> int | None:
    """Samples per task for the next epoch, from the last one's work per sample (None: nothing measured).

    Used where a task is a message to another process (process and Ray
    workers): cheap samples (a few us each) took ~64 per task before, so
    messaging dominated (process x2 110-150k samples/s, 190-200k with
    this); expensive ones get one per task. With ``batch`` (a pipeline
    whose tasks may hold several whole batches, `Plan.groups_batches`), a
    whole number of batches, each of ``batch_bytes``, at most ``max_bytes``
    together (`MAX_TASK_BYTES`; for bulk reads on threads or the calling
    thread, `cache_share`). Otherwise threads and the calling thread keep
    the first epoch's grid (longer tasks measured no faster there). The
    grid is recorded in every checkpoint (``chunk``), so a resumed epoch
    runs on the grid it was cut with.

    Against the ``previous`` epoch's chunk it at most halves: the work per
    sample is a sum over the epoch's tasks, which a stall inflates: on a
    loaded 2-core VM bulk store reads that measure 1-7 us a sample read as
    over 200 us in one epoch of a CI run (a stalled task, likely; not
    shown) and cut the next epoch's tasks from ~20 batches to 2. Work that
    really got dearer gets there in a few epochs.
    The bounds (tasks per worker, bytes) hold whatever ``previous`` was.

    >>> measured_chunk(0.5, 50_000, 50_000, 2, batch=256, batch_bytes=786_432)  # 2.6 ms a batch: 3 a task
    768
    >>> measured_chunk(2.0, 1_000, 1_000, 2, batch=32)  # 64 ms a batch: one
    32
    >>> measured_chunk(2.0, 1_000, 50_000, 2, batch=32, previous=320)  # ... but half the last epoch's 10 at least
    160
    """
    if rows <= 0 or task_seconds <= 0:
        return None
    per_sample = task_seconds / rows
    chunk = min(max(int(TARGET_TASK_SECONDS / per_sample), (previous or 0) // 2), MAX_CHUNK)
    tasks = TASKS_PER_WORKER * max(1, workers)
    if batch is None:
        return max(1, min(chunk, count // tasks))
    batches = min(chunk // batch, count // batch // tasks)
    if batch_bytes > 0:
        batches = min(batches, max_bytes // batch_bytes)
    return batch * max(1, batches)


def cache_share(workers: int) -> int:
    """Bytes of a task of several batches read in bulk on threads: 3/4 of the last-level cache over the workers.

    Shuffled 3 MiB store reads on 2 threads (32 MiB L3): 16.2 GiB/s with 4
    batches a task (12 MiB each, 24 MiB being written at once), 13.9 with
    one, 10.0 with 8 (48 MiB: past the cache). 0 where the cache size is
    not known (Linux's /sys only): no grouping then.
    """
    return int(0.75 * _last_level_cache()) // max(1, workers)


@functools.lru_cache(maxsize=1)
def _last_level_cache() -> int:
    """Bytes of the largest CPU cache of cpu0 (Linux /sys), or 0; read once."""
    import glob

    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        try:
            with open(path) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=0)


def task_grid(plan, count: int, chunk: int | None) -> tuple[int, int, int]:
    """``(samples per task, number of tasks, samples the tasks cover)`` of an indexed epoch of ``count`` samples.

    ``chunk``: the samples per task a resumed state names, or the one
    measured on the last epoch (`measured_chunk`); None for the
    pipeline's own grid (a batch per task, when it batches). Under
    ``drop_remainder`` the tasks of an aligned plan stop at the last whole
    batch.
    """
    batch = plan.part.batch_size
    step = chunk if chunk is not None else plan.task_size(count)
    covered = count // batch * batch if (batch and plan.drop_remainder and plan.part.aligned) else count
    return step, -(-covered // step), covered


# ------------------------------------------------------------------- checks
def _int(state: dict, name: str, what: str, low: int = 0) -> int:
    value = state[name]
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise StateRefused(name, f"must be an integer ({what}), got {value!r} (a {type(value).__name__})")
    if value < low:
        raise StateRefused(name, f"must be >= {low} ({what}), got {value}")
    return int(value)


def _shard_id(value, name: str) -> int:
    if isinstance(value, str) and value.isdigit():
        return int(value)  # a JSON object's keys are strings
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise StateRefused(name, f"names shard {value!r}, which is not a shard number")
    return int(value)


def check_fields(state) -> dict:
    """The checks that need no pipeline: a dict, the version, known fields of the right types."""
    if not isinstance(state, dict):
        raise StateRefused(None, f"must be the dict that it.state() returns, got a {type(state).__name__}: {state!r:.80}")
    if "version" not in state:
        raise StateRefused("version", f"is missing: this is not a state from it.state() (its fields: {sorted(map(str, state))!r:.120})")
    if state["version"] != STATE_VERSION or isinstance(state["version"], bool):
        raise StateRefused("version", f"is {state['version']!r}; this feedline reads version {STATE_VERSION} (states from it.state())")
    unknown = sorted(str(k) for k in state if k not in FIELDS)
    if unknown:
        raise StateRefused(unknown[0], f"is not a field it.state() writes (unknown: {', '.join(unknown)}); keep your own "
                           "data beside the state, not inside it")
    for name in ("epoch", "batches", "skipped", "fingerprint", "task", "offset"):
        if name not in state:
            raise StateRefused(name, "is missing")
    out = dict(state)
    out["epoch"] = _int(state, "epoch", "the epoch number")
    out["batches"] = _int(state, "batches", "the batches already delivered in this epoch")
    out["task"] = _int(state, "task", "the next task of the epoch")
    out["offset"] = _int(state, "offset", "rows of that task already delivered")
    if "chunk" in state:
        out["chunk"] = _int(state, "chunk", "samples per task", low=1)
    if not isinstance(state["fingerprint"], str):
        raise StateRefused("fingerprint", f"must be a string, got {state['fingerprint']!r}")
    if "digest" in state and not isinstance(state["digest"], str):
        raise StateRefused("digest", f"must be a string, got {state['digest']!r}")
    if "seeds" in state:
        seeds = state["seeds"]
        if not isinstance(seeds, list) or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0 for s in seeds):
            raise StateRefused("seeds", f"must be a list of the shuffle seeds (integers >= 0), got {seeds!r:.80}")
    if "parts" in state:
        parts = state["parts"]
        if not isinstance(parts, list) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in parts):
            raise StateRefused("parts", f"must be a list of [label, digest] pairs of strings, got {parts!r:.80}")
    if "mix_seed" in state:
        out["mix_seed"] = _int(state, "mix_seed", "the seed of fl.mix()")
    if "buckets" in state:
        buckets = state["buckets"]
        if not isinstance(buckets, list) or any(isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0 for n in buckets):
            raise StateRefused("buckets", f"must be a list of row counts (integers >= 0), one per bucket, got {buckets!r:.80}")
        out["buckets"] = [int(n) for n in buckets]
    skipped = state["skipped"]
    if not isinstance(skipped, list):
        raise StateRefused("skipped", f"must be a list of [index, reason] pairs, got a {type(skipped).__name__}")
    for k, item in enumerate(skipped):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[1], str):
            raise StateRefused("skipped", f"must be a list of [index, reason] pairs; item {k} is {item!r:.80}")
    return out


def mix_seed_refused(state: dict, seed: int | None, fingerprint_with) -> StateRefused | None:
    """The refusal of a state that differs only in the seed of ``fl.mix`` (None: it differs in more than that).

    ``seed``: this pipeline's mix seed; ``fingerprint_with(seed)``: its
    fingerprint with that seed instead.
    """
    theirs = state.get("mix_seed")
    if seed is None or theirs is None or theirs == seed or fingerprint_with(theirs) != state["fingerprint"]:
        return None
    return StateRefused("fingerprint", (
        f"differs only in the seed of fl.mix(): the state was saved with mix(..., seed={theirs}), this pipeline has "
        f"mix(..., seed={seed}). mix() without seed= draws a random seed for each pipeline object, so a pipeline built "
        "again (in a new process, after a restart) draws another and mixes its inputs in another order"),
        f"build it with fl.mix(..., seed={theirs}) to resume this state, and give mix() an explicit seed from the "
        "start so that checkpoints resume")


def fingerprint_refused(state: dict, seeds: list, fingerprint_with, parts: list | None = None) -> StateRefused:
    """The refusal of a state saved by another pipeline, as precise as can be told.

    ``seeds``: this pipeline's shuffle seeds; ``fingerprint_with(seeds)``:
    its fingerprint with those seeds instead. When the state's own seeds
    make the fingerprints match, only the seed differs: say which one to use.
    """
    theirs = state.get("seeds")
    if seeds and theirs is not None and len(theirs) == len(seeds) and theirs != seeds:
        if fingerprint_with(theirs) == state["fingerprint"]:
            needed = ", ".join(f"shuffle(seed={s})" for s in theirs)
            have = ", ".join(f"shuffle(seed={s})" for s in seeds)
            return StateRefused("fingerprint", (
                f"differs only in the shuffle seed: the state was saved with {needed}, this pipeline has {have}. "
                "shuffle() without seed= draws a random seed for each pipeline object, so a pipeline built again "
                "(in a new process, after a restart) draws another and visits the samples in another order"),
                f"build the pipeline with {needed} to resume this state, and give shuffle() an explicit seed from "
                "the start so that checkpoints resume")
    advice = "resume with the pipeline that saved it"
    if seeds and theirs is None:
        advice += (" (if it used shuffle() without seed=, that seed was drawn at random for that pipeline object and "
                   "a new process draws another: pass the seed it printed, shuffle(seed=...))")
    difference = parts_differ(state.get("parts"), parts)
    if difference is not None:
        return StateRefused("fingerprint", f"does not match this pipeline: {difference}", advice)
    return StateRefused("fingerprint", "does not match this pipeline: the state was saved from a pipeline whose source "
                        "length, steps, shuffle seed or batch size differ", advice)


def parts_differ(theirs, ours) -> str | None:
    """What differs between the ``"parts"`` of a state and of this pipeline (`Pipeline._parts`), in words; None: unknown."""
    if not theirs or not ours:
        return None

    def split(parts):
        parts = [tuple(p) for p in parts]
        return ([h for label, h in parts if label == "source"], [p for p in parts if " input " in p[0]],
                [p for p in parts if p[0].startswith("step ")])

    (their_source, their_inputs, their_steps), (our_source, our_inputs, our_steps) = split(theirs), split(ours)
    if their_source != our_source:
        return ("its source differs in kind or length, or in how it combines its inputs (weights, seed, stop, "
                "repeat count)")
    if len(their_inputs) != len(our_inputs):
        return f"the state's pipeline combined {len(their_inputs)} inputs, this one combines {len(our_inputs)}"
    their_ids, our_ids = [h for _, h in their_inputs], [h for _, h in our_inputs]
    if their_ids != our_ids:
        k = next(k for k, (a, b) in enumerate(zip(their_ids, our_ids)) if a != b)
        if sorted(their_ids) == sorted(our_ids):
            return (f"{our_inputs[k][0]} is input {their_ids.index(our_ids[k])} of the state's pipeline: the same "
                    "inputs in another order, whose positions would deliver some samples twice and others never")
        return f"{our_inputs[k][0]} differs from the state's (its source's data or length, its steps or its seeds)"
    if [h for _, h in their_steps] != [h for _, h in our_steps]:
        if len(their_steps) != len(our_steps):
            return (f"its steps differ: the state's pipeline had {', '.join(label for label, _ in their_steps)}; this "
                    f"one has {', '.join(label for label, _ in our_steps)}")
        (theirs_label, _), (ours_label, _) = next((a, b) for a, b in zip(their_steps, our_steps) if a[1] != b[1])
        where, _, their_step = theirs_label.partition(": ")
        our_step = ours_label.partition(": ")[2]
        other = " (another function of that name)" if their_step == our_step else ""
        return f"{where} differs: the state's pipeline had {their_step} there, this one has {our_step}{other}"
    return None


def check(state, plan, fingerprint: str) -> dict:
    """A validated, normalised copy of ``state`` for resuming ``plan``; `StateRefused` otherwise.

    The caller compares the fingerprint first, after `check_fields` (it
    can say why it differs); `check` repeats the field checks, then checks
    the fields against the plan, then the digest.
    """
    out = check_fields(state)
    if state["fingerprint"] != fingerprint:
        raise StateRefused("fingerprint", "does not match this pipeline", "resume with the pipeline that saved it")
    try:
        _check_buckets(state, out, plan)
        _check_pack(state, out, plan)
        _check_window(state, out, plan)
        if plan.streaming:
            _check_streams(state, out, plan)
        else:
            _check_indexed(state, out, plan)
    except StateRefused as refusal:  # two fields disagree: the digest tells whether either was edited (found by fuzzing)
        if "digest" in state and _edited(state):
            refusal.args = (f"{refusal}. state['digest'] does not match the other fields either: the state was changed "
                            "after it.state() wrote it, maybe in a field other than the one named here",)
        raise
    if "digest" in state and digest(state) != state["digest"]:
        raise StateRefused("digest", "does not match the other fields: the state was changed after it.state() wrote it")
    return out


def _edited(state: dict) -> bool:
    """Whether the digest of ``state`` differs from the one it carries (or cannot be computed)."""
    try:
        return digest(state) != state["digest"]
    except StateRefused:
        return True


def _step_field(state: dict, name: str, step, written_for: str):
    """``state[name]``, which only a pipeline with ``step`` writes: refused without the step, required with it (None: no step)."""
    if step is None:
        if name in state:
            raise StateRefused(name, f"is written only for pipelines with {written_for}; this one has none",
                               "resume with the pipeline that saved it")
        return None
    value = state.get(name)
    if value is None:
        raise StateRefused(name, f"is missing: this pipeline has {step.describe()}, whose resume needs it")
    return value


def _check_window(state: dict, out: dict, plan) -> None:
    """shuffle(window=N): rows delivered, and the oldest row the buffer held (where the resumed stream starts again)."""
    window = _step_field(state, "window", plan.window, "shuffle(window=...)")
    if window is None:
        return
    ok = isinstance(window, dict) and set(window) == {"delivered", "first"} and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) and v >= 0 for v in window.values())
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


def _ordinals(value) -> bool:
    return isinstance(value, list) and all(isinstance(g, numbers.Integral) and not isinstance(g, bool) for g in value)


def _check_pack(state: dict, out: dict, plan) -> None:
    """pack(): the held rows' items (ordinals from the epoch's start), each in [first, next), each once."""
    pack = _step_field(state, "pack", plan.pack, "pack()")
    if pack is None:
        return
    shape = "a dict of 'first', 'next' (integers >= 0), 'open' and 'pending' (lists of rows, each a list of item numbers)"
    if not isinstance(pack, dict) or set(pack) != {"first", "next", "open", "pending"}:
        raise StateRefused("pack", f"must be {shape}, got {pack!r:.100}")
    first, upto = pack["first"], pack["next"]
    lists = isinstance(pack["open"], list) and isinstance(pack["pending"], list)
    rows = pack["open"] + pack["pending"] if lists else []
    if not lists or not _ordinals([first, upto]) or first < 0 or upto < first or not all(_ordinals(r) and r for r in rows):
        raise StateRefused("pack", f"must be {shape}, got {pack!r:.100}")
    held = [g for r in rows for g in r]
    if len(pack["open"]) > plan.pack.buffer or len(pack["pending"]) >= (plan.rows_per_batch or 1):
        raise StateRefused("pack", f"holds {len(pack['open'])} open and {len(pack['pending'])} unbatched rows, more than "
                           f"{plan.pack.describe()} with {plan.rows_per_batch or 1} rows a batch ever holds")
    if len(set(held)) != len(held) or any(not first <= g < upto for g in held) or any(r != sorted(r) for r in rows):
        raise StateRefused("pack", f"must name each held item once, in order, between 'first' ({first}) and 'next' ({upto})")
    if out["offset"]:
        raise StateRefused("offset", f"is {out['offset']}, but a state of pack() always has offset 0 (state['pack'] "
                           "names the items held)")
    out["pack"] = {"first": int(first), "next": int(upto), "open": [[int(g) for g in r] for r in pack["open"]],
                   "pending": [[int(g) for g in r] for r in pack["pending"]]}


def _check_buckets(state: dict, out: dict, plan) -> None:
    """bucket_by_length: one count per bucket; its point is the oldest task with rows waiting, so ``batches`` may exceed it."""
    if not _bucketed(plan):
        if "buckets" in state:
            raise StateRefused("buckets", "is written only for pipelines with bucket_by_length(); this one has none",
                               "resume with the pipeline that saved it")
        return
    count = len(plan.padder.buckets)
    if len(out.setdefault("buckets", [0] * count)) != count:
        raise StateRefused("buckets", f"has {len(out['buckets'])} counts, but this pipeline has {count} buckets",
                           "resume with the pipeline that saved it")
    if out["offset"]:
        raise StateRefused("offset", f"is {out['offset']}, but a state of bucket_by_length() always has offset 0 "
                           "(state['buckets'] counts the rows handed out)")


def _check_indexed(state: dict, out: dict, plan) -> None:
    if "streams" in state:
        raise StateRefused("streams", "is for a generator source; this pipeline reads an indexed source",
                           "resume with the pipeline that saved it")
    batch = plan.part.batch_size
    unbatched = batch is None
    if "chunk" in state and not unbatched and not (plan.part.aligned and out["chunk"] % batch == 0):
        problem = (f"is {out['chunk']} samples per task, not a whole number of batches of {batch}" if plan.part.aligned
                   else "is written only for pipelines whose tasks are whole batches (or without batch()); this one "
                   "re-cuts its batches (filter or on_error='skip'), a batch's worth of samples per task")
        raise StateRefused("chunk", problem, "resume with the pipeline that saved it")
    order = plan.epoch_indices(out["epoch"])
    count = len(order)
    chunk = out.get("chunk", OLD_CHUNK) if unbatched else out.get("chunk")
    step, tasks, covered = task_grid(plan, count, chunk)
    task, offset = out["task"], out["offset"]
    if task > tasks:
        raise StateRefused("task", f"is {task}, but epoch {out['epoch']} of this pipeline has {tasks} tasks of {step} samples "
                           f"(the task after the last batch is at most {tasks}, the end of the epoch)")
    rows = min(step, covered - task * step) if task < tasks else 0
    whole_batches = plan.part.aligned and not unbatched  # each task is one batch, or several whole ones
    if offset and task == tasks:
        raise StateRefused("offset", f"is {offset}, but a state at the end of the epoch always has offset 0")
    if offset % (batch or 1) and whole_batches:
        raise StateRefused("offset", f"is {offset}, but the tasks of this pipeline are whole batches, so its offset "
                           f"is always a multiple of the batch size, {batch}")
    if task < tasks and offset >= rows:
        raise StateRefused("offset", f"is {offset}, but task {task} holds only {rows} samples (the offset counts "
                           "those already delivered, fewer than the task holds)")
    consumed = min(covered, task * step)
    if out["batches"] > consumed + offset and not _runs_ahead(plan):
        raise StateRefused("batches", f"is {out['batches']}, more than the {consumed + offset} samples delivered before "
                           f"task {task}, offset {offset}")
    if plan.part.aligned and out["batches"] != (consumed + offset if unbatched else -(-(consumed + offset) // batch)):
        what = (f"every sample is one item, so {consumed + offset} items come before task {task}, offset {offset}"
                if unbatched else f"every batch holds {batch} samples (the epoch's last may hold fewer), so "
                f"{-(-(consumed + offset) // batch)} batches come before task {task}, offset {offset}")
        raise StateRefused("task", f"is {task} and state['offset'] {offset}, but state['batches'] is {out['batches']}: "
                           f"in this pipeline {what}")
    skipped = out["skipped"] = [list(item) for item in state["skipped"]]
    if skipped and plan.part.aligned:
        raise StateRefused("skipped", "lists skipped samples, but this pipeline never skips any (no on_error='skip')",
                           "resume with the pipeline that saved it")
    if skipped:
        before = set(order[:consumed].tolist())
        for k, (index, _) in enumerate(skipped):
            if isinstance(index, bool) or not isinstance(index, numbers.Integral) or index not in before:
                raise StateRefused("skipped", f"item {k} names sample {index!r}, which is not among the "
                                   f"{consumed} samples of the tasks before task {task}")
            skipped[k][0] = int(index)
        if len({i for i, _ in skipped}) != len(skipped):
            raise StateRefused("skipped", "names a sample twice")


def _check_streams(state: dict, out: dict, plan) -> None:
    for name in ("chunk",):
        if name in state:
            raise StateRefused(name, "is for an indexed source; this pipeline reads a generator source",
                               "resume with the pipeline that saved it")
    if out["task"]:
        raise StateRefused("task", f"is {out['task']}, but the state of a generator source keeps its place in "
                           "state['streams'] and always has 0 here")
    offset = out["offset"]
    size = plan.part.batch_size or plan.part.stream_chunk  # items a task reads (batches are re-cut across shards)
    if offset >= size:
        raise StateRefused("offset", f"is {offset}, but a task of this generator source reads at most "
                           f"{size} items (the offset counts those already delivered, fewer)")
    streams = state.get("streams")
    if not isinstance(streams, dict) or set(streams) != {"positions", "exhausted", "cursor"}:
        raise StateRefused("streams", f"must be a dict with 'positions', 'exhausted' and 'cursor', got {streams!r:.100}")
    shards = plan.epoch_shards(out["epoch"])
    known = set(shards)
    positions = streams["positions"]
    shard_length = getattr(plan.part.source, "shard_length", None)  # a generator with samples_per_epoch
    if not isinstance(positions, dict):
        raise StateRefused("streams", f"['positions'] must map shard numbers to items read, got {positions!r:.80}")
    clean = {}
    for key, value in positions.items():
        shard = _shard_id(key, "streams")
        if shard not in known:
            raise StateRefused("streams", f"['positions'] names shard {shard}, which is not among this epoch's shards {sorted(known)!r:.80}")
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
            raise StateRefused("streams", f"['positions'][{key!r}] must be the number of items read (an integer >= 0), got {value!r}")
        length = shard_length(shard) if shard_length is not None else None
        if length is not None and value > length:
            raise StateRefused("streams", f"['positions'][{key!r}] is {value}, but shard {shard} gives {length} items per epoch")
        clean[shard] = int(value)
    exhausted = streams["exhausted"]
    if not isinstance(exhausted, list):
        raise StateRefused("streams", f"['exhausted'] must be a list of shard numbers, got {exhausted!r:.80}")
    done = [_shard_id(s, "streams") for s in exhausted]
    if any(s not in known for s in done) or len(set(done)) != len(done):
        raise StateRefused("streams", f"['exhausted'] must list shards of this epoch {sorted(known)!r:.80} once each, got {exhausted!r:.80}")
    cursor = streams["cursor"]
    if isinstance(cursor, bool) or not isinstance(cursor, numbers.Integral) or not 0 <= cursor < len(shards):
        raise StateRefused("streams", f"['cursor'] must be an integer from 0 to {len(shards) - 1} (the next shard to read), got {cursor!r}")
    if offset and shards[cursor] in done:
        raise StateRefused("offset", f"is {offset}, items of a task of shard {shards[cursor]}, which state['streams'] lists as exhausted")
    out["streams"] = {"positions": clean, "exhausted": sorted(done), "cursor": int(cursor)}
    if out["batches"] > sum(clean.values()) + offset and not _runs_ahead(plan) and plan.window is None:
        raise StateRefused("batches", f"is {out['batches']}, more than the {sum(clean.values()) + offset} items read from the shards")
    skipped = out["skipped"] = [list(item) for item in state["skipped"]]
    for k, (index, _) in enumerate(skipped):
        ok = (isinstance(index, (list, tuple)) and len(index) == 2
              and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in index))
        if not ok or index[0] not in known or not 0 <= index[1] < clean.get(index[0], 0):
            raise StateRefused("skipped", f"item {k} names {index!r}, which is not a (shard, item) already read")
        skipped[k][0] = [int(v) for v in index]
