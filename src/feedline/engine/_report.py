"""Turning an epoch's numbers into a verdict and advice a person can act on.

The rules, each from a measurable quantity in `Stats`:
- input-bound when the consumer spent more than `ReportPolicy.input_bound`
  of its time waiting for batches, else compute-bound (the training step is
  the limit);
- the bottleneck is the stage with the largest share of worker time;
- workers are saturated when their busy share is above `ReportPolicy.saturated`.
Every threshold is a field of one `ReportPolicy`.
Advice is ranked by estimated gain (an Amdahl estimate from the shares);
every estimate says what it assumes.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field

from .._malloc import MALLOC_VARS

__all__ = ["DEFAULT_REPORT", "ReportPolicy", "Verdict", "analyse", "render"]


@dataclass(frozen=True)
class ReportPolicy:
    """The thresholds of an epoch's verdict and advice; each reason is its comment (shares of the epoch's wall time unless said)."""

    input_bound: float = 0.10  # the consumer waited more than this share: the input pipeline limits training
    saturated: float = 0.85  # workers busy more than this share: more of the same work cannot go faster
    idle: float = 0.3  # workers of a compute-bound epoch busy less than this share: fewer would do, freeing cores for training
    starved: float = 0.2  # tasks runnable but waiting for a CPU this share of their time, beyond their own crowding: other programs hold the cores
    off_cpu: float = 0.2  # tasks on (or waiting for) a CPU less than this share of their span wait on I/O or sleep
    gil_task_cpu: float = 0.85  # thread tasks on the CPU from `off_cpu` up to this share of their span took turns on the GIL
    gil_busy: float = 0.65  # threads busy under this share, the consumer free, took turns too; taking turns with under this share of their cores busy, one GIL holds them
    consumer_free: float = 0.2  # a consumer busy under this share is not what keeps the workers waiting for tasks
    collector: float = 0.1  # full garbage collections beside in-process workers this share of the epoch: worth a freeze
    kernel: float = 0.1  # in-process workers' system CPU this share of their CPU, faulting in fresh pages: worth keeping freed memory
    transport: float = 0.2  # receiving batches this share of the consumer's time: larger batches carry it better
    full_window: float = 0.9  # prefetch slots taken on average this share of the depth: finished batches wait behind a slow one


DEFAULT_REPORT = ReportPolicy()
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


def analyse(stats, policy: ReportPolicy = DEFAULT_REPORT) -> Verdict:
    wait = stats.input_bound_share
    busy = stats.worker_busy_share
    stages = {k: v for k, v in stats.stage_seconds.items() if v > 0}
    total = sum(stages.values())
    bottleneck, share = (max(stages.items(), key=lambda kv: kv[1]) if stages else (None, 0.0))
    share = share / total if total else None
    if wait is None:
        return Verdict(None, "no batches yet", bottleneck, share, None)
    input_bound = wait > policy.input_bound
    saturated = busy is not None and busy > policy.saturated
    if input_bound:
        summary = f"input-bound: the consumer waited {wait:.0%} of the time for data"
    else:
        summary = f"compute-bound: the consumer waited only {wait:.0%} of the time; the input pipeline keeps up"
    advice = []
    if input_bound:
        advice.extend(_input_bound_advice(_Signals.of(stats, policy, wait, busy, saturated, bottleneck, share)))
    elif busy is not None and stats.workers > 1 and busy < policy.idle:
        advice.append((1.0, f"workers are busy only {busy:.0%} of the time: {max(1, round(stats.workers * busy * 2))} workers would do, freeing cores for training"))
    advice.sort(key=lambda item: -item[0])
    return Verdict(input_bound, summary, bottleneck, share, saturated, advice)


@dataclass(frozen=True)
class _Signals:
    """What the input-bound advice rules read, computed once from an epoch's `Stats` and the verdict's numbers."""

    stats: object
    policy: ReportPolicy
    busy: float | None  # the workers' busy share (None: no task yet)
    saturated: bool
    bottleneck: str | None
    share: float | None  # the bottleneck's share of worker time
    ceiling: float  # the speed-up if the input pipeline were infinitely fast: no estimate may exceed it
    cpu: float | None  # the tasks' CPU share of their span
    cores_used: float | None  # cores the tasks kept busy together over the workers' span
    starved: float  # share of the tasks' time runnable but waiting for a CPU
    off_cpu: bool  # saturated workers whose tasks mostly wait on I/O or sleep
    gil_bound: bool  # thread workers held by the GIL, unless processes were tried and delivered less

    @classmethod
    def of(cls, stats, policy, wait, busy, saturated, bottleneck, share) -> _Signals:
        """The signals of an input-bound epoch (``wait``: the consumer's waiting share, above ``policy.input_bound``)."""
        # If the input pipeline were infinitely fast the epoch would take wall*(1-wait).
        ceiling = 1.0 / max(1e-9, 1.0 - wait)
        cpu = stats.cpu_share
        cores_used = _cores_used(stats)
        looks_gil_bound = _looks_gil_bound(stats, policy, busy, cpu, cores_used)
        starved = stats.cpu_wait_share or 0.0  # runnable but waiting for a CPU: not I/O, and more workers cannot help
        off_cpu = saturated and cpu is not None and cpu + starved < policy.off_cpu and not looks_gil_bound
        gil_bound = looks_gil_bound and not _processes_lost_trial(stats.trial)
        return cls(stats, policy, busy, saturated, bottleneck, share, ceiling, cpu, cores_used, starved, off_cpu, gil_bound)


def _cores_used(stats) -> float | None:
    """Cores the tasks kept busy together, from the first task's start to the last one's end (None: no span)."""
    windows = list(stats.worker_windows.values())
    span = max(end for _, end in windows) - min(start for start, _ in windows) if windows else 0.0
    return stats.task_cpu_seconds / span if span > 0 else None


def _took_turns(stats, policy, busy, cpu) -> bool:
    """Whether thread tasks look like they took turns on one core (see `_looks_gil_bound`)."""
    consumer_busy = sum(stats.consumer_seconds.values()) / max(stats.wall_seconds, 1e-9)
    return (policy.off_cpu <= (cpu or 0.0) < policy.gil_task_cpu
            or (busy is not None and busy < policy.gil_busy and consumer_busy < policy.consumer_free))


def _looks_gil_bound(stats, policy, busy, cpu, cores_used) -> bool:
    """Whether thread workers look serialised by the GIL.

    Threads that together keep about one core busy are serialised by the
    GIL; tasks that use far less CPU than their duration are waiting on I/O.
    (A thread waiting for the GIL is off the CPU, like one waiting on a
    file, but GIL-bound threads still add up to about one busy core.) A
    task's own CPU share is ~1/threads when they interleave, but short
    tasks take turns whole (a share well above 1/threads), and some epochs
    whole tasks each (tasks on the CPU all their span, one core used
    between the threads): tasks on the CPU nearly all their span are
    GIL-bound only where the threads were idle between them while the
    consumer was not busy handing out work.
    """
    parallel = min(stats.workers, stats.cores)
    took_turns = _took_turns(stats, policy, busy, cpu)
    return (stats.backend == "thread" and parallel >= 2 and cpu is not None and cores_used  # (no CPU at all: waiting)
            and took_turns and cores_used < policy.gil_busy * parallel)


def _processes_lost_trial(trial: dict) -> bool:
    """Whether processes were tried on this very pipeline and delivered no more than threads."""
    return trial.get("process") is not None and trial["process"] <= trial.get("thread", 0.0)


def _backend_advice(s: _Signals) -> list:
    """Processes for GIL-bound threads, or more workers than cores for tasks that wait off the CPU."""
    stats = s.stats
    if s.gil_bound:
        gain = min(s.ceiling, stats.workers / s.cores_used, stats.cores)
        return [(gain, f"{stats.workers} threads keep only {s.cores_used:.1f} cores busy: the work holds the GIL; use backend='process' (estimated {_x(gain)})")]
    if s.off_cpu:
        gain = min(s.ceiling, 1.0 / max(s.cpu, 1e-9))
        more = f"workers={4 * stats.cores} with backend='thread'" if stats.backend != "process" else f"workers={2 * stats.cores}"
        return [(gain, f"tasks use the CPU only {s.cpu:.0%} of their time (they wait on I/O or sleep): run more workers than cores, e.g. {more} (estimated {_x(gain)})")]
    return []


def _cores_held_elsewhere_advice(s: _Signals) -> list:
    """Cores of its own for the pipeline when other programs hold them.

    Counts only the waits for a CPU beyond those of more workers than cores
    among themselves (sixteen on two cores wait ~7/8 of their time, and
    keep the cores busy).
    """
    stats = s.stats
    held_elsewhere = s.starved - max(0.0, 1.0 - stats.cores / max(1, stats.workers)) >= s.policy.starved
    if not held_elsewhere:
        return []
    return [(min(s.ceiling, 1.0 / max(1.0 - s.starved, 1e-9)),
             f"workers waited for a CPU {s.starved:.0%} of their task time: other programs on this machine hold the "
             "cores (the training process's own threads, other jobs); more workers cannot help: give the pipeline "
             "cores of its own (fewer threads elsewhere, or fewer jobs per machine)")]


def _collector_advice(s: _Signals) -> list:
    """`gc.freeze()` after set-up, where full collections beside in-process workers took a large share of an epoch.

    Each full collection walks every object the process holds with the GIL
    held, so every thread waits; the objects a framework made at import and
    the model never need walking again.
    """
    stats = s.stats
    share = stats.collector_seconds / max(stats.wall_seconds, 1e-9)
    if share < s.policy.collector:  # (timed only while thread or serial workers lived: `feedline._collector_watch`)
        return []
    gain = min(s.ceiling, 1.0 / max(1e-9, 1.0 - share))
    took = (f"{stats.full_collections} full collections of the garbage collector took {share:.0%} of the epoch "
            f"({stats.collector_seconds:.2f} s, every thread waiting")
    if gc.get_freeze_count():  # the process's own objects are frozen already: what is walked is what samples make
        return [(gain, f"{took}: each walks the containers the samples make and keep): make fewer per sample "
                       f"(NumPy arrays rather than lists of lists), or backend='process' (estimated up to {_x(gain)})")]
    return [(gain, f"{took}: each walks every object this process holds): call gc.freeze() once your model is "
                   "built, or set FEEDLINE_TUNE_PROCESS=1, under which feedline freezes them while thread workers "
                   f"run (estimated up to {_x(gain)})")]


def _fresh_memory_advice(s: _Signals) -> list:
    """Keep freed memory (glibc's thresholds), where in-process workers spent a large share of their CPU faulting it in.

    glibc hands the memory freed after each batch back to the kernel, which
    zeroes every page again for the next batch's samples. Only from a
    pipeline's second epoch: the first pass also faults in the pages of
    memory-mapped files, which no allocator setting keeps. Process workers
    get the thresholds from feedline (`feedline._malloc`).
    """
    stats = s.stats
    if stats.backend not in ("thread", "serial") or not stats.epoch or not stats.fresh_pages:
        return []
    share = stats.kernel_share or 0.0
    if share < s.policy.kernel:
        return []
    gain = min(s.ceiling, 1.0 / max(1e-9, 1.0 - share))
    fresh = stats.fresh_mib
    env = " ".join(f"{name}={value}" for name, value in MALLOC_VARS.items())
    return [(gain, f"the workers spent {share:.0%} of their CPU time in the kernel, which gave them {fresh:,.0f} MiB of "
                   f"fresh memory this epoch ({fresh / max(stats.batches, 1):,.1f} MiB a batch): glibc hands back what "
                   f"each batch freed, and its pages are zeroed again for the next. Start Python with {env} in its "
                   "environment (what feedline's process workers get), or set FEEDLINE_TUNE_PROCESS=1, under which "
                   f"feedline sets them while thread workers run (estimated up to {_x(gain)})")]


def _more_workers_advice(s: _Signals) -> list:
    """As many workers as cores, for saturated workers fewer than the cores."""
    stats = s.stats
    if not (s.saturated and not s.off_cpu and stats.workers < stats.cores):
        return []
    gain = min(s.ceiling, stats.cores / stats.workers)
    return [(gain, f"all {stats.workers} workers are saturated and {stats.cores} cores are available: raise workers to {stats.cores} (estimated {_x(gain)})")]


def _bottleneck_text(stats, bottleneck: str, share: float, gain: float) -> str:
    """How to make the slowest stage cheaper: store reads, decoding, or any other stage."""
    if bottleneck == "read" and stats.source_kind in _STORE_SOURCES:
        return (f"reading the store takes {share:.0%} of worker time: fields encoded 'raw' are read without decoding "
                f"(see docs/store.md), or raise workers (estimated up to {_x(gain)})")
    if any(word in bottleneck.lower() for word in _DECODE_WORDS):
        return f"{bottleneck} takes {share:.0%} of worker time: decode once into a store (feedline convert / .cache()) or decode at reduced size (estimated up to {_x(gain)})"
    return f"{bottleneck} takes {share:.0%} of worker time: make it cheaper, or move vectorisable work to map_batch (removing it entirely would give {_x(gain)})"


def _bottleneck_advice(s: _Signals) -> list:
    """A cheaper slowest stage, for saturated workers; more CPUs when every core already feeds."""
    stats = s.stats
    if not (s.saturated and not s.off_cpu and s.bottleneck is not None and s.share):
        return []
    gain = min(s.ceiling, 1.0 / max(1e-9, 1.0 - s.share))
    advice = [(gain, _bottleneck_text(stats, s.bottleneck, s.share, gain))]
    if stats.workers >= stats.cores:
        advice.append((min(s.ceiling, 2.0), "every core is busy feeding: more CPUs are the remaining lever (backend='ray' on a cluster: docs/scaling.md)"))
    return advice


def _idle_workers_text(stats, policy, busy: float, gain: float) -> str:
    """Why workers sit idle while the consumer waits: full prefetch slots, or a consumer that hands out work slowly."""
    inflight = stats.inflight_total / stats.batches if stats.batches else 0.0
    if inflight >= policy.full_window * stats.depth:
        return (f"workers idle {1 - busy:.0%} of the time with all {stats.depth} prefetch slots taken: finished batches "
                f"wait behind a slow one; raise prefetch depth or use map(..., ordered=False) (estimated up to {_x(gain)})")
    consumer = sum(stats.consumer_seconds.values())
    return (f"workers idle {1 - busy:.0%} of the time although the consumer waits: the consumer process hands out "
            f"work too slowly ({consumer:.2f} s in consumer-side stages) or other programs compete for the cores; "
            f"move map_batch work before batch() or use larger batches (estimated up to {_x(gain)})")


def _idle_workers_advice(s: _Signals) -> list:
    """Workers that are not saturated although the consumer waits; larger batches when receiving them is slow."""
    stats = s.stats
    if s.saturated or s.gil_bound or s.busy is None:
        return []
    gain = min(s.ceiling, 1.0 / max(s.busy, 1e-9))
    advice = [(gain, _idle_workers_text(stats, s.policy, s.busy, gain))]
    transport = stats.consumer_seconds.get("transport", 0.0)
    if stats.batches and transport / max(stats.wall_seconds, 1e-9) > s.policy.transport:
        advice.append((min(s.ceiling, 1.5), f"receiving batches takes {transport / stats.wall_seconds:.0%} of the consumer's time: use larger batches (estimated 1.5x)"))
    return advice


_INPUT_BOUND_RULES = (_backend_advice, _cores_held_elsewhere_advice, _collector_advice, _fresh_memory_advice,
                      _more_workers_advice, _bottleneck_advice, _idle_workers_advice)  # in this order: equal gains keep it after the ranking


def _input_bound_advice(signals: _Signals) -> list:
    """Advice for an input-bound epoch: each rule of `_INPUT_BOUND_RULES` adds its [(estimated gain, text)]."""
    return [item for rule in _INPUT_BOUND_RULES for item in rule(signals)]


def _x(gain: float) -> str:
    """A speed-up estimate as text; beyond 10x the estimate means little."""
    return "over 10x" if gain > 10 else f"{gain:.1f}x"


def render(stats, policy: ReportPolicy = DEFAULT_REPORT) -> str:
    """The readable table of ``str(stats)``: the run's settings, time per stage, what was left out, verdict and advice."""
    d = stats.as_dict()
    lines = _header_lines(d) + _timing_lines(d, policy) + _stage_lines(stats) + _epoch_notes(stats, d) + _verdict_lines(d)
    return "\n".join(lines)


def _header_lines(d: dict) -> list[str]:
    """What ran: the epoch's counts and rate, the backend and its reason, and the autotuner's changes."""
    rate = f"{d['samples_per_second']:.1f}" if d["samples_per_second"] else "-"
    lines = [
        f"feedline epoch {d['epoch']}: {d['batches']} batches, {d['samples']} samples, {rate} samples/s",
        f"  backend {d['backend']} x{d['workers']} ({d['cores']} cores), prefetch {d['prefetch_depth']}: {d['decision']}",
    ]
    lines.extend(f"  autotune: {decision}" for decision in d["decisions"])
    return lines


def _timing_lines(d: dict, policy: ReportPolicy) -> list[str]:
    """How long the consumer waited (and for its first batch), and how busy the workers were."""
    timing = f"  consumer waited {d['consumer_wait_seconds']:.3f} s of {d['wall_seconds']:.3f} s"
    if d["first_batch_seconds"] is not None:
        timing += f"; first batch after {d['first_batch_seconds']:.3f} s"
    lines = [timing]
    if d["full_collections"]:
        lines.append(f"  full garbage collections: {d['full_collections']}, {d['collector_seconds']:.3f} s")
    if d["fresh_pages"] and (d["worker_kernel_share"] or 0.0) >= policy.kernel:
        lines.append(f"  fresh memory in the workers: {d['fresh_mib']:,.1f} MiB "
                     f"({d['fresh_pages']:,} page faults), kernel time {d['task_kernel_seconds']:.3f} s")
    if d["worker_busy_share"] is not None:
        lines.append(f"  workers busy {d['worker_busy_share']:.0%}; tasks in flight on average {d['mean_tasks_in_flight'] or 0:.1f}")
    return lines


def _stage_lines(stats) -> list[str]:
    """The table of seconds per stage: the workers' stages with their share, then the consumer's."""
    total = sum(stats.stage_seconds.values()) or 1.0
    lines = [f"  {'stage':<28} {'seconds':>9}  {'share':>6}"]
    lines.extend(f"  {stage:<28} {seconds:9.3f}  {100 * seconds / total:5.1f}%" for stage, seconds in stats.stage_seconds.most_common())
    lines.extend(f"  {stage + ' (consumer)':<28} {seconds:9.3f}" for stage, seconds in stats.consumer_seconds.most_common())
    return lines


def _epoch_notes(stats, d: dict) -> list[str]:
    """One line for each thing of note that happened: padding, dropped or repeated batches, skips, restarts, source counts."""
    return [line for note in (_padding_note, _dropped_note, _padded_note, _skipped_note, _restarts_note, _source_note)
            if (line := note(stats, d)) is not None]


def _padding_note(stats, d: dict) -> str | None:
    if d["padding_share"] is None:
        return None
    packed = f"; packing efficiency {d['packing_efficiency']:.1%}" if d["packing_efficiency"] is not None else ""
    return f"  padding {d['padding_share']:.1%} of {stats.item_slots:,} item slots{packed}"


def _dropped_note(stats, d: dict) -> str | None:
    if not stats.dropped_batches:
        return None
    return (f"  dropped {stats.dropped_batches} batch ({stats.dropped_samples} samples) of the epoch's last, "
            "incomplete round, so every rank takes the same number")


def _padded_note(stats, d: dict) -> str | None:
    if not stats.padded_batches:
        return None
    return (f"  repeated {stats.padded_batches} batch of the epoch's start to fill its last round "
            "(shard(even='pad')), so every rank takes the same number")


def _skipped_note(stats, d: dict) -> str | None:
    if not stats.skipped:
        return None
    shown = ", ".join(str(i) for i, _ in stats.skipped[:10])
    return f"  skipped {len(stats.skipped)} samples: {shown}{' ...' if len(stats.skipped) > 10 else ''}"


def _restarts_note(stats, d: dict) -> str | None:
    return f"  worker restarts: {stats.worker_restarts}" if stats.worker_restarts else None


def _source_note(stats, d: dict) -> str | None:
    """The source's own counts that are not zero (e.g. a remote store's downloads, retries and failed downloads)."""
    counted = [(name, n) for name, n in sorted(stats.source_counts.items()) if n]
    return "  source: " + ", ".join(f"{name} {n}" for name, n in counted) if counted else None


def _verdict_lines(d: dict) -> list[str]:
    """The verdict, the slowest stage, and the advice, best first."""
    lines = [f"  verdict: {d['verdict']}"]
    if d["bottleneck"]:
        lines.append(f"  slowest stage: {d['bottleneck']}")
    lines.extend(f"  advice {n}: {text}" for n, text in enumerate(d["advice"], 1))
    return lines
