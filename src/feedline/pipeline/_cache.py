"""``pipe.cache(path)``: the first pass writes a store, later epochs and runs read it.

Protocol:
- `CacheSource` stands in for the store in the pipeline after ``.cache()``.
  Nothing is written when the pipeline is built; `CacheSource.prepare` runs
  when the pipeline is first iterated (or resumed), before any worker of the
  downstream pipeline starts.
- ``prepare`` opens ``path`` if it holds a complete store whose fingerprint
  (a digest of the source's data and every step's code before ``.cache()``)
  matches. Otherwise it runs the upstream pipeline once, in index order, on
  its own workers (closed afterwards), and writes its samples through
  `feedline.store.StoreWriter`, which writes to a temporary directory and
  renames it into place only when complete. A crash or Ctrl-C during the
  write leaves no store at ``path``; the next run writes it again.
- A store at ``path`` from a different pipeline is rebuilt, with a warning
  (``on_change="rebuild"``), or refused (``"raise"``), or used anyway
  (``"reuse"``, for when you know the change does not matter).
- Workers receive the opened store source itself (see ``__reduce__``): they
  memory-map the files; nothing else travels.
- Two processes caching the same pipeline to the same path (data-parallel
  ranks) may both write; whichever finishes second finds a complete store
  with the same fingerprint and uses it.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from .._errors import FeedlineError
from .._fingerprint import digest
from ..sources._base import Source

__all__ = ["ON_CHANGE", "CacheSource"]

ON_CHANGE = ("rebuild", "raise", "reuse")
_ROWS_PER_WRITE = 256  # samples handed to the writer at once: amortises Arrow's per-call cost
_SAMPLED_FILES = 256  # files whose size enters the fingerprint of a from_files source


class CacheSource(Source):
    """The samples of ``upstream``, read from the store at ``path`` (written on first use)."""

    prepared_when_pickled = True  # `__reduce__` sends the opened store: the store is written first

    def __init__(self, upstream, path, encodings=None, on_change: str = "rebuild", variable_shape=()):
        if on_change not in ON_CHANGE:
            raise ValueError(f"cache(on_change={on_change!r}): use one of {', '.join(ON_CHANGE)}")
        self.upstream = upstream
        self.path = os.path.abspath(os.fspath(path))
        self.encodings = dict(encodings or {})
        self.variable_shape = tuple(variable_shape)
        self.on_change = on_change
        self.streaming = False
        self._store = None  # the opened store's Source, once prepared
        self._fingerprint = None

    # ----------------------------------------------------------- preparing
    def fingerprint(self) -> str:
        """Digest of the upstream pipeline: its source's data and its steps' code."""
        if self._fingerprint is None:
            source = self.upstream.source
            steps = [step.cache_identity() for step in self.upstream.steps]
            parts = [source, steps, _file_sizes(source)]
            if isinstance(source, CacheSource):
                parts[0] = source.fingerprint()
            self._fingerprint = digest(parts)
        return self._fingerprint

    def prepare(self) -> None:
        """Open the store, writing it first if it is missing or stale."""
        if self._store is not None:
            return
        self.upstream.source.prepare()  # a cache of a cache: the inner one first
        existing = self._open_existing()
        if existing is None:
            self._write()
            existing = self._open_existing()
            if existing is None:  # pragma: no cover - the writer committed, so this is a bug
                raise FeedlineError(f"cache(): wrote {self.path} but cannot open it")
        self._store = existing

    def _open_existing(self):
        from ..store._open import open_store  # lazily: the store needs pyarrow, an optional library

        if not os.path.exists(os.path.join(self.path, "manifest.json")):
            return None
        opened = open_store(self.path)
        found = (opened.manifest.get("meta") or {}).get("fingerprint")
        if found == self.fingerprint():
            return opened
        message = (
            f"cache({self.path!r}): the store there was written by a different pipeline "
            f"(fingerprint {found} != {self.fingerprint()}): the source's data or the code of a "
            "step before .cache() changed"
        )
        if self.on_change == "reuse":
            warnings.warn(message + "; reusing it because on_change='reuse'", stacklevel=4)
            return opened
        if self.on_change == "raise":
            raise FeedlineError(message + ". Delete the directory, pass on_change='rebuild', or 'reuse' to keep it.")
        warnings.warn(message + "; rebuilding it (on_change='rebuild')", stacklevel=4)
        return None

    def _write(self) -> None:
        from ..store._errors import StoreError  # lazily: pyarrow is optional
        from ..store._writer import StoreWriter

        upstream = self.upstream
        if any(step.cache_identity()[0] == "map" and step.rng for step in upstream.steps):
            warnings.warn(
                f"cache({self.path!r}): a map() before .cache() takes an rng; its random draw is "
                "frozen into the cache and every epoch sees the same one. Put random augmentation after .cache().",
                stacklevel=5,
            )
        start = time.perf_counter()
        meta = {
            "made_by": "feedline Pipeline.cache",
            "fingerprint": self.fingerprint(),
            "pipeline": repr(upstream),
        }
        rows: list = []
        writer = StoreWriter(self.path, encodings=self.encodings or None, meta=meta, overwrite=True, variable_shape=self.variable_shape)
        try:
            with writer:
                for sample in upstream.epoch(0):
                    rows.append(sample)
                    if len(rows) >= _ROWS_PER_WRITE:
                        writer.write_rows(rows)
                        rows = []
                if rows:
                    writer.write_rows(rows)
        except StoreError as e:
            if "variable_shape" not in str(e):
                raise
            raise StoreError(f"{e} (with .cache(): .cache(path, variable_shape=[name]))") from e
        finally:
            upstream.close()
        self.write_seconds = time.perf_counter() - start

    # ------------------------------------------------------------- reading
    def _opened(self):
        if self._store is None:
            self.prepare()
        return self._store

    def __len__(self) -> int:
        return len(self._opened())

    def read(self, index: int):
        return self._opened().read(index)

    @property
    def gather(self):
        return self._store.gather if self._store is not None else None

    def where(self, index: int) -> str:
        return f"row {index} of the cache {self.path}"

    def describe(self) -> str:
        state = "ready" if self._store is not None else "written on first use"
        return f"cache({self.path!r}, {state}) of:\n    " + repr(self.upstream).replace("\n", "\n    ")

    def __reduce__(self):
        # Workers get the store source itself: it memory-maps the files; the
        # upstream pipeline (and its functions) never travel.
        return _opened_store, (self._opened(),)


def _opened_store(store):
    return store


def _file_sizes(source) -> list:
    """Sizes of up to 256 evenly spread files of a `from_files` source (detects replaced files)."""
    if source.file_of(0 if len(source) else -1) is None:
        return []
    picks = np.unique(np.linspace(0, len(source) - 1, min(_SAMPLED_FILES, len(source))).astype(np.int64))
    sizes = []
    for i in picks:
        try:
            sizes.append(os.stat(source.file_of(int(i))).st_size)
        except OSError:
            sizes.append(-1)
    return sizes
