"""Start-up speculation: what feedline starts before a pipeline needs it, and when (one policy, `StartPolicy`).

What starts early: the process backend's fork server (POSIX,
`backends.process._forkserver`) and, for a map described, the zygote that
imports the installed libraries it uses (`backends.process._preload`).
Both hold no user state and serve every pipeline of this process; a
failure here is left for the real start to report, with context.

When:
- ``map(..., backend="process")``: at once, as the map is described, so
  the server's imports overlap the user's own set-up (building a model).
- The automatic choice (no backend; more than one worker and core) and
  ``from_sequence`` (its ``obj[i]`` is user code, as a map is): at once on
  `StartPolicy.ahead_cores` cores or more, where the imports take one core
  of many; on fewer, `StartPolicy.after_idle` seconds after the
  description, unless a pipeline of this process was built meanwhile or is
  being iterated then (its threads may need every core). Otherwise the
  automatic choice's trial starts the server once its threads show they
  need processes (`feedline.engine._trial`, through `backends.warm_up`).
- A pipeline about to run with user code on processes: before its part is
  pickled (`before_run`).
- The automatic choice's held process workers (`backends.make_executor`
  with ``held``, at the trial's first sign of the GIL): their pickling,
  which copies the source's large arrays into shared memory, and their
  forks run in a thread of their own, off the consumer's path to its
  first batch; the consumer's own check that the pipeline can be sent is
  a dry run that copies no large array (`backends.check_sendable`).
- Never in a process worker or Ray actor (a user module that builds a
  pipeline at import runs there too), nor where workers start as fresh
  interpreters (`feedline._forking`): nothing to start ahead there.

Callers: `Pipeline.map` and `from_sequence` (`described`), `engine.Runtime`
(`runtime_built`, `before_run`). The engine registers each runtime it
builds, so this module imports nothing of the engine, and imports the
backends only when it starts something: describing a pipeline imports
neither.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Callable

from ._cores import usable_cores
from ._forking import use_forkserver

__all__ = ["Speculation", "StartPolicy", "before_run", "described", "runtime_built", "speculation"]


@dataclass(frozen=True)
class StartPolicy:
    """When the automatic choice's fork server starts ahead of its run."""

    ahead_cores: int = 8  # on this many cores or more the server's imports take one core of many: start at the description
    after_idle: float = 0.25  # on fewer, this long after the description (a script's set-up), if no pipeline runs by then


class Speculation:
    """The start-ahead state of this process: the pending start after set-up, the runtimes that may hold it back.

    Args:
        policy: the thresholds.
        cores: the cores this process may use (``feedline._cores.usable_cores``).
    """

    def __init__(self, policy: StartPolicy = StartPolicy(), cores: Callable[[], int] = usable_cores):
        self.policy, self.cores = policy, cores
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._built = 0  # runtimes built so far: one built after the start was scheduled cancels it
        self._described: list[tuple] = []  # the maps described since the start was scheduled: their zygotes start with it
        self._runtimes: weakref.WeakSet = weakref.WeakSet()  # registered by the engine; each says whether it is iterated

    def described(self, backend: str | None, workers: int | None = None, steps: tuple = ()) -> None:
        """A map (``steps``: its source and steps) or a ``from_sequence`` was described: start what its run will need.

        ``backend`` and ``workers`` as given to ``map`` (None: unset).
        """
        if not use_forkserver():
            return  # workers start as fresh interpreters: nothing to start ahead
        if backend is None and (workers is None or workers > 1) and self.cores() > 1:
            if self.cores() < self.policy.ahead_cores:
                self._schedule(steps)
                return
            backend = "process"
        if backend == "process":
            _warm_up(steps)

    def runtime_built(self, runtime) -> None:
        """A pipeline is about to iterate: a pending start is cancelled; ``runtime.iterating(window)`` may hold back later ones."""
        with self._lock:
            self._built += 1
            timer, self._timer = self._timer, None
            self._described = []
            self._runtimes.add(runtime)
        if timer is not None:
            timer.cancel()

    def _schedule(self, steps: tuple) -> None:
        with self._lock:
            if steps:
                self._described.append(steps)
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.policy.after_idle, self._start_after_set_up, args=(self._built,))
            self._timer.name = "feedline-forkserver-ahead"  # process-wide, as the fork server itself is
            self._timer.daemon = True
            timer = self._timer
        timer.start()

    def _start_after_set_up(self, built: int) -> None:
        """The timer's end: start the server (and each described map's zygote) unless a pipeline was built or iterates."""
        with self._lock:
            self._timer = None
            described, self._described = self._described, []
            if self._built != built:
                return
            runtimes = list(self._runtimes)
        try:
            busy = any(runtime.iterating(self.policy.after_idle) for runtime in runtimes)
        except Exception:  # a runtime changing under this read (another thread): take it as busy, start nothing
            busy = True
        if not busy:  # (a busy pipeline's threads may be the ones that need the cores)
            for steps in described or [()]:
                _warm_up(steps)


def _warm_up(steps: tuple) -> None:
    """Start the fork server and, for ``steps``, its zygote (`backends.warm_up`); never in a worker; failures left for the run."""
    from .backends import in_worker, warm_up  # here: describing a pipeline imports no backend

    if in_worker():
        return  # a user module that builds a pipeline at import must not start a server per worker
    try:
        warm_up("process", steps)
    except Exception:  # noqa: S110 - a head start only: the executor's own start reports what is wrong
        pass


speculation = Speculation()  # this process's; a test may put one with another policy in its place


def described(backend: str | None, workers: int | None = None, steps: tuple = ()) -> None:
    """See `Speculation.described` (for this process's `speculation`)."""
    speculation.described(backend, workers, steps)


def runtime_built(runtime) -> None:
    """See `Speculation.runtime_built` (for this process's `speculation`)."""
    speculation.runtime_built(runtime)


def before_run(plan) -> None:
    """A pipeline is about to run: a process backend's server starts now, while its part is pickled."""
    if plan.runs_user_code and not plan.part.source.needs_ray and plan.backend == "process":
        _warm_up(())
