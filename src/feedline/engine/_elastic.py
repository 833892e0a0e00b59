"""Elastic resume: the ranks' states of one epoch as one position, and that position shared over other ranks.

Each rank's ``it.state()`` of a sharded pipeline carries ``"shard"``: its
rank, the rank count, ``even``, the fingerprint of the pipeline without the
shard (``"base"``: the same on every rank) and ``"taken"``, the positions of
its share it has delivered. `combine_states` checks that the states fit
together (one epoch, one pipeline, every rank once) and keeps their counts;
`position_of` turns those counts into a global position (`_shares`) once the
pipeline that resumes them gives the epoch's length. A state whose positions
count rows rather than samples (``filter``, ``on_error="skip"``, buckets,
``pack``, budgets) has no ``"taken"``, and generator sources no ``"shard"``:
they resume on their own ranks only.
"""

from __future__ import annotations

import numbers

from ._shares import position, share_length, space
from ._state import EVENS, STATE_VERSION, StateRefused, check_elastic, check_fields, digest, seal

__all__ = ["ADVICE", "NOT_ELASTIC", "check_combined", "combine_states", "lock_step_taken", "position_of"]

NOT_ELASTIC = ("its ranks' positions count rows after filter(), map(on_error='skip'), bucket_by_length(), pack() or "
               "batch_by_budget(), which name no samples of the epoch")
ADVICE = ("resume each rank from its own state on the same number of ranks (torch.distributed.checkpoint keeps one copy "
          "of an entry that every rank saves under the same key: save each rank's loader under its own, "
          "{f'loader_{rank}': loader}), or restart at an epoch boundary")
_COMBINED = ("version", "kind", "epoch", "fingerprint", "seeds", "mix_seed", "shard", "elastic", "digest")


def combine_states(states) -> dict:
    """One state for a whole job from the ``it.state()`` of each of its W ranks, to resume on any number of ranks.

    ``pipe.shard(r, W2).resume(combined)`` then delivers on rank r its share
    of the samples no rank delivered, and the ranks together deliver each of
    them once (see docs/checkpoints.md). Needed where ranks may stand at
    different points (a rank stopped a batch ahead); ranks that took the same
    number of batches can resume from any one rank's state instead.

    Args:
        states: every rank's state, in any order (JSON round trips are fine).

    Returns:
        A small JSON-able dict (its size grows with the rank count only).

    Raises:
        ValueError: a state is not one of a sharded pipeline's, was edited,
            or the states do not fit together (another epoch or pipeline, a
            rank missing or twice); the message names the rank and field.

    >>> import numpy as np, feedline as fl
    >>> def rank(r, ranks):
    ...     return fl.from_arrays(np.arange(12)).shard(r, ranks).batch(2)
    >>> its = [iter(rank(r, 2)) for r in range(2)]
    >>> [next(it).tolist() for it in its]
    [[0, 2], [1, 3]]
    >>> combined = fl.combine_states([it.state() for it in its])
    >>> [[b.tolist() for b in rank(r, 3).resume(combined)] for r in range(3)]
    [[[4, 7], [10]], [[5, 8], [11]], [[6, 9]]]
    """
    if isinstance(states, dict) or not isinstance(states, (list, tuple)) or not states:
        raise ValueError(f"combine_states() takes a list of every rank's it.state(), got {_short(states)}")
    checked = [_rank_state(state, k) for k, state in enumerate(states)]
    first = checked[0]
    count = first["shard"]["count"]
    for k, state in enumerate(checked):
        for name, mine, theirs, what in (
                ("['epoch']", state["epoch"], first["epoch"], "another epoch"),
                ("['shard']['base']", state["shard"]["base"], first["shard"]["base"],
                 "another pipeline: its source, steps, seeds or batch size differ"),
                ("['shard']['count']", state["shard"]["count"], count, "another number of ranks"),
                ("['shard']['even']", state["shard"]["even"], first["shard"]["even"], "another shard(even=...)"),
                ("['elastic']", state.get("elastic"), first.get("elastic"), "an epoch resumed from another point")):
            if mine != theirs:
                raise ValueError(f"combine_states(): states[{k}]{name} is {_short(mine)}, states[0]'s is "
                                 f"{_short(theirs)} ({what}): the states must come from the ranks of one job at one "
                                 "point of one epoch; pass the states the ranks saved together")
    ranks = sorted(state["shard"]["index"] for state in checked)
    if ranks != list(range(count)):
        missing = sorted(set(range(count)) - set(ranks))
        twice = sorted({r for r in ranks if ranks.count(r) > 1})
        raise ValueError(f"combine_states(): the states come from {count} ranks, but "
                         + (f"rank {missing[0]} has no state" if missing else f"rank {twice[0]} has two") +
                         f" (ranks given: {ranks}); pass exactly one state from each rank 0..{count - 1}")
    by_rank = sorted(checked, key=lambda state: state["shard"]["index"])
    out = {"version": STATE_VERSION, "kind": "ranks", "epoch": first["epoch"], "fingerprint": first["shard"]["base"],
           "seeds": first.get("seeds", []),
           "shard": {"count": count, "even": first["shard"]["even"], "taken": [s["shard"]["taken"] for s in by_rank]}}
    if "mix_seed" in first:
        out["mix_seed"] = first["mix_seed"]
    if first.get("elastic") is not None:
        out["elastic"] = first["elastic"]
    return seal(out)


