"""What the automatic choice's trial measures of a backend's tasks: `Measure` while it tries them, `Drift` after.

Both count finished tasks (`feedline.worker.Result`: ``rows``, ``span``,
``cpu``), never wall-clock windows, so a pool's rate does not depend on
when the consumer looked. Neither reads a clock nor touches an executor.
"""

from __future__ import annotations

from .choice import DEFAULT_POLICY, Measured, Policy

__all__ = ["Drift", "Measure"]


class Measure:
    """Tasks one backend ran alone: samples per second and cores kept busy, for all its workers.

    Per task, not per wall-clock window: a worker's rate is rows over the
    task's span, and the pool's is that times the number of workers. Tasks
    that ran beside fewer busy workers than the pool (threads just widened,
    the epoch's last tasks cut into pieces) went faster than a full pool's,
    so the pool is credited at most the ``cores`` it runs on (`per_second`).
    """

    def __init__(self, workers: int, cores: int, min_span: float = DEFAULT_POLICY.evidence_span):
        self.workers, self.cores, self.min_span = workers, cores, min_span
        self.rows = self.span = self.cpu = 0.0
        self.tasks = 0

    def add(self, result) -> None:
        """Count one finished task (none once `done`: the measure is complete)."""
        if self.done:
            return
        start, end = result.span
        self.rows += result.rows
        self.span += max(end - start, 1e-9)
        self.cpu += result.cpu
        self.tasks += 1

    @property
    def done(self) -> bool:
        """A task per worker at least, and ``min_span`` seconds of them per worker."""
        return self.tasks >= self.workers and self.span >= self.workers * self.min_span

    @property
    def per_second(self) -> float:
        return self.workers * self.rows / self.span * min(1.0, self.cores / max(self.claimed_cores, 1e-9))

    @property
    def claimed_cores(self) -> float:
        """The cores the measured tasks' CPU, times the workers, say the pool kept busy (more than it has: see above)."""
        return self.workers * self.cpu / self.span

    @property
    def cores_busy(self) -> float:
        return min(self.claimed_cores, self.cores)

    def measured(self) -> Measured:
        """What the model reads of these tasks (`feedline.engine.choice.Measured`)."""
        per_second = self.per_second if self.tasks else 0.0
        return Measured(self.tasks, self.span, per_second, self.cores_busy if self.tasks else 0.0, self.done)


class Drift:
    """The winner's samples/s per worker over windows of tasks after the decision, against the rate that won."""

    def __init__(self, policy: Policy = DEFAULT_POLICY):
        self.policy = policy
        self.rows = self.span = 0.0
        self.tasks = 0
        self.low = 0  # windows in a row below the policy's drift_ratio of the decided rate
        self.last = 0.0  # the last full window's rate

    def add(self, result) -> None:
        start, end = result.span
        self.rows += result.rows
        self.span += max(end - start, 1e-9)
        self.tasks += 1

    def drifted(self, decided: float, workers: int) -> bool:
        """True once `WinnerWatch.drift_windows` full windows in a row ran below `WinnerWatch.drift_ratio` of ``decided``."""
        if self.tasks < max(8, 4 * workers) or self.span < self.policy.evidence_span * workers:
            return False
        self.last = self.rows / self.span
        self.low = self.low + 1 if decided > 0 and self.last < self.policy.watch.drift_ratio * decided else 0
        self.rows = self.span = 0.0
        self.tasks = 0
        return self.low >= self.policy.watch.drift_windows

    def describe(self, decided: float) -> str:
        return f"{self.last:,.0f} samples/s per worker, was {decided:,.0f}"
