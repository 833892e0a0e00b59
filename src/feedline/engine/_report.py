"""Turning an epoch's numbers into a verdict and advice a person can act on.

The rules, each from a measurable quantity in `Stats`:
- input-bound when the consumer spent more than `INPUT_BOUND` of its time
  waiting for batches, else compute-bound (the training step is the limit);
- the bottleneck is the stage with the largest share of worker time;
- workers are saturated when their busy share is above `SATURATED`.
Advice is ranked by estimated gain (an Amdahl estimate from the shares);
every estimate says what it assumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["INPUT_BOUND", "SATURATED", "Verdict", "analyse", "render"]

INPUT_BOUND = 0.10  # consumer waiting more than 10 % of the time: the input pipeline limits training
SATURATED = 0.85  # workers busy more than 85 % of the time: more of the same cannot go faster
STARVED = 0.2  # tasks runnable but waiting for a CPU this share of their time: other programs hold the cores
GIL_TASK_CPU = 0.85  # thread tasks on the CPU less than this share of their span may be GIL-bound (see _input_bound_advice)
_STORE_SOURCES = ("Store", "RemoteStore", "CacheSource")  # sources that already hold decoded data
_DECODE_WORDS = ("decode", "load", "read", "png", "jpeg", "jpg", "open", "imread", "wav", "audio")


@dataclass
class Verdict:
    input_bound: bool | None
    summary: str
    bottleneck: str | None
    bottleneck_share: float | None
    saturated: bool | None
    advice: list = field(default_factory=list)  # [(estimated gain, text)], best first


def analyse(stats) -> Verdict:
    wait = stats.input_bound_share
    busy = stats.worker_busy_share
    stages = {k: v for k, v in stats.stage_seconds.items() if v > 0}
    total = sum(stages.values())
    bottleneck, share = (max(stages.items(), key=lambda kv: kv[1]) if stages else (None, 0.0))
    share = share / total if total else None
    if wait is None:
        return Verdict(None, "no batches yet", bottleneck, share, None)
    input_bound = wait > INPUT_BOUND
    saturated = busy is not None and busy > SATURATED
    if input_bound:
        summary = f"input-bound: the consumer waited {wait:.0%} of the time for data"
    else:
        summary = f"compute-bound: the consumer waited only {wait:.0%} of the time; the input pipeline keeps up"
    advice = []
    if input_bound:
        advice.extend(_input_bound_advice(stats, wait, busy, saturated, bottleneck, share))
    elif busy is not None and stats.workers > 1 and busy < 0.3:
        advice.append((1.0, f"workers are busy only {busy:.0%} of the time: {max(1, round(stats.workers * busy * 2))} workers would do, freeing cores for training"))
    advice.sort(key=lambda item: -item[0])
    return Verdict(input_bound, summary, bottleneck, share, saturated, advice)


def _input_bound_advice(stats, wait, busy, saturated, bottleneck, share):
    advice = []
    # If the input pipeline were infinitely fast the epoch would take wall*(1-wait).
    ceiling = 1.0 / max(1e-9, 1.0 - wait)
    cpu = stats.cpu_share
    windows = list(stats.worker_windows.values())
    span = max(end for _, end in windows) - min(start for start, _ in windows) if windows else 0.0
    cores_used = stats.task_cpu_seconds / span if span > 0 else None
    # Threads that together keep about one core busy are serialised by the GIL;
    # tasks that use far less CPU than their duration are waiting on I/O.
    # (A thread waiting for the GIL is off the CPU, like one waiting on a file,
    # but GIL-bound threads still add up to about one busy core.) A task's own
    # CPU share is ~1/threads when they interleave, but short tasks take turns
    # whole (0.59-0.72 for 2 threads on 8 ms tasks), and some epochs whole
    # tasks each (tasks on the CPU all their span, two threads busy 53 % of
    # the time, one core used between them): tasks on the CPU nearly all
    # their span are GIL-bound only where the threads were idle between them
    # while the consumer was not busy handing out work.
    parallel = min(stats.workers, stats.cores)
    consumer_busy = sum(stats.consumer_seconds.values()) / max(stats.wall_seconds, 1e-9)
    took_turns = 0.2 <= (cpu or 0.0) < GIL_TASK_CPU or (busy is not None and busy < 0.65 and consumer_busy < 0.2)
    gil_bound = (stats.backend == "thread" and parallel >= 2 and cpu is not None and cores_used is not None
                 and took_turns and cores_used < 0.65 * parallel)
    starved = stats.cpu_wait_share or 0.0  # runnable but waiting for a CPU: not I/O, and more workers cannot help
    off_cpu = saturated and cpu is not None and cpu + starved < 0.2 and not gil_bound
    trial = stats.trial
    if gil_bound and trial.get("process") is not None and trial["process"] <= trial.get("thread", 0.0):
        gil_bound = False  # processes were tried on this very pipeline and delivered less: no advice to switch
    if gil_bound:
        gain = min(ceiling, stats.workers / cores_used, stats.cores)
        advice.append((gain, f"{stats.workers} threads keep only {cores_used:.1f} cores busy: the work holds the GIL; use backend='process' (estimated {_x(gain)})"))
    elif off_cpu:
        gain = min(ceiling, 1.0 / max(cpu, 1e-9))
        more = f"workers={4 * stats.cores} with backend='thread'" if stats.backend != "process" else f"workers={2 * stats.cores}"
        advice.append((gain, f"tasks use the CPU only {cpu:.0%} of their time (they wait on I/O or sleep): run more workers than cores, e.g. {more} (estimated {_x(gain)})"))
    # Waits for a CPU beyond those of more workers than cores among themselves (sixteen on two cores wait ~7/8 of
    # their time, and keep the cores busy): other programs hold the cores.
    held_elsewhere = starved - max(0.0, 1.0 - stats.cores / max(1, stats.workers)) >= STARVED
    if held_elsewhere:
        advice.append((min(ceiling, 1.0 / max(1.0 - starved, 1e-9)),
                       f"workers waited for a CPU {starved:.0%} of their task time: other programs on this machine hold the "
                       "cores (the training process's own threads, other jobs); more workers cannot help: give the pipeline "
                       "cores of its own (fewer threads elsewhere, or fewer jobs per machine)"))
    if saturated and not off_cpu and stats.workers < stats.cores:
        gain = min(ceiling, stats.cores / stats.workers)
        advice.append((gain, f"all {stats.workers} workers are saturated and {stats.cores} cores are available: raise workers to {stats.cores} (estimated {_x(gain)})"))
    if saturated and not off_cpu and bottleneck is not None and share:
        gain = min(ceiling, 1.0 / max(1e-9, 1.0 - share))
        if bottleneck == "read" and stats.source_kind in _STORE_SOURCES:
            advice.append((gain, f"reading the store takes {share:.0%} of worker time: fields encoded 'raw' are read without decoding "
                                 f"(see docs/store.md), or raise workers (estimated up to {_x(gain)})"))
        elif any(word in bottleneck.lower() for word in _DECODE_WORDS):
            advice.append((gain, f"{bottleneck} takes {share:.0%} of worker time: decode once into a store (feedline convert / .cache()) or decode at reduced size (estimated up to {_x(gain)})"))
        else:
            advice.append((gain, f"{bottleneck} takes {share:.0%} of worker time: make it cheaper, or move vectorisable work to map_batch (removing it entirely would give {_x(gain)})"))
        if stats.workers >= stats.cores:
            advice.append((min(ceiling, 2.0), "every core is busy feeding: more CPUs are the remaining lever (backend='ray' on a cluster: docs/scaling.md)"))
    if not saturated and not gil_bound and busy is not None:
        inflight = stats.inflight_total / stats.batches if stats.batches else 0.0
        gain = min(ceiling, 1.0 / max(busy, 1e-9))
        if inflight >= 0.9 * stats.depth:
            advice.append((gain, f"workers idle {1 - busy:.0%} of the time with all {stats.depth} prefetch slots taken: finished batches "
                                 f"wait behind a slow one; raise prefetch depth or use map(..., ordered=False) (estimated up to {_x(gain)})"))
        else:
            consumer = sum(stats.consumer_seconds.values())
            advice.append((gain, f"workers idle {1 - busy:.0%} of the time although the consumer waits: the consumer process hands out "
                                 f"work too slowly ({consumer:.2f} s in consumer-side stages) or other programs compete for the cores; "
                                 f"move map_batch work before batch() or use larger batches (estimated up to {_x(gain)})"))
        transport = stats.consumer_seconds.get("transport", 0.0)
        if stats.batches and transport / max(stats.wall_seconds, 1e-9) > 0.2:
            advice.append((min(ceiling, 1.5), f"receiving batches takes {transport / stats.wall_seconds:.0%} of the consumer's time: use larger batches (estimated 1.5x)"))
    return advice


def _x(gain: float) -> str:
    """A speed-up estimate as text; beyond 10x the estimate means little."""
    return "over 10x" if gain > 10 else f"{gain:.1f}x"


def render(stats) -> str:
    d = stats.as_dict()
    rate = f"{d['samples_per_second']:.1f}" if d["samples_per_second"] else "-"
    lines = [
        f"feedline epoch {d['epoch']}: {d['batches']} batches, {d['samples']} samples, {rate} samples/s",
        f"  backend {d['backend']} x{d['workers']} ({d['cores']} cores), prefetch {d['prefetch_depth']}: {d['decision']}",
    ]
    for decision in d["decisions"]:
        lines.append(f"  autotune: {decision}")
    timing = f"  consumer waited {d['consumer_wait_seconds']:.3f} s of {d['wall_seconds']:.3f} s"
    if d["first_batch_seconds"] is not None:
        timing += f"; first batch after {d['first_batch_seconds']:.3f} s"
    lines.append(timing)
    if d["worker_busy_share"] is not None:
        lines.append(f"  workers busy {d['worker_busy_share']:.0%}; tasks in flight on average {d['mean_tasks_in_flight'] or 0:.1f}")
    total = sum(stats.stage_seconds.values()) or 1.0
    lines.append(f"  {'stage':<28} {'seconds':>9}  {'share':>6}")
    for stage, seconds in stats.stage_seconds.most_common():
        lines.append(f"  {stage:<28} {seconds:9.3f}  {100 * seconds / total:5.1f}%")
    for stage, seconds in stats.consumer_seconds.most_common():
        lines.append(f"  {stage + ' (consumer)':<28} {seconds:9.3f}")
    if d["padding_share"] is not None:
        packed = f"; packing efficiency {d['packing_efficiency']:.1%}" if d["packing_efficiency"] is not None else ""
        lines.append(f"  padding {d['padding_share']:.1%} of {stats.item_slots:,} item slots{packed}")
    if stats.skipped:
        shown = ", ".join(str(i) for i, _ in stats.skipped[:10])
        lines.append(f"  skipped {len(stats.skipped)} samples: {shown}{' ...' if len(stats.skipped) > 10 else ''}")
    if stats.worker_restarts:
        lines.append(f"  worker restarts: {stats.worker_restarts}")
    counted = [(name, n) for name, n in sorted(stats.source_counts.items()) if n]
    if counted:  # e.g. a remote store's downloads, retries and failed downloads
        lines.append("  source: " + ", ".join(f"{name} {n}" for name, n in counted))
    lines.append(f"  verdict: {d['verdict']}")
    if d["bottleneck"]:
        lines.append(f"  slowest stage: {d['bottleneck']}")
    for n, text in enumerate(d["advice"], 1):
        lines.append(f"  advice {n}: {text}")
    return "\n".join(lines)
