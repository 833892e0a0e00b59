"""The field checks of a checkpoint state that need no pipeline: its shape, its version, each field's type.

`check_fields` runs the envelope checks (a dict, this version, known
fields, the required ones present), then one small checker per field, in
the order of `FIELD_CHECKS`: the first field that fails names itself in a
`StateRefused`. The checks against a pipeline are in
`feedline.engine._state_plan`; the module `feedline.engine._state` ties
them together.
"""

from __future__ import annotations

import numbers

from .._errors import FeedlineError

__all__ = ["EVENS", "FIELDS", "FIELD_CHECKS", "REQUIRED", "STATE_VERSION", "StateRefused", "check_elastic",
           "check_fields"]

STATE_VERSION = 1
FIELDS = ("version", "epoch", "batches", "skipped", "fingerprint", "task", "offset", "chunk", "streams", "seeds", "digest",
          "buckets", "window", "pack", "mix_seed", "parts", "shard", "elastic", "deal")
REQUIRED = ("epoch", "batches", "skipped", "fingerprint", "task", "offset")  # every state has these
EVENS = (None, "drop", "pad")  # shard(even=...)
ADVICE = ("use the state it.state() returned, unchanged (json.dump and json.load keep it), "
          "or start the epoch over with pipe.epoch(k)")
OTHER_PIPELINE = "resume with the pipeline that saved it"  # the advice where a field belongs to another pipeline


class StateRefused(FeedlineError, ValueError):
    """A state that ``resume()`` will not use (a ``ValueError``); ``field`` names the culprit."""

    def __init__(self, field: str | None, problem: str, advice: str = ADVICE):
        where = f"state[{field!r}] " if field else "the state "
        super().__init__(f"resume(): {where}{problem}" + (f"; {advice}" if advice else ""))
        self.field = field


# ------------------------------------------------------------- value tests
def is_integer(value) -> bool:
    """An integer, and not a bool (JSON keeps them apart; Python does not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_count(value, low: int = 0) -> bool:
    """An integer >= ``low``."""
    return is_integer(value) and value >= low


def are_integers(value) -> bool:
    """A list of integers."""
    return isinstance(value, list) and all(is_integer(g) for g in value)


def shard_id(value, name: str) -> int:
    """A shard number, from an integer or from a JSON object's key (a string of digits)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)  # a JSON object's keys are strings
    if not is_integer(value):
        raise StateRefused(name, f"names shard {value!r}, which is not a shard number")
    return int(value)


def whole(value, name: str, what: str, low: int = 0) -> int:
    """``value`` of field ``name`` as an int >= ``low``; ``what`` says what it counts, for the refusal."""
    if not is_integer(value):
        raise StateRefused(name, f"must be an integer ({what}), got {value!r} (a {type(value).__name__})")
    if value < low:
        raise StateRefused(name, f"must be >= {low} ({what}), got {value}")
    return int(value)


# ---------------------------------------------------------- field checkers
# Each takes a field's value and its name and returns the clean value, or raises `StateRefused`.
def _integer(what: str, low: int = 0):
    """The checker of an integer field that counts ``what``."""
    def check(value, name: str) -> int:
        return whole(value, name, what, low)
    return check


def _string(value, name: str):
    if not isinstance(value, str):
        raise StateRefused(name, f"must be a string, got {value!r}")
    return value


def _seeds(seeds, name: str):
    if not isinstance(seeds, list) or not all(is_count(s) for s in seeds):
        raise StateRefused(name, f"must be a list of the shuffle seeds (integers >= 0), got {seeds!r:.80}")
    return seeds


def _parts(parts, name: str):
    def pair(p) -> bool:
        return isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(v, str) for v in p)

    if not isinstance(parts, list) or not all(pair(p) for p in parts):
        raise StateRefused(name, f"must be a list of [label, digest] pairs of strings, got {parts!r:.80}")
    return parts


def _shard(shard, name: str):
    check_shard(shard)
    return shard


