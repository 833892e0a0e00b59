"""The thresholds of the automatic backend choice, in one frozen value (docs/automatic_choice.md, "The policy").

Every decision `feedline.engine.choice.decide` takes reads its thresholds
from a `Policy`, and the trial's start-up, re-trials and remembered
verdicts read theirs from its parts (`EarlyStart`, `WinnerWatch`,
`Remembering`). The trial (`feedline.engine._trial.BackendTrial`) takes
the policy in force when it is built: `DEFAULT_POLICY`, or the one a test
passes with `feedline.testing.choice_policy`. Shares are of the cores the threads
could use; spans are seconds of wall time on the running pipeline.
"""

from __future__ import annotations

import dataclasses

from ..._in_force import InForce, check_not_negative

__all__ = ["DEFAULT_POLICY", "EarlyStart", "Policy", "Remembering", "WinnerWatch", "current_policy", "first_threads", "using_policy"]


@dataclasses.dataclass(frozen=True)
class EarlyStart:
    """When the trial pays for process start-up before its verdict (`feedline.engine._trial_start`); each reason is its comment."""

    sign_span: float = 0.01  # seconds of a stretch that are a sign of the GIL: start the fork server (two in a row: the workers)
    many_cores: int = 8  # from this many cores: scouts first, and every thread paused while the workers start (one core of many)
    keep_running: int = 1  # threads held back by the GIL that go on while the workers start, at least (under `many_cores`)
    pause_limit: float = 2.0  # seconds paused threads wait for the workers at most: slow workers do not stall the threads' tasks
    connecting_skipped: float = 0.08  # seconds after the server is up that held workers connecting leave only the plain verdict

    def __post_init__(self):
        check_not_negative(self)


@dataclasses.dataclass(frozen=True)
class WinnerWatch:
    """When a decided pipeline is judged again (`feedline.engine._trial_again`); each reason is its comment."""

    gil_cap: float = 1.25  # grown threads within this factor of one core busy are capped by the GIL: try processes
    drift_ratio: float = 0.6  # the winner's rate per worker under this share of what won it ...
    drift_windows: int = 2  # ... this many windows in a row (one may be noise): the machine or the work changed, try again
    retrial_after: float = 10.0  # seconds after a decision before drift may revisit it; doubled each time the winner is confirmed

    def __post_init__(self):
        check_not_negative(self)

    @property
    def gil_limit(self) -> tuple[float, float]:
        """Cores grown threads keep busy between them when one GIL is what limits them."""
        return 1.0 / self.gil_cap, self.gil_cap


@dataclasses.dataclass(frozen=True)
class Remembering:
    """Which verdicts later runs start on (`feedline.engine._remembered`); each reason is its comment."""

    agree: int = 2  # trials in a row that must reach the same verdict: one trial can be wrong (a busy moment, a cold cache)
    runs: int = 10  # runs that start on one remembered verdict before the trial runs again (data and libraries change)
    entries: int = 256  # pipelines remembered per file; the least recently used go first

    def __post_init__(self):
        check_not_negative(self)


@dataclasses.dataclass(frozen=True)
class Policy:
    """What the automatic choice needs to see before it decides; each field's reason is its comment.

    These ten thresholds are the ones `decide` reads. The trial's other
    thresholds are in three parts, each read by one module: ``start``
    (start-up ahead of the verdict), ``watch`` (judging a decided pipeline
    again) and ``remember`` (verdicts later runs start on).

    The rest is derived, so that one idea has one number: threads keep the
    work at once at ``1 / process_margin`` of their cores (processes could
    not beat them by the margin), and a close call is a share between
    ``near_bound`` of that and it (`keep_share`, `close_call_share`).

    >>> Policy().keep_share
    0.9090909090909091
    >>> Policy(watch=WinnerWatch(retrial_after=0.0)).watch.drift_ratio
    0.6
    """

    process_margin: float = 1.1  # processes must deliver this multiple of the threads: threads copy no batch and hold no memory per worker
    near_bound: float = 0.85  # a measured rate or busy share this close to its bound counts as reaching it (measurement noise)
    held_share: float = 0.6  # threads under this share of their cores busy are plainly held by the GIL: one GIL keeps 1/n busy, GIL-free threads beside one more busy process n/(n+1)
    sure_ratio: float = 2.0  # a rate this many times the other's decides on few, cold tasks: cold tasks only slow the faster down
    io_share: float = 0.2  # thread tasks using under this share of a core while they run wait on I/O, not on a CPU ...
    io_together: float = 0.5  # ... if all together use under this much of a core too: one GIL keeps a whole core busy
    early_span: float = 0.02  # seconds past the first samples that give the plain verdict on threads plainly held back
    evidence_span: float = 0.05  # seconds of side-by-side work (per worker, for measured tasks) that make a measurement
    verdict_due: float = 0.3  # seconds without a verdict on the threads (they keep waiting for tasks) before processes start anyway
    scouts: int = 4  # threads judged first on many cores or big pools: what four cannot keep busy, more cannot either
    start: EarlyStart = EarlyStart()
    watch: WinnerWatch = WinnerWatch()
    remember: Remembering = Remembering()

    def __post_init__(self):
        check_not_negative(self)
        if self.process_margin < 1.0:
            raise ValueError(f"feedline: Policy.process_margin must be at least 1 (processes must not win on less "
                             f"than the threads deliver), got {self.process_margin!r}")

    @property
    def keep_share(self) -> float:
        """Threads that keep this share of their cores busy keep the work: processes could not beat them by the margin."""
        return 1.0 / self.process_margin

    @property
    def close_call_share(self) -> float:
        """From here to `keep_share` the whole pool's reading is a close call, judged over `close_call_span`."""
        return self.near_bound

    @property
    def close_call_span(self) -> float:
        """A close call needs three measurements' worth of side-by-side work."""
        return 3 * self.evidence_span


DEFAULT_POLICY = Policy()
_in_force: InForce[Policy] = InForce(DEFAULT_POLICY)


def current_policy() -> Policy:
    """The policy trials built now take: `DEFAULT_POLICY` unless `using_policy` put another in force."""
    return _in_force.current()


def using_policy(policy: Policy):
    """Context manager: trials built inside the ``with`` block take ``policy`` (`feedline.testing.choice_policy` is the public door)."""
    return _in_force.using(policy)


def first_threads(workers: int, cores: int, policy: Policy | None = None) -> int:
    """Threads the automatic choice starts with: all, or `Policy.scouts` where more are asked for or cores are many.

    Threads that hold the GIL share it, so many of them show it only after
    many samples' worth of Python, and what few cannot keep busy, more
    cannot either; few that keep their cores busy say nothing about many,
    so then the whole pool starts and is judged again (`feedline.engine._trial.BackendTrial._widen`).
    """
    policy = policy or current_policy()
    return min(workers, policy.scouts) if cores >= policy.start.many_cores or workers > policy.scouts else workers
