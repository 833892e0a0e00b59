"""The doors through which a test puts a policy in force for the duration of a ``with`` block (`feedline.testing` re-exports them).

Each replaces the thresholds one part of feedline decides by, instead of a
test changing a module's constant: the backend choice (`choice_policy`),
start-up speculation (`start_speculation`), and the mechanisms' break-even
sizes (`mechanism_policy`); and what the runtime reads of memory when it grows process workers (`memory_seen`).
"""

from __future__ import annotations

import contextlib
import dataclasses

__all__ = ["choice_policy", "mechanism_policy", "memory_seen", "start_speculation"]


def choice_policy(policy):
    """Context manager: automatic choices (``map(fn)`` with no ``backend=``) started inside it decide under ``policy``.

    ``policy`` is a `feedline.engine.choice.Policy`; vary one threshold with
    ``dataclasses.replace(DEFAULT_POLICY, early_span=0.05)`` or, in one of
    its parts, ``Policy(watch=WinnerWatch(retrial_after=0.0))``. The trial
    takes the policy when the pipeline starts iterating, so start it inside
    the block.

    >>> import dataclasses
    >>> from feedline.engine.choice import DEFAULT_POLICY
    >>> with choice_policy(dataclasses.replace(DEFAULT_POLICY, early_span=0.05)):
    ...     pass
    """
    from .engine.choice import using_policy

    return using_policy(policy)


@contextlib.contextmanager
def start_speculation(cores: int, **changes):
    """Context manager: describing and building pipelines inside it meets a fresh start-up speculation; yields it.

    The speculation decides what a description starts ahead of its run (the
    fork server, a map's zygote) and when. The fresh one has nothing
    scheduled or registered, sees ``cores`` usable cores, and takes the
    start-up policy's defaults with ``changes`` (``ahead_cores``: from this
    many cores the start comes at the description; ``after_idle``: seconds
    after a description on fewer cores). Its ``described(backend, workers)``
    and ``runtime_built(runtime)`` are what describing a map and building
    a pipeline call. The process's own speculation is back after the block.

    >>> with start_speculation(cores=4, after_idle=3600.0) as speculation:
    ...     speculation.policy.after_idle
    3600.0
    """
    from . import _startup

    fresh = _startup.Speculation(dataclasses.replace(_startup.StartPolicy(), **changes), cores=lambda: cores)
    before, _startup.speculation = _startup.speculation, fresh
    try:
        yield fresh
    finally:
        _startup.speculation = before


def mechanism_policy(**changes):
    """Context manager: the mechanisms that decide inside it use the default thresholds with ``changes``.

    The thresholds, each a field of the one frozen policy they live in:
    ``tail_piece_seconds`` (an epoch's last batches are cut into pieces of at
    least this much work), ``reuse_arrays_from`` (bytes from which thread and
    serial workers use batch arrays again), ``gather_row_by_row`` (bytes above
    which a store gather copies rows one by one), ``read_ahead_idle_stop``
    (seconds without a read that end a remote read-ahead). Each is read where
    its mechanism decides (a task cut, an executor started, a gather, a
    read-ahead started) in this process: thread and serial workers see it,
    process workers keep the defaults. An unknown name is a ``TypeError``, a
    negative value a ``ValueError``.

    >>> with mechanism_policy(tail_piece_seconds=0.001):
    ...     pass
    """
    from ._mechanism_policy import current_mechanisms, mechanisms_in_force

    return mechanisms_in_force.using(dataclasses.replace(current_mechanisms(), **changes))


def memory_seen(worker_bytes: int | None, available: int | None):
    """Context manager: pipelines growing process workers inside it see this memory instead of reading it.

    ``worker_bytes``: what each process worker holds of its own (None: not
    known); ``available``: the bytes the machine and the cgroup still have
    free (None: not known). A pipeline grows its workers only as far as half
    the available memory holds more workers of that size.

    >>> with memory_seen(worker_bytes=100 << 20, available=400 << 20):
    ...     pass
    """
    from .engine._memory import MemoryReaders, memory_readers

    return memory_readers.using(MemoryReaders(private_bytes=lambda pids: worker_bytes, available=lambda: available))
