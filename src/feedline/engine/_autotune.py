"""Settings chosen by measurement, for what the user left unset.

Backend (thread or process), by a GIL probe run once when the runtime
starts: the fused per-sample steps run on a few samples in one thread, then
on as many again in two threads at once. If two threads keep at least
`THREAD_SCALING` times as many cores busy (CPU seconds per wall second, a
measure that other load on the machine scales alike in both runs; plain
throughput for work that mostly waits on I/O), the work releases the GIL
(decoders, NumPy on big arrays, I/O) and threads win: no start-up, no
transport. If not, the work holds the GIL and only processes scale; that
verdict, when doubtful (below 0.9x or between 1.1x and the threshold), is
measured twice and the better ratio kept, since other load on the machine
can only make threads look worse (`feedline.engine._choice`). The probe is bounded
to about `PROBE_SECONDS`; its samples' results are discarded (outputs never
depend on the backend, so a noisy probe can cost speed, never correctness).

Prefetch depth, while running (`DepthTuner`): when, within a window of
batches, the consumer had to wait *and* the workers were held back because
every prefetch slot was taken, the depth grows by one batch per worker, up
to a memory budget (`MEMORY_BUDGET` bytes of batches in flight).

Worker count: one per core available to the process (``sched_getaffinity``),
never more: extra workers on a saturated machine only add switching.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from ..worker import Task, run_task

__all__ = ["DepthTuner", "MEMORY_BUDGET", "PROBE_SECONDS", "THREAD_SCALING", "probe_gil"]

THREAD_SCALING = 1.5  # 2 threads must beat 1 by this much to count as GIL-free
PROBE_SECONDS = 0.1  # time the probe may take, roughly: it delays the first batch
MEMORY_BUDGET = 1 << 30  # bytes of batches the prefetch depth may keep in flight


def probe_gil(part, count: int) -> tuple[float | None, float | None, str]:
    """Measure how two threads scale on the pipeline's per-sample work.

    Returns:
        (scaling, seconds per sample, note): scaling is one-thread time over
        two-thread time for the same number of samples (2.0 = perfect, 1.0 =
        fully serialised by the GIL), or None when it could not be measured.
    """
    if count < 3:
        return None, None, "too few samples to measure"
    try:
        start = time.perf_counter()
        _run(part, [0])  # warm-up: imports and caches on first use
        warm = time.perf_counter() - start
        per = max(warm, 1e-6)
        n = int(max(2, min(8, (PROBE_SECONDS / 3) / per)))
        n = min(n, (count - 1) // 3)
        if n < 1:
            return None, per, "too few samples to measure"
        t0, c0 = time.perf_counter(), time.thread_time()
        _run(part, list(range(1, 1 + n)))
        one, one_cpu = time.perf_counter() - t0, time.thread_time() - c0
        chunks = [list(range(1 + n + k * n, 1 + 2 * n + k * n)) for k in range(2)]
        barrier = threading.Barrier(2)
        errors, cpu = [], []

        def work(indices):
            try:
                barrier.wait()
                c = time.thread_time()
                _run(part, indices)
                cpu.append(time.thread_time() - c)
            except Exception as exc:  # reported through the note, and the probe is void
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(c,), name="feedline-probe") for c in chunks]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        two = time.perf_counter() - t0
        if errors:
            return None, one / n, f"probe failed ({type(errors[0]).__name__}: {errors[0]})"
        if two <= 0 or one <= 0:
            return None, one / n, "too fast to measure"
        if one_cpu < 0.5 * one:
            # Mostly off the CPU (I/O, sleep): compare throughput directly.
            return (2 * one) / two, one / n, f"{n} samples per run, I/O-like"
        # CPU-bound: compare cores kept busy (CPU seconds per wall second), which
        # other programs' load on the machine scales alike in both runs.
        return (sum(cpu) / two) / (one_cpu / one), one / n, f"{n} samples per run"
    except Exception as exc:  # a sample that fails here fails later, where on_error applies
        return None, None, f"probe failed ({type(exc).__name__}: {exc})"


def _run(part, indices) -> None:
    result = run_task(part, Task(epoch=0, number=-1, indices=np.asarray(indices, dtype=np.int64)))
    if result.error is not None:
        raise RuntimeError(result.error.message)


class DepthTuner:
    """Raises the prefetch depth while the consumer waits behind full prefetch slots."""

    WINDOW = 16  # batches per decision

    def __init__(self, depth: int, workers: int, enabled: bool):
        self.depth, self.workers, self.enabled = depth, workers, enabled
        self.batch_bytes = None
        self._waited = 0
        self._blocked = 0
        self._seen = 0

    def observe(self, waited: bool, blocked: bool, batch) -> str | None:
        """Record one batch; return a decision (text) when the depth changes."""
        if not self.enabled:
            return None
        if self.batch_bytes is None:
            self.batch_bytes = _nbytes(batch)
        self._seen += 1
        self._waited += waited
        self._blocked += blocked
        if self._seen < self.WINDOW:
            return None
        waited, blocked = self._waited, self._blocked
        self._seen = self._waited = self._blocked = 0
        if waited >= 2 and blocked >= 2:
            limit = max(self.depth, MEMORY_BUDGET // max(1, self.batch_bytes or 1))
            new = min(self.depth + self.workers, limit)
            if new > self.depth:
                old, self.depth = self.depth, new
                return (f"prefetch depth {old} -> {new}: the consumer waited in {waited} of {self.WINDOW} batches "
                        f"while workers were held back by full prefetch slots in {blocked}")
        return None


def _nbytes(batch) -> int:
    from .._tree import flatten

    _, arrays = flatten(batch)
    return sum(a.nbytes for a in arrays) or 1
