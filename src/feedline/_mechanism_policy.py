"""The sizes and times from which feedline's mechanisms pay for themselves, in one frozen value.

Each mechanism reads its threshold from `current_mechanisms()` when it
decides: a tail task is cut into pieces, a thread or serial executor makes
its allocator, a store gather is planned, a remote read-ahead starts. A
test varies one with `feedline.testing.mechanism_policy`. The backend
choice has its own policy (`feedline.engine.choice.Policy`).
"""

from __future__ import annotations

import dataclasses

from ._in_force import InForce, check_not_negative

__all__ = ["DEFAULT_MECHANISMS", "MechanismPolicy", "current_mechanisms", "mechanisms_in_force"]


@dataclasses.dataclass(frozen=True)
class MechanismPolicy:
    """When each mechanism switches on; each reason is its comment."""

    tail_piece_seconds: float = 0.01  # a tail piece takes at least this much work: its message and its share of the join stay small beside it
    reuse_arrays_from: int = 16 << 20  # bytes: thread and serial workers use batch arrays this big again; smaller ones come from malloc's free lists without fresh pages
    gather_row_by_row: int = 4 << 10  # bytes: a store gather copies larger rows one by one into the batch, smaller ones a record batch at a time
    read_ahead_idle_stop: float = 30.0  # seconds without a read of a fetched file that end a remote store's read-ahead (an epoch left early)

    def __post_init__(self):
        check_not_negative(self)
        if self.tail_piece_seconds == 0:
            raise ValueError("feedline: MechanismPolicy.tail_piece_seconds must be above 0 (it divides a batch's work)")


DEFAULT_MECHANISMS = MechanismPolicy()
mechanisms_in_force: InForce[MechanismPolicy] = InForce(DEFAULT_MECHANISMS)


def current_mechanisms() -> MechanismPolicy:
    """The policy in force: `DEFAULT_MECHANISMS` unless a ``mechanisms_in_force.using`` block put another."""
    return mechanisms_in_force.current()
