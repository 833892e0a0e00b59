"""Pictures of an epoch: a Chrome trace and a throughput/stall plot.

The trace uses the Chrome trace-event format (JSON; open it in
https://ui.perfetto.dev or chrome://tracing): one track per worker with a
slice per task, and a consumer track with a slice per wait for data.
Worker timestamps come from `time.perf_counter`, a system-wide monotonic
clock on Linux, macOS and Windows, so processes share one time axis.
"""

from __future__ import annotations

import json

__all__ = ["chrome_trace", "save_plot", "save_trace"]


def chrome_trace(stats) -> dict:
    origin = min([s[1] for s in stats.task_spans] + [w[0] for w in stats.waits] or [0.0])
    us = lambda t: round((t - origin) * 1e6, 1)  # noqa: E731 - a local unit conversion
    events = [
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": f"feedline epoch {stats.epoch} ({stats.backend})"}},
        {"name": "thread_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "consumer"}},
    ]
    workers = sorted({span[0] for span in stats.task_spans})
    for worker in workers:
        if worker >= 0:  # (a task run by the consumer itself would be worker -1, on the consumer's track)
            events.append({"name": "thread_name", "ph": "M", "pid": 1, "tid": worker + 1, "args": {"name": f"worker {worker}"}})
    for worker, start, end, number, rows in stats.task_spans:
        events.append({"name": f"task {number}", "cat": "task", "ph": "X", "pid": 1, "tid": worker + 1, "ts": us(start), "dur": round((end - start) * 1e6, 1), "args": {"rows": rows}})
    for start, end, rows in stats.waits:
        events.append({"name": "wait for batch", "cat": "wait", "ph": "X", "pid": 1, "tid": 0, "ts": us(start), "dur": round((end - start) * 1e6, 1), "args": {"rows": rows}})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def save_trace(stats, path) -> None:
    with open(path, "w") as f:
        json.dump(chrome_trace(stats), f)


def save_plot(stats, path, bins: int = 50) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ImportError("save_plot() needs matplotlib: pip install 'feedline[plot]'") from e
    import numpy as np

    waits = list(stats.waits)
    if not waits:
        raise ValueError("save_plot(): no batches were recorded in this epoch")
    origin = waits[0][0]
    ends = np.array([end - origin for _, end, _ in waits])
    stalls = np.array([end - start for start, end, _ in waits])
    rows = np.array([r for _, _, r in waits], dtype=float)
    edges = np.linspace(0.0, max(ends.max(), 1e-6), bins + 1)
    width = edges[1] - edges[0]
    slot = np.clip(np.searchsorted(edges, ends, side="right") - 1, 0, bins - 1)
    rate = np.bincount(slot, weights=rows, minlength=bins) / width
    stall = np.bincount(slot, weights=stalls, minlength=bins) / width
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 4.5))
    top.plot(edges[:-1], rate, drawstyle="steps-post")
    top.set_ylabel("samples/s")
    top.set_title(f"feedline epoch {stats.epoch}: {stats.backend} x{stats.workers}")
    bottom.plot(edges[:-1], 100 * np.minimum(stall, 1.0), drawstyle="steps-post", color="tab:red")
    bottom.set_ylabel("consumer waiting (%)")
    bottom.set_xlabel("seconds since the first batch was asked for")
    bottom.set_ylim(0, 100)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
