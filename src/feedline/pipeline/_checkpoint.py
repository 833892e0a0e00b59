"""The ``state_dict()`` layout shared by `Pipeline` and the adapters' loaders.

A position is ``{"next_epoch": k, "state": it.state() or None, "given": n}``:
mid-epoch, ``state`` is the live epoch's state and ``given`` the batches
handed out in it; between epochs, ``state`` is None and the next epoch is
``k``. It travels as ``{"feedline": VERSION, "position": <JSON text>}``:
one text leaf, so ``torch.distributed.checkpoint`` loads it into a fresh
object's ``state_dict()`` (whose keys must match the saved ones) whether it
was taken mid-epoch or between epochs.
"""

from __future__ import annotations

import json

__all__ = ["VERSION", "between_epochs", "decode", "encode"]

VERSION = 1  # the layout of state_dict(); load_state_dict refuses others


def between_epochs(next_epoch: int) -> dict:
    """The position of an object whose next ``iter()`` starts epoch ``next_epoch``."""
    return {"next_epoch": next_epoch, "state": None, "given": 0}


def encode(position: dict) -> dict:
    return {"feedline": VERSION, "position": json.dumps(position)}


def decode(state_dict, where: str, pipe) -> dict:
    """The position in ``state_dict``, checked against ``pipe`` now (raises ValueError naming the field)."""
    if not isinstance(state_dict, dict) or state_dict.get("feedline") != VERSION or "position" not in state_dict:
        raise ValueError(
            f"{where}.load_state_dict(): expected a dict from {where}.state_dict() with 'feedline': {VERSION} "
            f"and 'position', got {_short(state_dict)}; pass the state_dict() of an object built the same way"
        )
    text = state_dict["position"]
    try:
        position = json.loads(text.decode() if isinstance(text, bytes) else text)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{where}.load_state_dict(): 'position' is not the JSON text state_dict() wrote ({e})") from e
    if not isinstance(position, dict) or set(position) != {"next_epoch", "state", "given"}:
        raise ValueError(f"{where}.load_state_dict(): 'position' must hold next_epoch, state and given, got {_short(position)}")
    for name in ("next_epoch", "given"):
        value = position[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where}.load_state_dict(): position field {name!r} must be an integer >= 0, got {value!r}")
    if position["state"] is not None:
        from ._elastic import given_batches, moves_ranks  # start-up cost: imports the engine, as Pipeline.resume does

        checked = pipe._checked_state(position["state"])  # the pipeline's own checks (fingerprint, digest), before anything runs
        if moves_ranks(position["state"], pipe):  # another rank count's: this rank's share of the rest, counted from here
            position = {"next_epoch": checked["epoch"] + 1, "state": checked, "given": given_batches(checked, pipe)}
    return position


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
