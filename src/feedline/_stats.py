"""What an epoch did: counts, time per stage, and how long the consumer waited.

The profiler issue grows this into the full report (verdict, advice,
traces); the numbers collected here are its raw material and are cheap
enough to collect always (a few clock reads per task and per sample).
"""

from __future__ import annotations

import collections
import json

__all__ = ["Stats"]


class Stats:
    """Counters for one epoch (``it.stats()``) or a pipeline's last epoch.

    ``str(stats)`` is a readable table; ``stats.as_dict()`` is JSON-ready.
    """

    def __init__(self, backend: str, workers: int, depth: int, decision: str):
        self.backend, self.workers, self.depth, self.decision = backend, workers, depth, decision
        self.epoch = None
        self.batches = 0
        self.samples = 0
        self.skipped: list = []  # [(index, reason)]
        self.stage_seconds: collections.Counter = collections.Counter()
        self.wait_seconds = 0.0  # consumer blocked in next()
        self.wall_seconds = 0.0  # first next() to last
        self.first_batch_seconds = None
        self.worker_restarts = 0

    def add_result(self, result) -> None:
        self.stage_seconds.update(result.times)
        self.skipped.extend(result.skipped)

    def as_dict(self) -> dict:
        wall = self.wall_seconds or 0.0
        return {
            "epoch": self.epoch,
            "backend": self.backend,
            "workers": self.workers,
            "prefetch_depth": self.depth,
            "decision": self.decision,
            "batches": self.batches,
            "samples": self.samples,
            "samples_per_second": self.samples / wall if wall > 0 else None,
            "skipped": len(self.skipped),
            "skipped_indices": [index for index, _ in self.skipped],
            "stage_seconds": dict(self.stage_seconds),
            "consumer_wait_seconds": self.wait_seconds,
            "wall_seconds": wall,
            "input_bound_share": self.wait_seconds / wall if wall > 0 else None,
            "first_batch_seconds": self.first_batch_seconds,
            "worker_restarts": self.worker_restarts,
        }

    def __str__(self) -> str:
        d = self.as_dict()
        rate = f"{d['samples_per_second']:.1f}" if d["samples_per_second"] else "-"
        lines = [
            f"feedline epoch {d['epoch']}: {d['batches']} batches, {d['samples']} samples, {rate} samples/s",
            f"  backend {d['backend']} x{d['workers']}, prefetch {d['prefetch_depth']} ({d['decision']})",
            f"  consumer waited {d['consumer_wait_seconds']:.3f} s of {d['wall_seconds']:.3f} s"
            + (f"; first batch after {d['first_batch_seconds']:.3f} s" if d["first_batch_seconds"] is not None else ""),
        ]
        total = sum(self.stage_seconds.values()) or 1.0
        for stage, seconds in self.stage_seconds.most_common():
            lines.append(f"  {stage:<24} {seconds:9.3f} s worker time  {100 * seconds / total:5.1f} %")
        if self.skipped:
            shown = ", ".join(str(i) for i, _ in self.skipped[:10])
            lines.append(f"  skipped {len(self.skipped)} samples: {shown}{' ...' if len(self.skipped) > 10 else ''}")
        if self.worker_restarts:
            lines.append(f"  worker restarts: {self.worker_restarts}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Stats({json.dumps(self.as_dict(), default=str)})"
