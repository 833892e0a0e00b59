"""Which feedline a benchmark's fresh interpreters import: this checkout's, or another's for a before-and-after.

``--base OTHER/src`` (the ``src`` folder of another checkout, say a
worktree of an older commit) runs that feedline in the same rounds as this
one, so a change is measured against its parent on the same machine in
one sitting (this machine's speed drifts by up to 1.8x within a run).

Both are compiled first (`compile_sources`), as ``pip install`` writes a
user's bytecode: a checkout installed editable under
``PYTHONDONTWRITEBYTECODE=1`` would otherwise compile feedline's sources
in every fresh interpreter, inside the clock (the engine is imported at the
first ``iter()``: 60-90 ms compiled against 160-300 ms from source, 2 cores).
"""

from __future__ import annotations

import compileall
import os

__all__ = ["ROOT", "compile_sources", "environment"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the checkout holding `benchmarks`


def compile_sources(base: str | None = None) -> None:
    """Write the bytecode of the feedline this interpreter imports, and of ``base``'s."""
    import feedline

    for package in [os.path.dirname(feedline.__file__)] + ([os.path.join(base, "feedline")] if base else []):
        compileall.compile_dir(package, quiet=1)


def environment(env: dict, base: str | None = None) -> dict:
    """``env`` for a fresh interpreter that imports ``base``'s feedline (None: this one's) and this `benchmarks`."""
    if base is None:
        return env
    if not os.path.isfile(os.path.join(base, "feedline", "__init__.py")):
        raise SystemExit(f"--base {base}: no feedline package there (give the src folder of a feedline checkout)")
    return dict(env, PYTHONPATH=os.pathsep.join([os.path.abspath(base), ROOT]))