def _elastic(elastic, name: str) -> dict:
    return check_elastic(elastic)


def _buckets(buckets, name: str) -> list:
    if not isinstance(buckets, list) or not all(is_count(n) for n in buckets):
        raise StateRefused(name, f"must be a list of row counts (integers >= 0), one per bucket, got {buckets!r:.80}")
    return [int(n) for n in buckets]


def _skipped(skipped, name: str):
    if not isinstance(skipped, list):
        raise StateRefused(name, f"must be a list of [index, reason] pairs, got a {type(skipped).__name__}")
    for k, item in enumerate(skipped):
        if not isinstance(item, (list, tuple)) or len(item) != 2 or not isinstance(item[1], str):
            raise StateRefused(name, f"must be a list of [index, reason] pairs; item {k} is {item!r:.80}")
    return skipped


FIELD_CHECKS = (  # (field, checker), in the order they run: the first to fail names itself
    ("epoch", _integer("the epoch number")),
    ("batches", _integer("the batches already delivered in this epoch")),
    ("task", _integer("the next task of the epoch")),
    ("offset", _integer("rows of that task already delivered")),
    ("chunk", _integer("samples per task", low=1)),
    ("fingerprint", _string),
    ("digest", _string),
    ("seeds", _seeds),
    ("parts", _parts),
    ("mix_seed", _integer("the seed of fl.mix()")),
    ("shard", _shard),
    ("elastic", _elastic),
    ("buckets", _buckets),
    ("skipped", _skipped),
)


# ------------------------------------------------------------------ checks
def check_fields(state) -> dict:
    """The checks that need no pipeline: a dict, the version, known fields of the right types.

    Returns a copy of ``state`` with its integer fields (and the counts in
    ``"elastic"`` and ``"buckets"``) as plain ints.
    """
    _check_envelope(state)
    out = dict(state)
    for name, check in FIELD_CHECKS:
        if name in state:
            out[name] = check(state[name], name)
    return out


def _check_envelope(state) -> None:
    """A dict of this version, of the fields it.state() writes, with every required one."""
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
    for name in REQUIRED:
        if name not in state:
            raise StateRefused(name, "is missing")


def check_elastic(elastic) -> dict:
    """The ``"elastic"`` field: a global position (`feedline.engine._shares`), its types and order; `StateRefused` otherwise."""
    ok = (isinstance(elastic, dict) and set(elastic) == {"ranks", "even", "done", "extra"} and is_count(elastic["ranks"], 1)
          and elastic["even"] in EVENS and is_count(elastic["done"]) and isinstance(elastic["extra"], list)
          and all(is_count(p) for p in elastic["extra"]))
    if not ok:
        raise StateRefused("elastic", f"must hold 'ranks', 'even', 'done' and 'extra' (positions), got {elastic!r:.100}")
    extra = elastic["extra"]
    if any(b <= a for a, b in zip(extra, extra[1:])) or (extra and extra[0] <= elastic["done"]):
        raise StateRefused("elastic", f"['extra'] must list positions after 'done' ({elastic['done']}) once each, in order")
    return {"ranks": int(elastic["ranks"]), "even": elastic["even"], "done": int(elastic["done"]),
            "extra": [int(p) for p in extra]}


def check_shard(shard) -> None:
    """The ``"shard"`` field: this rank, the rank count, ``even``, the unsharded fingerprint, and maybe ``"taken"``."""
    keys = set(shard) if isinstance(shard, dict) else set()
    ok = (keys in ({"index", "count", "even", "base"}, {"index", "count", "even", "base", "taken"})
          and is_count(shard["count"], 1) and is_count(shard["index"]) and shard["index"] < shard["count"]
          and shard["even"] in EVENS and isinstance(shard["base"], str) and is_count(shard.get("taken", 0)))
    if not ok:
        raise StateRefused("shard", f"must hold 'index' < 'count', 'even', 'base' and maybe 'taken', got {shard!r:.100}")
