"""Where a trial of the automatic choice stands: one value, not a set of flags."""

from __future__ import annotations

import enum

__all__ = ["Phase"]


class Phase(enum.Enum):
    """The phases of `feedline.engine._trial.BackendTrial`, in the order a first trial runs them.

    A trial run again (drift, grown threads meeting the GIL) starts at
    ``STARTING_PROCESSES`` (processes were the loser) or
    ``MEASURING_PROCESSES`` (threads were: the workers are up).
    """

    JUDGING_THREADS = "threads take the tasks; their CPU clocks are read side by side"
    STARTING_PROCESSES = "the process workers start; threads keep taking tasks meanwhile"
    MEASURING_PROCESSES = "every worker is up: processes take the tasks and are measured alone"
    MEASURING_THREADS = "the threads' bound did not settle it: threads are measured alone"
    SETTLED = "one backend keeps the work; its rate is watched for drift"

    @property
    def processes_up(self) -> bool:
        """Every process worker is up (measured, or being measured against)."""
        return self in (Phase.MEASURING_PROCESSES, Phase.MEASURING_THREADS)
