"""A store on object storage or HTTP: `RemoteStore`, read through a local cache with read-ahead.

`RemoteStore` is a `Store` whose files are fetched on first use into a
`ShardCache` on local disk (bounded, LRU, shared by every worker and every
process on the machine) and then memory-mapped like a local store's. In the
consumer, `prepare()` starts a `ReadAhead` over the files in the order of
the epoch (`read_ahead(indices)` with the epoch's index list; file order
until it is told one). It pickles as its URL, options, cache settings and
manifest; a worker reopens the filesystem itself. Details: docs/store.md,
"Remote stores".
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import re
import time

import numpy as np

from ._errors import StoreError
from ._format import MANIFEST, check_manifest
from ._reader import Store
from ._remote_ahead import ReadAhead
from ._remote_cache import PREFETCHED, ShardCache, default_cache_dir, parse_size
from ._remote_fs import RETRIES, Location

__all__ = ["RemoteStore"]

DEFAULT_CACHE_LIMIT = "50GiB"  # fits the local disk of a typical training machine; set cache_limit= to change
CONCURRENCY = 8  # requests in flight per consumer: hides each request's latency at object-store speeds
FAILED_FOR = 10.0  # seconds a file that failed every attempt fails at once here: its other samples skip fast
# The cache's counters that reach `Stats.source_counts` (`pipe.stats()`), under these names.
_COUNTER_NAMES = {"downloads": "remote downloads", "bytes": "remote bytes downloaded",
                  "retries": "remote download retries", "failures": "remote downloads failed"}
MAX_OPEN_FILES = 1024  # files a process keeps mapped (within cache_limit bytes); older ones are dropped so evicted files free their disk


class RemoteStore(Store):
    """A store at an ``s3://``, ``gs://``, ``az://``, ``http(s)://`` (any fsspec) URL.

    Args:
        url: the store's URL (the directory holding ``manifest.json``).
        storage_options: passed to the fsspec filesystem (credentials,
            ``endpoint_url``, ``client_kwargs``...). They travel to workers
            with the pipeline; credentials from the environment do not.
        cache_dir: the local cache (default `default_cache_dir`).
        cache_limit: bytes (or ``"20GiB"``) the cache may take, all stores in it together.
        concurrency: downloads in flight at most (read-ahead).
        retries: attempts after the first for each download.
        verify: check record batches against the store's checksums.
        read_ahead: fetch the epoch's files ahead of the reads (in the consumer).
    """

    def __init__(self, url: str, *, storage_options: dict | None = None, cache_dir=None, cache_limit=None,
                 concurrency: int = CONCURRENCY, retries: int = RETRIES, verify: bool = False,
                 read_ahead: bool = True, manifest: dict | None = None):
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1 (downloads in flight), got {concurrency!r}")
        self.location = Location(url, storage_options, retries)
        limit = parse_size(DEFAULT_CACHE_LIMIT if cache_limit is None else cache_limit)
        self.cache = ShardCache(os.fspath(cache_dir) if cache_dir is not None else default_cache_dir(), limit)
        self.concurrency = concurrency
        self.read_ahead_enabled = bool(read_ahead)
        # Store's own set-up (fields, file index, caches, the pyarrow check), with the manifest read over the
        # network. Store takes its argument for a local directory, so `path` is set to the URL after it, and the
        # checksum check that names `path` in its messages runs after that.
        super().__init__(self.location.public_url, manifest if manifest is not None else self._read_manifest(),
                         check_files=False)
        self.path = self.location.public_url
        self.verify = bool(verify)
        if self.verify:
            self._check_verifiable()

    def _read_manifest(self) -> dict:
        where = f"{self.location.public_url}/{MANIFEST}"
        try:
            raw = self.location.read_bytes(MANIFEST, on_retry=self.cache.note_retry)
        except StoreError as e:
            raise StoreError(f"no feedline store at {self.location.public_url}: {e}") from None
        try:
            manifest = json.loads(raw)
        except ValueError as e:
            raise StoreError(f"cannot read {where!r}: {e}; the store is damaged, write it again") from e
        check_manifest(manifest, where)
        return manifest

    def _setup(self) -> None:
        super()._setup()
        url = self.location.public_url
        canonical = json.dumps(self.manifest, sort_keys=True).encode() + b"\0" + url.encode()
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", url.rsplit("/", 1)[-1])[:40] or "store"
        self._key = f"{slug}-{hashlib.sha256(canonical).hexdigest()[:16]}"  # a rewritten store gets a new folder
        self._open = collections.OrderedDict()  # (part, group) -> bytes, mapped in this process, oldest first
        self._open_bytes = 0
        self._ahead = None
        self._failed: dict = {}  # (part, group) -> (when, message) of a download that failed every attempt
        sizes = [int(e["bytes"]) for part in self.manifest["files"] for e in part["files"].values()]
        largest = max(sizes, default=1) or 1
        # Unread prefetched files at most: 2 per request in flight, within half the cache.
        self._ahead_files = max(1, min(2 * self.concurrency, self.cache.limit // (2 * largest)))

    # ------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        return {"location": self.location, "cache": self.cache, "manifest": self.manifest, "verify": self.verify,
                "concurrency": self.concurrency, "read_ahead": self.read_ahead_enabled}

    def __setstate__(self, state: dict) -> None:
        self.location, self.cache, self.manifest = state["location"], state["cache"], state["manifest"]
        self.verify, self.concurrency = state["verify"], state["concurrency"]
        self.read_ahead_enabled = state["read_ahead"]
        self.path = self.location.public_url
        self._setup()

    # ------------------------------------------------------------ files
    def _file(self, part: int, group: str) -> tuple[str, int]:
        entry = self.manifest["files"][part]["files"][group]
        return f"{self.path}/{entry['name']}", int(entry["bytes"])

    def check_files(self) -> None:
        """Nothing to check before reading: each file's size is checked when it is downloaded."""

    def _fetch(self, part: int, group: str, *, prefetch: bool = False) -> str:
        entry = self.manifest["files"][part]["files"][group]
        name, size = entry["name"], int(entry["bytes"])
        failed = self._failed.get((part, group))
        if not prefetch and failed is not None and time.monotonic() - failed[0] < FAILED_FOR:
            raise StoreError(failed[1])

        def download(tmp: str) -> None:
            self.location.download(name, tmp, size, on_retry=self.cache.note_retry)

        try:
            return self.cache.get(f"{self._key}/{name}", size, download, prefetch=prefetch)
        except StoreError as e:
            if not prefetch:  # a prefetch that failed is retried by the reader
                self._failed[(part, group)] = (time.monotonic(), str(e))
            raise

    def _local_file(self, part: int, group: str) -> str:
        return self._fetch(part, group)

    def _group_columns(self, chunk: int, group: str) -> list:
        part = self._where[chunk][0]
        if (chunk, group) not in self._columns and (part, group) not in self._readers:
            self._fetch(part, group)  # outside the store's lock: other threads keep reading while this one waits
        return super()._group_columns(chunk, group)

    def _reader(self, part: int, group: str):
        key = (part, group)
        if key in self._readers:
            self._open.move_to_end(key)
            return self._readers[key]
        try:
            reader = super()._reader(part, group)
        except StoreError:
            entry = self.manifest["files"][part]["files"][group]
            if os.path.exists(self.cache.path(f"{self._key}/{entry['name']}")):
                raise
            reader = super()._reader(part, group)  # evicted by another process between fetch and map: once more
        self._open[key] = size = int(self.manifest["files"][part]["files"][group]["bytes"])
        self._open_bytes += size
        while len(self._open) > 1 and (len(self._open) > MAX_OPEN_FILES or self._open_bytes > self.cache.limit):
            old, old_size = self._open.popitem(last=False)
            self._open_bytes -= old_size
            self._forget(old)
        return reader

    def _forget(self, key) -> None:
        """Drop a file's reader and columns (called under the store's lock)."""
        part, group = key
        self._readers.pop(key, None)
        self._mapped.pop(key, None)
        for chunk_key in [k for k in self._columns if k[1] == group and self._where[k[0]][0] == part]:
            self._columns.pop(chunk_key, None)

    def gather(self, indices, alloc=None):
        try:
            return super().gather(indices, alloc)
        except StoreError as e:
            idx = np.asarray(indices).reshape(-1)[:4].tolist()
            raise StoreError(f"{e} (while reading samples {idx}{'...' if len(indices) > 4 else ''})") from e

    # ------------------------------------------------------------ read-ahead

    def read_ahead(self, indices) -> None:
        """Fetch the files that ``indices`` (the epoch's samples, in delivery order) will read, in that order.

        Replaces a read-ahead already running. At most ``concurrency``
        requests are in flight and ``2 * concurrency`` fetched files wait
        unread (fewer when the cache is small).
        """
        if not self.read_ahead_enabled:
            return
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if self._ahead is not None:
            self._ahead.stop(timeout=0)  # its threads end after their current request; no wait here
        if not len(idx):
            return
        chunks = np.searchsorted(self._starts_array, idx, side="right") - 1
        parts = np.asarray([w[0] for w in self._where], dtype=np.int64)[chunks]
        _, first = np.unique(parts, return_index=True)
        ordered = parts[np.sort(first)].tolist()
        # The first part's files go alone: the first task reads them, and waits for nothing else.
        self._start([(p, g) for p in ordered for g in self._groups], first=len(self._groups))

    def _start(self, files, first: int = 0) -> None:
        def unread(file) -> bool:
            entry = self.manifest["files"][file[0]]["files"][file[1]]
            try:
                return os.stat(self.cache.path(f"{self._key}/{entry['name']}")).st_mtime == PREFETCHED
            except FileNotFoundError:
                return False

        self._ahead = ReadAhead(files, lambda f: self._fetch(*f, prefetch=True), unread,
                                concurrency=self.concurrency, ahead=self._ahead_files, first=first)

    def counts(self) -> dict:
        """This process's cache counters (hits, downloads, bytes, retries, failures, evicted) and prefetch failures."""
        out = self.cache.counts()
        out["prefetch_failures"] = len(self._ahead.failed) if self._ahead is not None else 0
        return out

    def take_counters(self) -> dict:
        """Downloads, bytes, retries and failed downloads in this process since the last call (see `Source`)."""
        grown = self.cache.take_counts()
        return {_COUNTER_NAMES[k]: v for k, v in grown.items() if k in _COUNTER_NAMES}

    def close(self) -> None:
        """Stop the read-ahead and drop cached readers."""
        if self._ahead is not None:
            self._ahead.stop()
        super().close()
        self._open.clear()
        self._open_bytes = 0

    def describe(self) -> str:
        return super().describe() + f", cache {self.cache.root!r}"

    def __repr__(self) -> str:
        options = ", ".join(sorted(self.location.options)) or "none"
        return f"RemoteStore({self.path!r}, {self._length} samples, storage_options: {options})"
