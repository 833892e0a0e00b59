"""What an epoch did: counts, time per stage, and how long the consumer waited.

Collected always, at a cost of a few clock reads per batch and per sample
(measured in benchmarks/RESULTS.md). `str(stats)` adds the verdict and
advice from `feedline.engine._report`; `save_trace` and `save_plot` (in
`feedline.engine._trace`) draw the same numbers.

Time-stamped records (one per task and per batch) are kept in bounded
deques, so a long epoch keeps its most recent `TIMELINE` entries and the
totals stay exact.
"""

from __future__ import annotations

import collections
import json

from .._collector_watch import full_collections
from .._page_faults import PAGE_SIZE

__all__ = ["Stats", "TIMELINE"]

TIMELINE = 20_000  # time-stamped records kept per epoch (the most recent)


class Stats:
    """Counters for one epoch (``it.stats()``) or a pipeline's last epoch (``pipe.stats()``).

    ``str(stats)`` is a readable table with a verdict and advice;
    ``stats.as_dict()`` is JSON-ready for logging; ``stats.save_trace(path)``
    writes a Chrome trace (open in https://ui.perfetto.dev), and
    ``stats.save_plot(path)`` a PNG of throughput and stall over time.

    >>> import numpy as np, feedline as fl
    >>> with fl.from_arrays(np.arange(10)).map(lambda x: x + 1, backend="serial").batch(5) as pipe:
    ...     batches = list(pipe)
    ...     stats = pipe.stats().as_dict()
    >>> stats["batches"], stats["samples"], stats["backend"]
    (2, 10, 'serial')
    """

    def __init__(self, backend: str, workers: int, depth: int, decision: str, cores: int = 1):
        self.backend, self.workers, self.depth, self.decision, self.cores = backend, workers, depth, decision, cores
        self.epoch = None
        self.source_kind = ""  # the source's class name: the advice differs for a store
        self.batches = 0
        self.samples = 0
        self.skipped: list = []  # [(index, reason)]
        self.stage_seconds: collections.Counter = collections.Counter()  # in workers
        self.consumer_seconds: collections.Counter = collections.Counter()  # in the consumer process
        self.wait_seconds = 0.0  # consumer blocked in next()
        self.wall_seconds = 0.0  # first next() to last
        self.first_batch_seconds = None
        self.worker_restarts = 0
        self.source_counts: collections.Counter = collections.Counter()  # the source's own events (Source.take_counters)
        self.tasks = 0
        self.task_seconds = 0.0  # sum of task spans: worker busy time
        self.task_cpu_seconds = 0.0  # CPU time of those tasks: less than their span means waiting (I/O, GIL)
        self.task_cpu_wait_seconds = 0.0  # ... time they were runnable but waiting for a CPU (other programs; Linux)
        self.fresh_pages = 0  # minor page faults the tasks took: pages the kernel gave them fresh (Linux) ...
        self.task_kernel_seconds = 0.0  # ... and their system CPU time, in which it zeroed those pages (Linux)
        self.worker_windows: dict = {}  # worker -> [first task start, last task end], for the busy share
        self.inflight_total = 0  # sum over batches of tasks in flight when next() was called
        self.decisions: list[str] = []  # autotuning changes made during the epoch, with reasons
        self.trial: dict = {}  # samples/s each backend delivered when feedline chose between them (see engine/_trial.py)
        self.window_peak = 0  # the most rows shuffle(seed, window=N) held at once (never above N; 0 without a window)
        self.items = 0  # pack() / batch_by_budget(): real items (tokens, frames) in the batches cut so far ...
        self.item_slots = 0  # ... and the slots they took (rows x width); the rest is padding
        self.packed = False  # the items are packed (pack()), so their share of the slots is the packing efficiency
        self.dropped_batches = 0  # shard(even="drop") before pack() / batch_by_budget(): this rank's batch of the epoch's
        self.dropped_samples = 0  # incomplete last round of dealt batches, and the samples (pieces) in it
        self.padded_batches = 0  # shard(even="pad") before pack(sizes=) / batch_by_budget(sizes=): the epoch's first batches again
        self.started_at = None  # perf_counter of the first next()
        self.collector_seconds = 0.0  # this process's full garbage collections meanwhile, while in-process workers lived
        self.full_collections = 0  # ... and their count (`feedline._collector_watch`)
        self._collector_from = (0.0, 0)
        self.task_spans: collections.deque = collections.deque(maxlen=TIMELINE)  # (worker, start, end, number, rows)
        self.waits: collections.deque = collections.deque(maxlen=TIMELINE)  # (start, end, rows)

    def add_result(self, result) -> None:
        self.stage_seconds.update(result.times)
        self.skipped.extend(result.skipped)
        start, end = result.span
        self.tasks += 1
        self.task_seconds += end - start
        self.task_cpu_seconds += result.cpu
        self.task_cpu_wait_seconds += result.cpu_wait
        self.fresh_pages += result.fresh_pages
        self.task_kernel_seconds += result.kernel_cpu
        window = self.worker_windows.setdefault(result.worker, [start, end])
        window[0], window[1] = min(window[0], start), max(window[1], end)
        if result.transport:
            self.consumer_seconds["transport"] += result.transport

    def begin(self, now: float) -> None:
        """The epoch's first ``next()`` at ``now`` (perf_counter): its clock and its full collections count from here."""
        self.started_at, self._collector_from = now, full_collections()

    def lap(self, now: float) -> None:
        """A batch handed out at ``now``: the epoch's wall time, and the full collections since `begin`."""
        self.wall_seconds = now - self.started_at
        (seconds, count), (seconds_before, count_before) = full_collections(), self._collector_from
        self.collector_seconds, self.full_collections = seconds - seconds_before, count - count_before

    def add_counts(self, counts: dict) -> None:
        """Add a source's counts (`Source.take_counters`: e.g. a remote store's download retries and failures)."""
        if counts:
            self.source_counts.update(counts)

    def add_span(self, result, number: int) -> None:
        start, end = result.span
        self.task_spans.append((result.worker, start, end, number, result.rows))

    # -------------------------------------------------------------- reading
    @property
    def worker_busy_share(self) -> float | None:
        """Share of the workers' time spent running tasks (1.0 = saturated).

        Measured per worker from its first task's start to its last task's
        end, so worker start-up does not count as idleness.
        """
        window = sum(end - start for start, end in self.worker_windows.values())
        return min(1.0, self.task_seconds / window) if window > 0 else None

    @property
    def cpu_share(self) -> float | None:
        """CPU time over wall time of the tasks: low means they mostly wait (I/O, sleep, the GIL)."""
        return min(1.0, self.task_cpu_seconds / self.task_seconds) if self.task_seconds > 0 else None

    @property
    def cpu_wait_share(self) -> float | None:
        """Share of the tasks' time spent runnable but waiting for a CPU: other programs hold the cores (Linux; else 0)."""
        return min(1.0, self.task_cpu_wait_seconds / self.task_seconds) if self.task_seconds > 0 else None

    @property
    def kernel_share(self) -> float | None:
        """Share of the tasks' CPU time spent in the kernel: high with fresh pages means zeroing memory (Linux; else 0)."""
        return min(1.0, self.task_kernel_seconds / self.task_cpu_seconds) if self.task_cpu_seconds > 0 else None

    @property
    def fresh_mib(self) -> float:
        """MiB of fresh memory the tasks faulted in (`fresh_pages` pages)."""
        return self.fresh_pages * PAGE_SIZE / 2**20

    @property
    def input_bound_share(self) -> float | None:
        """Share of the consumer's time spent waiting for data."""
        return self.wait_seconds / self.wall_seconds if self.wall_seconds else None

    @property
    def padding_share(self) -> float | None:
        """Share of the slots of packed (``pack``) or budgeted (``batch_by_budget``) batches that hold padding."""
        return 1.0 - self.items / self.item_slots if self.item_slots else None

    @property
    def packing_efficiency(self) -> float | None:
        """Share of the packed rows' slots that hold real items (``pack`` only; 1 - `padding_share`)."""
        return self.items / self.item_slots if (self.packed and self.item_slots) else None

    def verdict(self):
        """The analysis of these numbers (see `feedline.engine._report.Verdict`)."""
        from ._report import analyse

        return analyse(self)

    def as_dict(self) -> dict:
        wall = self.wall_seconds or 0.0
        verdict = self.verdict()
        return {
            "epoch": self.epoch,
            "backend": self.backend,
            "workers": self.workers,
            "cores": self.cores,
            "prefetch_depth": self.depth,
            "decision": self.decision,
            "decisions": list(self.decisions),
            "trial": dict(self.trial),
            "window_peak": self.window_peak,
            "padding_share": self.padding_share,
            "packing_efficiency": self.packing_efficiency,
            "dropped_batches": self.dropped_batches,
            "dropped_samples": self.dropped_samples,
            "padded_batches": self.padded_batches,
            "batches": self.batches,
            "samples": self.samples,
            "samples_per_second": self.samples / wall if wall > 0 else None,
            "skipped": len(self.skipped),
            "skipped_indices": [index for index, _ in self.skipped],
            "stage_seconds": dict(self.stage_seconds),
            "consumer_seconds": dict(self.consumer_seconds),
            "consumer_wait_seconds": self.wait_seconds,
            "wall_seconds": wall,
            "input_bound_share": self.input_bound_share,
            "worker_busy_share": self.worker_busy_share,
            "worker_cpu_share": self.cpu_share,
            "worker_cpu_wait_share": self.cpu_wait_share,
            "mean_tasks_in_flight": self.inflight_total / self.batches if self.batches else None,
            "first_batch_seconds": self.first_batch_seconds,
            "worker_restarts": self.worker_restarts,
            "collector_seconds": self.collector_seconds,
            "full_collections": self.full_collections,
            "fresh_pages": self.fresh_pages,
            "task_kernel_seconds": self.task_kernel_seconds,
            "worker_kernel_share": self.kernel_share,
            "fresh_mib": self.fresh_mib,
            "source_counts": dict(self.source_counts),
            "verdict": verdict.summary,
            "bottleneck": verdict.bottleneck,
            "advice": [text for _, text in verdict.advice],
        }

    def save_trace(self, path) -> None:
        """Write a Chrome trace-event JSON file: one track per worker and one for the consumer."""
        from ._trace import save_trace

        save_trace(self, path)

    def save_plot(self, path) -> None:
        """Write a PNG of throughput and consumer stall over time (needs matplotlib)."""
        from ._trace import save_plot

        save_plot(self, path)

    def __str__(self) -> str:
        from ._report import render

        return render(self)

    def __repr__(self) -> str:
        return f"Stats({json.dumps(self.as_dict(), default=str)})"
