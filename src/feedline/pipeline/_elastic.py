"""Resuming a state of other ranks: the facade's side of `feedline.engine._elastic`.

`moves_ranks` tells a state taken on another layout (another rank, rank
count or ``even``, or a `combine_states` result) from this pipeline's own;
`checked` turns it into the state of this rank's share of the rest of the
epoch, checked as `Pipeline.resume` checks any state. A single rank's state
stands for every rank in lock step (each took the same number of batches);
the pipeline it came from is this one with the state's ``shard()`` in place
of its own, and checks it before anything is derived from it.
"""

from __future__ import annotations

import weakref

from ..engine import _elastic, _shares, _state
from ._steps import Shard

__all__ = ["checked", "given_batches", "moves_ranks", "shard_field"]

_BASES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # pipeline -> fingerprint without its shard()
_ADVICE = "resume with the same pipeline, changing only shard(index, count, even=...)"


def shard_field(pipe) -> dict | None:
    """What a sharded pipeline's states carry as ``"shard"`` (less ``"taken"``, which the iterator adds); None unsharded."""
    layout = _shares.layout_of(pipe.plan)
    if layout.shard is None or pipe.plan.streaming:
        return None
    return {"index": layout.index, "count": layout.count, "even": layout.even, "base": _base_fingerprint(pipe)}


def moves_ranks(state, pipe) -> bool:
    """Whether ``state`` was taken on other ranks than ``pipe``'s shard, or combines several ranks' states."""
    if not isinstance(state, dict):
        return False
    if state.get("kind") == "ranks":
        return True
    if pipe.plan.streaming:  # no "shard" in its states: other ranks' if only a shard() step differs (then refused)
        return state.get("fingerprint") != pipe._fingerprint() and _only_shard_differs(state.get("parts"), pipe._parts())
    ours = _shares.layout_of(pipe.plan)
    theirs = state.get("shard")
    if not isinstance(theirs, dict):  # an unsharded pipeline's state, or one written before states named their shard
        return ours.shard is not None and state.get("fingerprint") != pipe._fingerprint()
    return [theirs.get("index"), theirs.get("count"), theirs.get("even")] != [ours.index, ours.count, ours.even]


def checked(state: dict, pipe) -> dict:
    """The state with which this rank resumes its share of the rest of ``state``'s epoch; `StateRefused` otherwise."""
    _refuse_unsupported(pipe.plan)
    combined, own = (_elastic.check_combined(state), None) if state.get("kind") == "ranks" else _lock_step(state, pipe)
    if combined["fingerprint"] != _base_fingerprint(pipe):
        raise _other_pipeline(combined, pipe)
    ours = _shares.layout_of(pipe.plan)
    if own is not None and [combined["shard"]["count"], combined["shard"]["even"]] == [ours.count, ours.even]:
        return _own_share(own, pipe, combined["shard"]["taken"][ours.index])  # another rank of these same ranks
    epoch = combined["epoch"]
    length = _shares.base_length(pipe.plan, epoch)
    inner = {"version": _state.STATE_VERSION, "epoch": epoch, "batches": 0, "skipped": [],
             "fingerprint": pipe._fingerprint(), "task": 0, "offset": 0, "seeds": combined.get("seeds", []),
             "elastic": _elastic.position_of(combined, length, Shard)}
    if pipe.plan.part.batch_size is None:  # unbatched: name the grid, as an unbatched state does
        share = _shares.share_length(length, inner["elastic"], ours.index, ours.count, ours.even)
        inner["chunk"] = pipe.plan.task_size(share)
    return _state.check(_state.seal(inner), pipe.plan, inner["fingerprint"])


def given_batches(inner: dict, pipe) -> int:
    """Batches before ``inner`` (a `checked` state) on this rank: its share of a whole epoch's, less those left to deliver."""
    ours, plan, epoch = _shares.layout_of(pipe.plan), pipe.plan, inner["epoch"]
    length = _shares.base_length(plan, epoch)

    def batches(rows: int) -> int:
        size = plan.part.batch_size or 1
        return rows // size if plan.drop_remainder else -(-rows // size)

    whole = batches(_shares.share_length(length, None, ours.index, ours.count, ours.even))
    rest = batches(_shares.share_length(length, inner.get("elastic"), ours.index, ours.count, ours.even)) - inner["batches"]
    return max(0, whole - rest)


