"""The automatic choice's verdicts, remembered across runs on one machine, so that later runs start on the winner.

A trial (`feedline.engine._trial`) has a price: threads run first while
it judges them, and process workers that win take over only then, warming
up late, so a short epoch falls behind processes set by hand. A training
script runs the same pipeline again and again (every ``python train.py``, restarts,
sweeps), so the verdict of its first run is remembered and later runs start
straight on the winner, as the hand setting would.

- Key: a digest of the work (each step's code, the source's kind and the
  code it runs, the batch size, the worker count) and of the machine (host
  name, usable cores, OS, Python and feedline versions). Change any of them
  and the trial runs again.
- Entry: the winner, both backends' samples/s, the winner's samples/s per
  worker (what the drift check compares against), its worker count as the
  run left it (the worker tuner grows threads that wait on I/O, which takes
  part of the first epoch), when, and how many runs started on it.
- Only a verdict that `Remembering.agree` trials in a row reached (two runs' trials,
  or a trial and the drift check's) is started on: one trial can be wrong (a busy moment, a cold file
  cache), and remembered it would hold 10 runs on the slower backend, since the drift check watches
  the winner only, never the loser. A trial that disagrees replaces it.
- A run that starts on a remembered verdict is watched like any decision:
  a rate that falls under `feedline.engine.choice.WinnerWatch.drift_ratio` of the
  remembered one runs the trial again. After `Remembering.runs` runs the
  trial runs again anyway (data and libraries change under the same code),
  and its verdict is remembered anew.
- One small JSON file, rewritten whole through a temporary file and
  ``os.replace``: concurrent runs (ranks of one job) never see a torn file;
  the last writer wins, and a lost entry costs one trial. An unreadable
  file counts as empty. At most `Remembering.entries`, the most recently used.
- ``FEEDLINE_REMEMBER=0`` turns it off; a path puts the file there;
  default ``$XDG_CACHE_HOME/feedline/choices.json`` (``~/.cache``).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass

from .._fingerprint import digest
from .choice import current_policy

__all__ = ["STARTED_ON_IT", "Remembered", "choices_file", "note_workers", "recall", "record", "work_key"]

WHY_CHARS = 400  # of the trial's decision text, kept for the runs that start on it
REMEMBER_VAR = "FEEDLINE_REMEMBER"
STARTED_ON_IT = "at once, remembered"  # in the decision text of a run that starts on a remembered verdict (`Remembered.describe`)
_OFF = ("0", "off", "false", "no")


@dataclass(frozen=True)
class Remembered:
    """A verdict a trial reached in an earlier run, as recalled for this one."""

    winner: str  # "thread" or "process"
    rates: dict  # samples/s each backend delivered in that trial (may be one: a verdict without a thread phase)
    per_worker: float  # the winner's samples/s per worker then: the drift check's reference
    when: float  # seconds since the epoch, when that trial decided
    why: str  # that trial's decision text
    run: int  # this run is the run-th to start on it (1 .. `Remembering.runs`)
    workers: int | None = None  # the winner's worker count when the run that left it last changed it (None: as asked)

    def describe(self) -> str:
        """The decision text of a run that starts on it."""
        day = time.strftime("%Y-%m-%d %H:%M", time.localtime(self.when))
        count = f" x{self.workers}" if self.workers else ""
        return (f"{'threads' if self.winner == 'thread' else 'processes'}{count} {STARTED_ON_IT}: this pipeline's trial "
                f"on this machine ({day}) found: {self.why} (run {self.run} of {current_policy().remember.runs} on it before the "
                f"trial runs again; {REMEMBER_VAR}=0: always run it)")


def choices_file() -> str | None:
    """Where verdicts are remembered, or None when ``FEEDLINE_REMEMBER`` turns it off."""
    setting = os.environ.get(REMEMBER_VAR, "").strip()
    if setting.lower() in _OFF:
        return None
    if setting and setting.lower() not in ("1", "on", "true", "yes"):
        return os.path.expanduser(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "feedline", "choices.json")


def work_key(plan, workers: int, cores: int) -> str:
    """The digest that names ``plan``'s work on this machine (see the module docstring)."""
    from .. import __version__

    part = plan.part
    work = [part.source.work_identity(), [op.work_identity() for op in part.ops],
            [op.work_identity() for op in part.batch_ops], part.batch_size, workers]
    machine = [platform.node(), cores, sys.platform, sys.version_info[:2], __version__]
    return digest([work, machine])


