"""`Progress`: the one-line progress display of ``feedline bench`` and ``feedline demo``."""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """A one-line progress display on stderr (no dependency); silent when not a terminal."""

    def __init__(self, total: int | None, label: str):
        self.total, self.label = total, label
        self.live = sys.stderr.isatty()
        self.last = 0.0
        self.start = time.perf_counter()

    def update(self, done: int, samples: int) -> None:
        now = time.perf_counter()
        if not self.live or now - self.last < 0.1:
            return
        self.last = now
        rate = samples / max(now - self.start, 1e-9)
        of = f"/{self.total}" if self.total else ""
        eta = ""
        if self.total and done:
            eta = f", {((now - self.start) / done) * (self.total - done):.0f} s left"
        sys.stderr.write(f"\r{self.label}: {done}{of} batches, {rate:,.0f} samples/s{eta}   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.live:
            sys.stderr.write("\r" + " " * 78 + "\r")
            sys.stderr.flush()
