"""Where this process's cgroup settings are: the folders of its cgroups, for `_cores` (CPU quota) and `_memory` (limit).

A container's limits live in its cgroup, named in ``/proc/self/cgroup``
(``0::/path`` for cgroup v2; ``N:cpu,cpuacct:/path`` for each v1
hierarchy), under the cgroup mount: ``/sys/fs/cgroup`` (v2, or
``/sys/fs/cgroup/unified`` beside v1) or ``/sys/fs/cgroup/<controllers>``
(v1). A parent's limit binds its children, so every folder up to the
mount counts; and a container with a cgroup namespace sees its own cgroup
at the mount's root while ``/proc/self/cgroup`` may name a host path, so
the root is always among them.
"""

from __future__ import annotations

import os

__all__ = ["cgroup_dirs"]


def cgroup_dirs(root: str, own: str, controller: str) -> list[tuple[str, int]]:
    """``(folder, cgroup version)`` of every place this process's ``controller`` settings may be, its own cgroup's first.

    Each cgroup named in ``own`` and every one above it, under each place
    its hierarchy may be mounted (v2: ``root`` or ``root/unified``; v1:
    ``root/<controllers>`` or ``root/<controller>``); empty if ``own``
    cannot be read.
    """
    try:
        with open(own) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2: one hierarchy, mounted at root (or root/unified next to v1)
            found += [(folder, 2) for mount in (root, os.path.join(root, "unified")) for folder in _dirs(mount, path)]
        elif controller in controllers.split(","):
            mounts = dict.fromkeys((os.path.join(root, controllers), os.path.join(root, controller)))
            found += [(folder, 1) for mount in mounts for folder in _dirs(mount, path)]
    return found


def _dirs(mount: str, path: str) -> list[str]:
    """The cgroup's folder under ``mount`` and every folder above it up to ``mount`` itself."""
    parts = [p for p in path.strip("/").split("/") if p]
    return [os.path.join(mount, *parts[:k]) for k in range(len(parts), -1, -1)]
