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

The checks live in two modules: `feedline.engine._state_fields` (each
field's type, no pipeline needed) and `feedline.engine._state_plan` (the
fields against the pipeline); the task grid a state names is
`feedline.engine._task_grid`. Their names stay importable from here.
"""

from __future__ import annotations

import hashlib
import json
import numbers

from ._state_fields import EVENS, FIELDS, STATE_VERSION, StateRefused, check_elastic, check_fields
from ._state_plan import check_against_plan
from ._task_grid import MAX_CHUNK, MAX_TASK_BYTES, OLD_CHUNK, TARGET_TASK_SECONDS, TASKS_PER_WORKER, cache_share, measured_chunk, task_grid

__all__ = ["EVENS", "FIELDS", "MAX_CHUNK", "MAX_TASK_BYTES", "OLD_CHUNK", "STATE_VERSION", "StateRefused",
           "TARGET_TASK_SECONDS", "TASKS_PER_WORKER", "cache_share", "check", "check_elastic", "check_fields", "digest",
           "fingerprint_refused", "measured_chunk", "mix_seed_refused", "parts_differ", "seal", "task_grid"]


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



# ----------------------------------------------------------------- refusals
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
    (their_source, their_inputs, their_steps), (our_source, our_inputs, our_steps) = _split_parts(theirs), _split_parts(ours)
    if their_source != our_source:
        return ("its source differs in kind or length, or in how it combines its inputs (weights, seed, stop, "
                "repeat count)")
    return _inputs_differ(their_inputs, our_inputs) or _steps_differ(their_steps, our_steps)


def _split_parts(parts) -> tuple[list, list, list]:
    """``(source digests, input parts, step parts)`` of a pipeline's ``[label, digest]`` parts."""
    parts = [tuple(p) for p in parts]
    return ([h for label, h in parts if label == "source"], [p for p in parts if " input " in p[0]],
            [p for p in parts if p[0].startswith("step ")])


def _inputs_differ(theirs: list, ours: list) -> str | None:
    """How the inputs a source combines differ (count, order, or one input), in words; None: they do not."""
    if len(theirs) != len(ours):
        return f"the state's pipeline combined {len(theirs)} inputs, this one combines {len(ours)}"
    their_ids, our_ids = [h for _, h in theirs], [h for _, h in ours]
    if their_ids == our_ids:
        return None
    k = next(k for k, (a, b) in enumerate(zip(their_ids, our_ids)) if a != b)
    if sorted(their_ids) == sorted(our_ids):
        return (f"{ours[k][0]} is input {their_ids.index(our_ids[k])} of the state's pipeline: the same "
                "inputs in another order, whose positions would deliver some samples twice and others never")
    return f"{ours[k][0]} differs from the state's (its source's data or length, its steps or its seeds)"


def _steps_differ(theirs: list, ours: list) -> str | None:
    """How the steps differ (their list, or the first that differs), in words; None: they do not."""
    if [h for _, h in theirs] == [h for _, h in ours]:
        return None
    if len(theirs) != len(ours):
        return (f"its steps differ: the state's pipeline had {', '.join(label for label, _ in theirs)}; this "
                f"one has {', '.join(label for label, _ in ours)}")
    (theirs_label, _), (ours_label, _) = next((a, b) for a, b in zip(theirs, ours) if a[1] != b[1])
    where, _, their_step = theirs_label.partition(": ")
    our_step = ours_label.partition(": ")[2]
    other = " (another function of that name)" if their_step == our_step else ""
    return f"{where} differs: the state's pipeline had {their_step} there, this one has {our_step}{other}"


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
        check_against_plan(state, out, plan)
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
