"""How many cores this process may use: the CPUs it may run on, capped by a CPU quota.

A container limited to 4 CPUs on a 64-core host (``docker run --cpus 4``,
a Kubernetes CPU limit) still sees 64 CPUs in its affinity mask; the
limit is a quota of CPU time per period, in its cgroup. One worker per
visible CPU there means 64 workers sharing 4 cores' worth of time: each
task looks 16 times slower than its CPU time says, which reads as
waiting on I/O (`feedline.engine._autotune`) or as threads that lose
their cores to the GIL (`feedline.engine._trial`). So the quota counts:
``ceil(quota / period)`` cores, never more than the affinity mask gives.

Read from cgroup v2 (``cpu.max``: ``"max 100000"`` or ``"400000
100000"``) or v1 (``cpu.cfs_quota_us`` and ``cpu.cfs_period_us``, ``-1``
for none), for this process's cgroup and each one above it (a parent's
quota limits its children too; `feedline.engine._cgroups`). Anything
unreadable counts as no quota: other systems have none of these files.
"""

from __future__ import annotations

import math
import os

from ._cgroups import cgroup_dirs

__all__ = ["cpu_quota", "quota_note", "usable_cores"]


def usable_cores() -> int:
    """Cores this process may use: its affinity mask, capped by its CPU quota (`cpu_quota`)."""
    return _capped(_visible(), cpu_quota())


def quota_note() -> str:
    """Why fewer cores than the CPUs this process sees, for the decision text ("" where no quota caps them)."""
    visible, quota = _visible(), cpu_quota()
    if _capped(visible, quota) >= visible:
        return ""
    return f"a CPU quota of {quota:g} of the {visible} CPUs this process sees"


def _capped(visible: int, quota: float | None) -> int:
    if quota is not None:
        visible = min(visible, math.ceil(quota - 1e-9))  # 2.0 CPUs: 2 cores; 2.5: 3 (the half core is still time)
    return max(1, visible)


def _visible() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def cpu_quota(root: str = "/sys/fs/cgroup", own: str = "/proc/self/cgroup") -> float | None:
    """CPUs' worth of time this process's cgroups allow per period (the smallest over them); None: no quota found.

    ``root`` is where the cgroup file systems are mounted and ``own`` the
    file that names this process's cgroups (both arguments for tests).
    """
    quotas = []
    for folder, version in cgroup_dirs(root, own, "cpu"):
        quota = _v2(folder) if version == 2 else _v1(folder)
        if quota is not None:
            quotas.append(quota)
    return min(quotas) if quotas else None


def _v2(folder: str) -> float | None:
    try:
        with open(os.path.join(folder, "cpu.max")) as f:
            quota, period = (f.read().split() + ["100000"])[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError, ZeroDivisionError):
        return None


def _v1(folder: str) -> float | None:
    try:
        with open(os.path.join(folder, "cpu.cfs_quota_us")) as f:
            quota = int(f.read())
        with open(os.path.join(folder, "cpu.cfs_period_us")) as f:
            period = int(f.read())
        return None if quota <= 0 or period <= 0 else quota / period
    except (OSError, ValueError):
        return None
