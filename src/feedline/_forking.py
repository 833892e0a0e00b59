"""Whether process workers fork from the fork server here (POSIX) or start as fresh interpreters.

Apart from the process backend so that the start-up policy (`feedline._startup`)
can ask it while a pipeline is described, without importing a backend.
"""

from __future__ import annotations

import os

__all__ = ["use_forkserver"]


def use_forkserver() -> bool:
    """Fork workers from the fork server (POSIX), unless ``FEEDLINE_FORKSERVER=0`` asks for fresh interpreters.

    Fresh interpreters are what Windows always gets; the variable lets the
    tests (and a user chasing a problem) run that path on Linux and macOS.
    """
    return hasattr(os, "fork") and os.environ.get("FEEDLINE_FORKSERVER", "1") != "0"
