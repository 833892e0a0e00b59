"""Backend settings given to ``map(backend=...)``: a name, or `Ray` for Ray's options.

Validated here, once, when the step is made, so a mistake is reported on
the line that wrote it; the Ray executor only reads the result.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

__all__ = ["BACKENDS", "Ray"]

BACKENDS = ("serial", "thread", "process", "ray")


@dataclass(frozen=True)
class Ray:
    """``map(fn, backend=fl.Ray(...))``: run the per-sample work in Ray actors, with these settings.

    Args:
        address: the cluster to connect to (``"auto"``, ``"head-node:6379"``)
            when ``ray.init()`` was not called; unset, a local Ray instance is
            started (see docs/scaling.md).
        num_cpus, num_gpus, memory, resources, runtime_env, scheduling_strategy, accelerator_type: resources and placement of
            each actor, passed to Ray's ``.options()`` (``num_cpus`` defaults
            to 1: one actor runs one task at a time). feedline sets the rest
            (one call at a time, no restarts by Ray: it redoes lost work
            itself, exactly once).
        max_bytes_in_flight: the most bytes of batches the pipeline keeps in
            Ray's object store at once (finished, fetched but not yet used,
            or being made), besides the prefetch depth's count; default a
            quarter of the object store of the training process's node, so
            a slow trainer never makes Ray spill batches to disk. At least
            one task always runs, so a batch larger than this still passes.
        start_timeout: seconds to wait for room for the first actor when
            the cluster has no free CPUs (or other resources) for one;
            default 5, then `fl.WorkerError` says what is free and what holds
            it. Raise it on an autoscaling cluster, where nodes join on demand.

    >>> import feedline as fl
    >>> fl.Ray(num_cpus=2).actor_options()
    {'num_cpus': 2}
    """

    address: str | None = None
    num_cpus: float | None = None
    num_gpus: float | None = None
    memory: int | None = None
    resources: dict | None = None
    runtime_env: dict | None = None
    scheduling_strategy: object = None
    accelerator_type: str | None = None
    max_bytes_in_flight: int | None = None
    start_timeout: float | None = None

    OPTIONS = ("accelerator_type", "memory", "num_cpus", "num_gpus", "resources", "runtime_env", "scheduling_strategy")

    def __post_init__(self):
        _check_address(self.address)
        for key in ("num_cpus", "num_gpus"):
            _check_amount(key, getattr(self, key))
        _check_bytes("memory", self.memory, "bytes of memory reserved per actor")
        _check_bytes("max_bytes_in_flight", self.max_bytes_in_flight, "bytes of batches in Ray's object store")
        _check_start_timeout(self.start_timeout)
        if self.resources is not None and not isinstance(self.resources, dict):
            raise TypeError("fl.Ray(resources=...) must be a dict of custom resource name -> amount")

    @classmethod
    def from_options(cls, address: str | None, options: dict | None) -> "Ray":
        """Settings from the older spelling ``map(ray_address=..., ray_options={...})``."""
        if options is not None and not isinstance(options, dict):
            raise TypeError(f"map(ray_options=...) must be a dict such as {{'num_cpus': 1}}, got {type(options).__name__}")
        unknown = sorted(set(options or {}) - set(cls.OPTIONS))
        if unknown:
            raise ValueError(f"map(ray_options=...): unknown option(s) {unknown}; feedline passes only {list(cls.OPTIONS)} to its Ray actors")
        return cls(address=address, **(options or {}))

    def actor_options(self) -> dict:
        """The options given for each actor (those left unset are left out)."""
        return {key: getattr(self, key) for key in self.OPTIONS if getattr(self, key) is not None}

    def describe(self) -> str:
        shown = [f"address={self.address!r}"] if self.address is not None else []
        shown += [f"{k}={v!r}" for k, v in self.actor_options().items()]
        shown += [f"{k}={getattr(self, k)!r}" for k in ("max_bytes_in_flight", "start_timeout") if getattr(self, k) is not None]
        return f"Ray({', '.join(shown)})"


def _not_a(value, kind) -> bool:
    """Whether ``value`` is not a number of ``kind`` (a bool never counts as one)."""
    return isinstance(value, bool) or not isinstance(value, kind)


def _check_address(address) -> None:
    if address is not None and not isinstance(address, str):
        raise TypeError(f"fl.Ray(address=...) must be a string such as 'auto' or 'head-node:6379', got {address!r}")


def _check_amount(key: str, value) -> None:
    """``num_cpus`` / ``num_gpus``: an amount of a resource per actor, a number >= 0."""
    if value is not None and (_not_a(value, numbers.Real) or value < 0):
        raise ValueError(f"fl.Ray({key}={value!r}): must be a number >= 0")


def _check_bytes(key: str, value, what: str) -> None:
    """A count of bytes (``memory``, ``max_bytes_in_flight``): an integer >= 1."""
    if value is not None and (_not_a(value, numbers.Integral) or value < 1):
        raise ValueError(f"fl.Ray({key}={value!r}): {what}, an integer >= 1")


def _check_start_timeout(value) -> None:
    """Seconds, a number >= 0 (NaN is refused too: it is not >= 0)."""
    if value is not None and (_not_a(value, numbers.Real) or not value >= 0):
        raise ValueError(f"fl.Ray(start_timeout={value!r}): seconds to wait for room on the cluster, a number >= 0")
