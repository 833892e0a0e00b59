"""The state plumbing behind `Pipeline.resume`, `state_dict` and `load_state_dict`.

A state is checked against the pipeline before anything runs; one that
differs only in a seed is refused with the seed it needs.
"""

from __future__ import annotations

import copy

from ._identity import fingerprint as fingerprint_of
from ._steps import Shuffle

__all__ = ["checked_state", "decoded", "state_dict"]


def checked_state(pipe, state: dict) -> dict:
    """``state`` checked against ``pipe`` as `Pipeline.resume` does (raises ValueError), without starting it."""
    from ..engine import _state  # start-up cost: describing a pipeline imports nothing of the engine
    from . import _elastic  # (imports the engine)

    if _elastic.moves_ranks(state, pipe):  # taken on other ranks: this rank's share of the rest of its epoch
        return _elastic.checked(state, pipe)
    fields = _state.check_fields(state)
    pipe._prepare_source()
    fingerprint = pipe._fingerprint()
    if fields["fingerprint"] != fingerprint:
        raise _refusal(pipe, fields)
    return _state.check(state, pipe.plan, fingerprint)


def _refusal(pipe, fields: dict) -> ValueError:
    """Why a state of another fingerprint is refused: a mix seed or shuffle seeds that differ, or another pipeline."""
    from ..engine import _state  # start-up cost, as in checked_state

    source, steps = pipe.source, pipe.steps
    shuffles = [k for k, step in enumerate(steps) if isinstance(step, Shuffle)]

    def fingerprint_with(seeds) -> str:
        changed = list(steps)
        for k, seed in zip(shuffles, seeds):
            changed[k] = Shuffle(int(seed), changed[k].window)
        return fingerprint_of(source, tuple(changed))

    def mix_fingerprint_with(seed) -> str:
        mixed = copy.copy(source)
        mixed.seed = mixed.order_seed = int(seed)
        return fingerprint_of(mixed, steps)

    refusal = _state.mix_seed_refused(fields, pipe.plan.order_seed, mix_fingerprint_with)
    return refusal or _state.fingerprint_refused(fields, [steps[k].seed for k in shuffles], fingerprint_with, pipe._parts())


def state_dict(pending: dict | None, live, next_epoch: int) -> dict:
    """`Pipeline.state_dict`: a loaded position not yet used, the live epoch's (``live``: a weak reference), or between epochs."""
    from . import _checkpoint

    if pending is not None:
        return _checkpoint.encode(pending)
    iterator = None if live is None else live()
    if iterator is None or iterator.finished:
        return _checkpoint.encode(_checkpoint.between_epochs(next_epoch))
    return _checkpoint.encode({"next_epoch": iterator.epoch + 1, "state": iterator.state(), "given": 0})


def decoded(saved: dict, pipe) -> dict:
    """`Pipeline.load_state_dict`: the position in ``saved`` (a `state_dict`), checked against ``pipe`` (raises ValueError)."""
    from . import _checkpoint

    return _checkpoint.decode(saved, "Pipeline", pipe)