def _rank_state(state, k: int) -> dict:
    try:
        fields = check_fields(state)
    except StateRefused as refusal:
        raise ValueError(f"combine_states(): states[{k}]: {refusal}") from refusal
    if "digest" in state and digest(state) != state["digest"]:
        raise ValueError(f"combine_states(): states[{k}]['digest'] does not match its other fields: the state was "
                         "changed after it.state() wrote it; pass the states unchanged")
    shard = state.get("shard")
    if shard is None:
        raise ValueError(f"combine_states(): states[{k}] has no 'shard': it was saved by a pipeline without shard() "
                         "(or a generator source, or an older feedline), so it is a whole epoch's position already; "
                         "resume it directly with pipe.shard(r, count).resume(state)")
    if "taken" not in shard:
        raise ValueError(f"combine_states(): states[{k}] cannot be combined: {NOT_ELASTIC}; {ADVICE}")
    return fields


def check_combined(state) -> dict:
    """A `combine_states` result checked field by field and by digest; `StateRefused` otherwise."""
    unknown = sorted(str(k) for k in state if k not in _COMBINED)
    if unknown:
        raise StateRefused(unknown[0], "is not a field combine_states() writes", "pass its result unchanged")
    for name in ("version", "epoch", "fingerprint", "shard"):
        if name not in state:
            raise StateRefused(name, "is missing: this is not what combine_states() returns", "pass its result unchanged")
    if state["version"] != STATE_VERSION:
        raise StateRefused("version", f"is {state['version']!r}; this feedline reads version {STATE_VERSION}")
    if not _count(state["epoch"]):
        raise StateRefused("epoch", f"must be an integer >= 0, got {_short(state['epoch'])}")
    shard = state["shard"]
    ok = (isinstance(shard, dict) and set(shard) == {"count", "even", "taken"} and _count(shard["count"], 1)
          and shard["even"] in EVENS and isinstance(shard["taken"], list) and len(shard["taken"]) == shard["count"]
          and all(_count(n) for n in shard["taken"]))
    if not ok:
        raise StateRefused("shard", f"must hold 'count', 'even' and 'taken' (one count per rank), got {_short(shard)}",
                           "pass the result of combine_states() unchanged")
    if state.get("elastic") is not None:
        check_elastic(state["elastic"])
    if "digest" not in state or digest(state) != state["digest"]:
        raise StateRefused("digest", "is missing or does not match the other fields: the state was changed after "
                           "combine_states() wrote it", "pass its result unchanged, or combine the ranks' states again")
    return state


def lock_step_taken(length: int, elastic, count: int, even, batches: int, rows: int, drop: bool, shard_type,
                    epoch: int, rank: int) -> list[int]:
    """What each of ``count`` ranks delivered when every one took ``batches`` batches of ``rows`` (or all it had).

    Raises:
        StateRefused: ``rank``'s state is at the end of a share shorter than
            another rank's, which may have taken a batch more.
    """
    taken, full = [], []
    for q in range(count):
        n = share_length(length, elastic, q, count, even)
        full.append(n // rows if drop else -(-n // rows))
        taken.append(n if batches >= full[-1] else batches * rows)
    if batches >= full[rank] and max(full) > batches:
        raise StateRefused("batches", (
            f"is {batches}, the end of rank {rank}'s share, but other ranks have {max(full)} batches this epoch: "
            "one rank's state cannot say whether they took their last one"),
            "combine every rank's state with fl.combine_states([...]) and resume that, or shard with even='drop' "
            "(or 'pad') so that every rank has as many batches")
    return taken


def position_of(combined: dict, length: int, shard_type) -> dict:
    """The global position of a combined state, for an epoch of ``length`` samples before the shard."""
    shard, elastic, epoch = combined["shard"], combined.get("elastic"), combined["epoch"]
    if elastic is not None:
        size = space(length, elastic["ranks"], elastic["even"])
        last = max([elastic["done"] - 1, *elastic["extra"][-1:]])
        if last >= size:
            raise StateRefused("elastic", f"names position {last}, but this pipeline's epoch evened for "
                               f"{elastic['ranks']} ranks has {size} (another dataset length?)",
                               "resume with the pipeline that saved it")
    for q, taken in enumerate(shard["taken"]):
        n = share_length(length, elastic, q, shard["count"], shard["even"])
        if taken > n:
            raise StateRefused("shard", f"says rank {q} delivered {taken} samples, but its share of this pipeline's "
                               f"epoch has {n} (another dataset length?)", "resume with the pipeline that saved it")
    return position(length, elastic, shard["count"], shard["even"], shard["taken"], shard_type, epoch)


def _count(value, low: int = 0) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= low


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 100 else text[:97] + "..."
