"""A map function that logs each sample it begins to a file, and an epoch left half-way in each way a user leaves one.

Workers in other processes append to the same file (one ``os.write`` of a
short line with ``O_APPEND``: lines never interleave), so a test counts the
samples the workers really ran, on any backend.
"""

from __future__ import annotations

import functools
import os
import time

import numpy as np

import feedline as fl

LEAVE = ("break", "close", "del", "superseded")  # how an epoch is left after a few batches


def logged_slow(sample, path: str, seconds: float):
    """Log that ``sample`` began, then take ``seconds`` (GIL released): one sample's work."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{int(sample)}\n".encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    return np.int64(sample)


def samples_begun(path) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def logged_pipeline(path, backend: str, *, n: int, batch: int, workers: int = 2, seconds: float = 0.02):
    fn = functools.partial(logged_slow, path=str(path), seconds=seconds)
    return fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=3).map(fn, backend=backend, workers=workers).batch(batch)


def leave_after(pipe, batches: int, how: str, before_leaving=lambda: None):
    """Take ``batches`` batches of a new epoch of ``pipe``, then leave it ``how``; returns the next epoch's iterator.

    ``superseded`` leaves it by starting the next epoch while the old
    iterator is still referenced; the others leave it first (a ``for`` loop's
    ``break``, ``it.close()``, or the last reference dropped) and then start
    the next epoch with ``iter(pipe)``. ``before_leaving()`` runs between the
    last batch taken and leaving.
    """
    if how == "break":
        for taken, _ in enumerate(pipe, 1):
            if taken == batches:
                before_leaving()
                break
        return iter(pipe)
    it = iter(pipe)
    for _ in range(batches):
        next(it)
    before_leaving()
    if how == "close":
        it.close()
    elif how == "del":
        del it
    elif how == "superseded":
        following = iter(pipe)
        leave_after.kept = it  # still referenced: only the new epoch makes it stale
        return following
    return iter(pipe)