def _own_share(own: dict, pipe, taken: int) -> dict:
    """This rank's own state after ``taken`` samples of its share: what it would have saved in lock step with ``own``'s rank.

    On the layout the state was saved on, the rest of the epoch is each
    rank's own share from there, so its position stays a plain one (no new
    ``"elastic"``), which the states of the other ranks combine with.
    """
    plan, epoch = pipe.plan, own["epoch"]
    order = _shares.epoch_order(plan, epoch, own.get("elastic"), keep=True)
    unbatched = plan.part.batch_size is None
    step, tasks, covered = _state.task_grid(plan, len(order), own.get("chunk", _state.OLD_CHUNK) if unbatched else own.get("chunk"))
    task, offset = (tasks, 0) if taken >= covered else divmod(taken, step)
    done = min(taken, covered)
    inner = {"version": _state.STATE_VERSION, "epoch": epoch, "batches": done if unbatched else -(-done // plan.part.batch_size),
             "skipped": [], "fingerprint": pipe._fingerprint(), "task": task, "offset": offset,
             "seeds": own.get("seeds", [])}
    for name in ("chunk", "elastic"):
        if own.get(name) is not None:
            inner[name] = own[name]
    return _state.check(_state.seal(inner), plan, inner["fingerprint"])


def _lock_step(state: dict, pipe) -> dict:
    """One rank's state as every rank's (each took as many batches), in `combine_states`'s form."""
    fields = _state.check_fields(state)
    theirs = state.get("shard")
    shard = None if theirs is None else Shard(theirs["index"], theirs["count"], theirs["even"])
    origin = _their_pipeline(pipe, shard, fields["fingerprint"])
    if origin is None:
        raise _other_pipeline({"seeds": fields.get("seeds"), "mix_seed": fields.get("mix_seed")}, pipe)
    own = origin._checked_state(state)  # every check of a plain resume, digest included, on the pipeline that saved it
    plan, epoch = origin.plan, own["epoch"]
    count, even = (1, None) if shard is None else (shard.count, shard.even)
    length = _shares.base_length(plan, epoch)
    taken = _elastic.lock_step_taken(length, own.get("elastic"), count, even, own["batches"], plan.part.batch_size or 1,
                                     plan.drop_remainder, Shard, epoch, 0 if shard is None else shard.index)
    if theirs is not None and "taken" in theirs and theirs["taken"] != taken[shard.index]:
        raise _state.StateRefused("shard", f"says rank {shard.index} delivered {theirs['taken']} samples, not the "
                                  f"{taken[shard.index]} of its {own['batches']} batches")
    combined = {"epoch": epoch, "fingerprint": _base_fingerprint(origin), "seeds": own.get("seeds", []),
                "shard": {"count": count, "even": even, "taken": taken}}
    if own.get("elastic") is not None:
        combined["elastic"] = own["elastic"]
    return combined, own


def _refuse_unsupported(plan) -> None:
    if plan.streaming:
        raise _state.StateRefused("shard", (
            "was taken on other ranks, but a generator source is sharded by its generator shards, whose streams "
            "cannot be dealt to another number of ranks"), _elastic.ADVICE)
    if not plan.part.aligned:
        raise _state.StateRefused("shard", f"was taken on other ranks, but {_elastic.NOT_ELASTIC}", _elastic.ADVICE)
    after = _shares.layout_of(plan).after
    if after:
        raise _state.StateRefused("shard", (
            f"was taken on other ranks, but this pipeline has {after[0].describe()} after shard(), which would count "
            "in the new share rather than the epoch"), "put take()/skip() before shard() to resume on other ranks")


def _only_shard_differs(theirs, ours) -> bool:
    if not isinstance(theirs, list) or len(theirs) != len(ours):
        return False
    differ = [(a, b) for a, b in zip(theirs, ours) if list(a) != list(b)]
    return bool(differ) and all(": shard(" in str(a[0]) and ": shard(" in b[0] for a, b in differ)


def _base_fingerprint(pipe) -> str:
    base = _BASES.get(pipe)
    if base is None:
        steps = tuple(s for s in pipe.steps if not isinstance(s, Shard))
        base = _BASES[pipe] = (pipe if len(steps) == len(pipe.steps) else type(pipe)(pipe.source, steps))._fingerprint()
    return base


def _their_pipeline(pipe, shard, fingerprint: str):
    """``pipe`` with ``shard`` (None: none) in place of its own shard(), if that is the pipeline of ``fingerprint``."""
    steps = list(pipe.steps)
    at = [k for k, s in enumerate(steps) if isinstance(s, Shard)]
    if at:
        steps[at[-1]:at[-1] + 1] = [] if shard is None else [shard]
        candidates = [tuple(steps)]
    elif shard is None:
        candidates = [tuple(steps)]
    else:  # this pipeline has no shard(): the state's may have sat anywhere among the steps
        candidates = [tuple(steps[:k] + [shard] + steps[k:]) for k in range(len(steps) + 1)]
    for candidate in candidates:
        try:
            other = type(pipe)(pipe.source, candidate)
        except ValueError:  # shard() where it cannot go (after batch)
            continue
        if other._fingerprint() == fingerprint:
            return other
    return None


def _other_pipeline(combined: dict, pipe) -> _state.StateRefused:
    seeds = [int(s.seed) for s in pipe.plan.index_steps if getattr(s, "seed", None) is not None]
    theirs = combined.get("seeds")
    if theirs and theirs != seeds:
        return _state.StateRefused("fingerprint", (
            f"is another pipeline's beyond shard(): the state's ranks shuffled with seeds {theirs}, this pipeline with "
            f"{seeds}"), f"build the pipeline with shuffle(seed={theirs[0]}) (an explicit seed, the same on every rank)")
    if combined.get("mix_seed") is not None and combined.get("mix_seed") != pipe.plan.order_seed:
        return _state.StateRefused("fingerprint", (
            f"is another pipeline's beyond shard(): the state's ranks used fl.mix(..., seed={combined['mix_seed']}), "
            f"this pipeline seed={pipe.plan.order_seed}"), f"build it with fl.mix(..., seed={combined['mix_seed']})")
    return _state.StateRefused("fingerprint", (
        "is another pipeline's beyond shard(): its source (kind or length), steps, seeds or batch size differ from "
        "this pipeline's"), _ADVICE)
