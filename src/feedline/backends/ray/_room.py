"""Room on the Ray cluster for a pipeline's actors, and who holds it when there is none.

Why: an actor Ray cannot place waits for resources without an error; a
second pipeline on a cluster the first one fills (every actor takes a CPU)
would wait for nothing. Before an executor starts its actors,
`wait_for_room` checks that one actor's request is free now, waits a few
seconds for resources that are being released (a pipeline just closed),
then raises `WorkerError` with the numbers: what each actor asks for,
what the cluster has and has free, and what holds it (the open pipelines
of this process, feedline actors of other processes by pid, other Ray
work). More actors than fit is still allowed: the rest start when there
is room.
"""

from __future__ import annotations

import os
import time
import weakref

from ..._errors import WorkerError

__all__ = ["DEFAULT_START_TIMEOUT", "forget", "register", "request_of", "wait_for_room"]

DEFAULT_START_TIMEOUT = 5.0  # seconds: Ray reports a killed actor's CPUs free within about a second; 120 s made a second pipeline look hung
_POLL = 0.2  # seconds between looks at the cluster's free resources
_open: "weakref.WeakSet" = weakref.WeakSet()  # executors of this process holding actors (for the message)


def register(executor) -> None:
    """Count ``executor``'s actors as held by this process until it is garbage collected or `forget` runs."""
    _open.add(executor)


def forget(executor) -> None:
    _open.discard(executor)


def request_of(options: dict) -> dict[str, float]:
    """What one actor asks Ray for: CPU, GPU, memory and custom resources (only those above 0)."""
    wanted = {"CPU": options.get("num_cpus", 1), "GPU": options.get("num_gpus") or 0, "memory": options.get("memory") or 0}
    wanted.update(options.get("resources") or {})
    return {key: float(amount) for key, amount in wanted.items() if amount}


def _short(ray, need: dict) -> dict[str, float]:
    free = ray.available_resources()
    return {key: free.get(key, 0.0) for key, amount in need.items() if free.get(key, 0.0) + 1e-9 < amount}


def wait_for_room(ray, need: dict, timeout: float) -> None:
    """Return once one actor's ``need`` is free on the cluster; raise `WorkerError` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    short = _short(ray, need)
    while short and time.monotonic() < deadline:
        time.sleep(_POLL)
        short = _short(ray, need)
    if not short:
        return
    total = ray.cluster_resources()
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    asks = ", ".join(f"{key}={amount:g}" for key, amount in need.items())
    have = "; ".join(f"{key}: {total.get(key, 0):g} in all, {free:g} free" for key, free in short.items())
    raise WorkerError(
        f"backend='ray' has no room for its actors: each asks for {asks}, and the cluster ({nodes} node"
        f"{'s' if nodes != 1 else ''}) has {have} (waited {timeout:g} s). Held by: {holders(ray)}. "
        "Close the pipelines that hold them (pipe.close(), or `with pipe:`), lower fl.Ray(num_cpus=...) or the "
        "other resources, add nodes, or on an autoscaling cluster wait longer with fl.Ray(start_timeout=seconds)."
    )


def holders(ray) -> str:
    """Who holds the cluster's CPUs, as far as feedline can tell."""
    parts, known = [], 0.0
    mine = [e for e in _open if not e.closing]
    if mine:
        actors = sum(e.live_actors() for e in mine)
        cpus = sum(e.live_actors() * e.request.get("CPU", 0) for e in mine)
        known += cpus
        parts.append(
            f"{actors} actor{'s' if actors != 1 else ''} of {len(mine)} open feedline pipeline"
            f"{'s' if len(mine) != 1 else ''} in this process ({cpus:g} CPUs)"
        )
    others: dict[str, int] = {}
    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"] if isinstance(entry, dict) else entry
        fields = name.split("-")
        if fields[0] == "feedline" and len(fields) == 4 and fields[1] != str(os.getpid()):
            others[fields[1]] = others.get(fields[1], 0) + 1
    if others:
        shown = ", ".join(f"{count} of process {pid}" for pid, count in sorted(others.items()))
        parts.append(f"feedline actors of other processes ({shown})")
    total, free = ray.cluster_resources().get("CPU", 0.0), ray.available_resources().get("CPU", 0.0)
    rest = total - free - known
    if rest > 1e-9:
        parts.append(f"{rest:g} CPUs held by other Ray work (actors, tasks, Ray Train workers{', and the feedline actors above' if others else ''})")
    return "; ".join(parts) or "nothing feedline can see (the resource is missing rather than held)"
