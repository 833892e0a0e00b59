"""How many more process workers fit in memory: the memory left to this process's container, over what a worker holds.

The worker tuner grows workers that wait on I/O up to 8 per core (128 on
16 cores). Threads cost a stack; a process worker costs its own heap and
whatever the user's function imported (torch alone: a few hundred MB).
In a container limited to 8 GB, 128 such workers are killed by the OOM
killer, all of them, with the training job. So a growth of process
workers is capped at what half the available memory holds, at the private
memory the running workers hold each (resident minus shared pages: the
fork server's imports are shared until written).

Available memory is the smaller of the machine's (``MemAvailable`` in
/proc/meminfo) and the cgroup's limit minus its usage (v2 ``memory.max``
and ``memory.current``; v1 ``memory.limit_in_bytes`` and
``memory.usage_in_bytes``), for this process's cgroup and those above it
(`feedline._cgroups`). The cgroup's usage counts page cache the
kernel could reclaim, so the cap errs towards fewer workers. Unknown
(other systems, unreadable files): no cap.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

from .._cgroups import cgroup_dirs
from .._in_force import InForce

__all__ = ["FREE_SHARE", "MemoryReaders", "available_memory", "memory_readers", "private_bytes"]

FREE_SHARE = 0.5  # of the available memory, new process workers may take at most this share (batches, the consumer, the rest)
_NO_LIMIT = 1 << 60  # cgroup v1 writes ~2**63 for "no limit"


def available_memory(root: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup",
                     meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes this process could still allocate: the machine's available memory, capped by its cgroups' room (None: unknown)."""
    found = []
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    for folder, version in cgroup_dirs(root, own, "memory"):
        names = ("memory.max", "memory.current") if version == 2 else ("memory.limit_in_bytes", "memory.usage_in_bytes")
        limit, usage = (_read_int(os.path.join(folder, name)) for name in names)
        if limit is not None and usage is not None and limit < _NO_LIMIT:
            found.append(max(0, limit - usage))
    return min(found) if found else None


def private_bytes(pids: list[int]) -> int | None:
    """The median private memory of these processes (resident minus shared pages; None: unknown)."""
    sizes = []
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                fields = f.read().split()
            sizes.append((int(fields[1]) - int(fields[2])) * page)
        except (OSError, ValueError, IndexError):
            continue
    return sorted(sizes)[len(sizes) // 2] if sizes else None


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    if text == "max":
        return _NO_LIMIT
    try:
        return int(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class MemoryReaders:
    """How the runtime reads memory when it grows process workers: each worker's own bytes, and the room left."""

    private_bytes: Callable[[list[int]], int | None] = private_bytes
    available: Callable[[], int | None] = available_memory


memory_readers: InForce[MemoryReaders] = InForce(MemoryReaders())  # a test hands others in (`feedline.testing.memory_seen`)