def recall(key: str) -> Remembered | None:
    """The verdict remembered for ``key`` if this run may start on it (counted as one more run), else None."""
    policy = current_policy()

    def count_run(entry):
        if not _valid(entry) or entry["runs"] >= policy.remember.runs or entry.get("agreed", 0) < policy.remember.agree:
            return None
        entry["runs"] += 1
        entry["used"] = time.time()
        return entry

    entry, trouble = _change(key, count_run)
    if entry is None or trouble is not None:  # a file it cannot count runs in would keep a verdict forever: a trial
        return None
    workers = entry.get("workers")
    return Remembered(entry["winner"], dict(entry["rates"]), float(entry["per_worker"]), float(entry["when"]),
                      str(entry.get("why", "")), entry["runs"], workers if isinstance(workers, int) and workers > 0 else None)


def record(key: str, winner: str, rates: dict, per_worker: float, why: str, workers: int | None = None) -> str | None:
    """Remember a trial's verdict for ``key``; None, or why it could not be written (for the decision text)."""
    if winner not in ("thread", "process") or per_worker <= 0:
        return None

    def replace(before):
        now = time.time()
        agreed = before.get("agreed", 0) + 1 if _valid(before) and before["winner"] == winner else 1
        return {"agreed": agreed, "winner": winner, "rates": {k: float(v) for k, v in rates.items()},
                "per_worker": float(per_worker), "when": now, "used": now, "runs": 0, "why": why[:WHY_CHARS],
                "workers": workers}

    return _change(key, replace)[1]


def note_workers(key: str, winner: str, workers: int) -> str | None:
    """The worker tuner changed the count of ``key``'s winner: later runs start at it. None, or why it was not kept."""
    def set_count(entry):
        if not _valid(entry) or entry["winner"] != winner or entry.get("workers") == workers:
            return None
        entry["workers"] = workers
        return entry

    return _change(key, set_count)[1]


def _change(key: str, edit) -> tuple:
    """``(entry, trouble)``: ``edit(entry or None)`` returns the new entry, or None to leave the file as it is.

    The one read-modify-write of the file: `Remembering.entries` kept (the most
    recently used), written whole; ``trouble`` is why it could not be
    written (None: written, or nothing to write, or remembering is off).
    """
    path = choices_file()
    if path is None:
        return None, None
    entries = _read(path)
    entry = edit(entries.get(key))
    if entry is None:
        return None, None
    entries[key] = entry
    most = current_policy().remember.entries
    if len(entries) > most:
        kept = sorted(entries, key=lambda k: entries[k].get("used", 0) if isinstance(entries[k], dict) else 0)[-most:]
        entries = {k: entries[k] for k in kept}
    return entry, _write(path, entries)


def _valid(entry) -> bool:
    return (isinstance(entry, dict) and entry.get("winner") in ("thread", "process")
            and isinstance(entry.get("rates"), dict) and isinstance(entry.get("runs"), int)
            and isinstance(entry.get("per_worker"), (int, float)) and isinstance(entry.get("when"), (int, float)))


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            entries = json.load(f)
    except (OSError, ValueError):  # missing, unreadable or torn by hand: start afresh (it only costs a trial)
        return {}
    return entries if isinstance(entries, dict) else {}


def _write(path: str, entries: dict) -> str | None:
    try:
        folder = os.path.dirname(path) or "."
        os.makedirs(folder, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=".choices-", suffix=".json", dir=folder)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as f:
                json.dump(entries, f, indent=1, sort_keys=True)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError as e:
        return f"not remembered ({type(e).__name__}: {e}; set {REMEMBER_VAR} to a writable file, or 0)"
    return None
