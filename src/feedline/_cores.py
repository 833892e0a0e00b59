"""How many cores this process may use: the CPUs it may run on, capped by a CPU quota, or the count the user set.

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
quota limits its children too; `feedline._cgroups`). Anything
unreadable counts as no quota: other systems have none of these files.

Where neither says what the machine gives this process (a Kubernetes pod
with a CPU request and no limit sees the whole node; a batch scheduler
that shares cores by time), the user says it as they would to Python
3.13 and later: ``PYTHON_CPU_COUNT=6`` or ``python -X cpu_count=6``
(``default``: count as usual). feedline reads both on every Python it
supports, and the count wins over the mask and the quota, as it does
for ``os.process_cpu_count()``.
"""

from __future__ import annotations

import math
import os
import sys

from ._cgroups import cgroup_dirs
from ._errors import FeedlineError

__all__ = ["CPU_COUNT_VAR", "cores_note", "cpu_count_set", "cpu_quota", "usable_cores"]

CPU_COUNT_VAR = "PYTHON_CPU_COUNT"  # Python 3.13's name for it (and ``-X cpu_count``): one setting for Python and feedline


def usable_cores() -> int:
    """Cores this process may use: the count the user set (`cpu_count_set`), else its affinity mask capped by its CPU quota (`cpu_quota`)."""
    chosen = cpu_count_set()
    if chosen is not None:
        return chosen
    return _capped(_visible(), cpu_quota())


def cores_note() -> str:
    """Why not one core per CPU this process sees, for the decision text ("" where nothing changed the count)."""
    visible, chosen = _visible(), cpu_count_set()
    if chosen is not None:
        return f"{_setting_name()}={chosen}; this process sees {visible} CPUs"
    quota = cpu_quota()
    if _capped(visible, quota) >= visible:
        return ""
    return f"a CPU quota of {quota:g} of the {visible} CPUs this process sees"


def cpu_count_set() -> int | None:
    """The CPU count the user set: ``-X cpu_count=N``, else ``PYTHON_CPU_COUNT=N`` (not under ``python -E``); None: not set.

    Raises:
        FeedlineError: the value is not a positive whole number or ``default``
            (Python 3.13 and later refuse to start with such a value; older ones
            do not read it, so feedline says what is wrong).
    """
    value = _setting_value()
    if value is None or value == "default":
        return None
    try:
        count = int(value)
    except ValueError:
        count = 0
    if count < 1:
        raise FeedlineError(f"{_setting_name()}={value!r} is not a number of CPUs: set it to a whole number of 1 or more "
                            f"(the cores feedline and Python may use, e.g. {CPU_COUNT_VAR}=8), or to 'default' to count "
                            "the CPUs this process may run on")
    return count


def _setting_value() -> str | None:
    option = sys._xoptions.get("cpu_count")
    if option is not None:
        return str(option).strip()
    if sys.flags.ignore_environment:
        return None
    value = os.environ.get(CPU_COUNT_VAR)
    return None if value is None or not value.strip() else value.strip()


def _setting_name() -> str:
    return "-X cpu_count" if sys._xoptions.get("cpu_count") is not None else CPU_COUNT_VAR


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
