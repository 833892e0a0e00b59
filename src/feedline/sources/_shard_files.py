"""Shard files of the foreign formats: name expansion, and byte ranges read on any backend.

WebDataset and TFRecord sources keep an index of byte offsets and read
one range per sample. `ShardFiles` opens each file lazily where it is read
(a worker), local paths with `open`, and keeps a few handles per thread, so
threads never share a file position. A URL (``s3://``, ``http://``, any
fsspec protocol) is downloaded whole, once, into the local shard cache that
remote stores use (`ShardCache`: bounded, least-recently-used, atomic,
shared by every worker and process on the machine), then read like a
local file, so a second epoch makes no requests; a shard larger than the
whole cache is read by byte ranges instead. It pickles as the names,
options, cache settings and the remote files' sizes; credentials in
``storage_options`` travel with it to the workers of this machine and are
never shown by `describe` or in error messages.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import io
import os
import posixpath
import random
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

from .._errors import FeedlineError
from .._optional import require

__all__ = ["ShardDownloadError", "ShardFiles", "ShardFormatError", "expand_names", "has_suffix", "is_url", "redact"]

_INDEX_THREADS = 8  # remote files indexed at once
_OPEN_PER_THREAD = 16  # handles a thread keeps open: shards are read a few at a time, and fd limits are low on macOS
_SCAN_BLOCK = 8 << 20  # fsspec block size while indexing a remote shard: the scan reads it front to back
_RETRIES = 4  # attempts after the first for a remote read: 0.2 + 0.4 + 0.8 + 1.6 s of backoff rides out a brief outage
_BACKOFF = 0.2  # seconds before the first retry, doubled after each (with up to 50 % jitter)
_CACHE_LIMIT = "50GiB"  # as a remote store's default: fits a training machine's disk; cache_limit= changes it
# The cache's counters that reach `Stats.source_counts` (`pipe.stats()`), named as a remote store names them.
_COUNTER_NAMES = {"downloads": "remote downloads", "bytes": "remote bytes downloaded",
                  "retries": "remote download retries", "failures": "remote downloads failed"}
_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


class ShardFormatError(FeedlineError, ValueError):
    """A shard file is damaged, or not of the format it was read as; the message names the file and the place."""


class ShardDownloadError(FeedlineError, OSError):
    """A remote shard could not be downloaded to the shard cache (every attempt failed); the message names it."""


def is_url(name: str) -> bool:
    """True for ``protocol://...`` names other than ``file://`` (those are read through fsspec).

    >>> is_url("s3://bucket/a.tar"), is_url("data/a.tar"), is_url("file:///data/a.tar")
    (True, False, False)
    """
    scheme, sep, _ = name.partition("://")
    return bool(sep) and scheme.isidentifier() and scheme != "file"


def redact(text: str) -> str:
    """``text`` with the user info and query strings of its URLs removed (where credentials and signatures hide).

    >>> redact("https://me:pw@host/a.tar?X-Amz-Signature=abc")
    'https://***@host/a.tar'
    """
    text = re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"]*@", r"\1***@", text)
    return re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"?]*)\?[^\s'\"]*", r"\1", text)


def _local(name: str) -> str:
    return name[len("file://"):] if name.startswith("file://") else name


def expand_braces(name: str) -> list[str]:
    """WebDataset's shard notation: ``a-{000..002}.tar`` and ``{train,val}.tar``, expanded in order.

    >>> expand_braces("s-{08..10}.tar"), expand_braces("{a,b}-{1..2}")
    (['s-08.tar', 's-09.tar', 's-10.tar'], ['a-1', 'a-2', 'b-1', 'b-2'])
    """
    match = _BRACE.search(name)
    if match is None:
        return [name]
    body = match.group(1)
    numbers = _RANGE.match(body)
    if numbers:
        low, high = numbers.groups()
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        step = 1 if int(high) >= int(low) else -1
        choices = [str(v).zfill(width) for v in range(int(low), int(high) + step, step)]
    elif "," in body:
        choices = body.split(",")
    else:
        choices = None
    head, tail = name[:match.start()], name[match.end():]
    if choices is None:  # a literal brace: keep it, expand the rest
        return [head + "{" + body + "}" + rest for rest in expand_braces(tail)]
    return [head + choice + rest for choice in choices for rest in expand_braces(tail)]


def has_suffix(name: str, suffixes) -> bool:
    """True when ``name`` ends with one of ``suffixes``, or has one before a TFDS shard number.

    >>> has_suffix("train.tfrecord-00001-of-00064", (".tfrecord",)), has_suffix("info.json", (".tar",))
    (True, False)
    """
    lower = name.lower()
    return any(lower.endswith(s) or f"{s}-" in lower for s in suffixes)


def expand_names(names, what: str, storage_options: dict | None = None, suffixes: tuple = ()) -> list[str]:
    """The shard files named by ``names``: one name, a list, brace ranges, glob patterns or a folder.

    A list keeps its order; a glob or folder is sorted, so the order (and
    every shuffle) is the same on every machine. A folder gives the files
    in it whose names have one of ``suffixes`` (the format's extensions),
    so a ``dataset_info.json`` beside the shards is left out.

    Raises:
        FileNotFoundError: a pattern or folder matches nothing, or a named local file does not exist.
        ValueError: no names at all.
    """
    given = [os.fspath(names)] if isinstance(names, (str, os.PathLike)) else [os.fspath(n) for n in names]
    if not given:
        raise ValueError(f"{what}() got an empty list of files")
    found = []
    for name in given:
        for one in expand_braces(name):
            found.extend(_expand_one(one, what, storage_options, suffixes))
    return found


def _expand_one(name: str, what: str, storage_options, suffixes: tuple) -> list[str]:
    wild = any(c in name for c in "*?[")
    if is_url(name):
        if not wild:
            return [name]
        fsspec = require("fsspec", "remote", f"{what}() with a URL")
        fs, _, paths = fsspec.get_fs_token_paths(name, storage_options=storage_options or {})
        protocol = name.split("://", 1)[0]
        matched = sorted(p if "://" in p else f"{protocol}://{p}" for p in paths)
        if not matched:
            raise FileNotFoundError(f"{what}(): no files match {name!r}")
        return matched
    path = _local(name)
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path)
                       if not f.startswith(".") and has_suffix(f, suffixes) and os.path.isfile(os.path.join(path, f)))
        if not files:
            raise FileNotFoundError(f"{what}(): the folder {name!r} holds no {' or '.join(suffixes)} files")
        return files
    if wild:
        matched = sorted(p for p in glob.glob(path, recursive=True) if os.path.isfile(p))
        if not matched:
            raise FileNotFoundError(f"{what}(): no files match {name!r}; check the pattern, or pass a list of files")
        return matched
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{what}(): no such file {name!r}")
    return [path]


class _Handles(OrderedDict):
    """One thread's open files, most recently used last; closed when the thread or the source goes."""

    def __del__(self) -> None:
        for f in self.values():
            with contextlib.suppress(Exception):  # a read-only handle at teardown: a failed close loses nothing
                f.close()


class ShardFiles:
    """Byte ranges of a list of files, local or remote, safe to use from many threads.

    Args:
        names: the files (local paths or URLs), numbered by position.
        storage_options: passed to fsspec for URLs (endpoint, credentials).
        cache_dir: the local cache remote files are downloaded to (default
            `default_cache_dir`, shared with remote stores); False reads
            remote files by byte ranges, one request per sample, caching nothing.
        cache_limit: bytes (or ``"20GiB"``) the cache may take (default 50GiB).
    """

    def __init__(self, names: list[str], storage_options: dict | None = None, *, cache_dir=None, cache_limit=None):
        self.names = list(names)
        self.storage_options = dict(storage_options or {})
        self.cache = None
        if cache_dir is not False and any(is_url(n) for n in self.names):
            from ..store._remote_cache import ShardCache, default_cache_dir, parse_size

            limit = parse_size(_CACHE_LIMIT if cache_limit is None else cache_limit)
            self.cache = ShardCache(os.fspath(cache_dir) if cache_dir is not None else default_cache_dir(), limit)
        self.remote: dict = {}  # number -> (size, cache key) of a remote file, found once (in the consumer)
        self._setup()

    def _setup(self) -> None:
        self._local = threading.local()
        self._fs: dict = {}
        self._locations: dict = {}  # folder URL -> `Location` that downloads its files
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"names": self.names, "storage_options": self.storage_options, "cache": self.cache, "remote": self.remote}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._setup()

    def take_counts(self) -> dict:
        """Downloads, bytes, retries and failed downloads in this process since the last call (`Source.take_counters`)."""
        if self.cache is None:
            return {}
        grown = self.cache.take_counts()
        return {_COUNTER_NAMES[k]: v for k, v in grown.items() if k in _COUNTER_NAMES}

    def _remote_entry(self, number: int) -> tuple[int, str]:
        """``(size, cache key)`` of remote file ``number``; the key changes when the remote file does."""
        entry = self.remote.get(number)
        if entry is None:
            name = self.names[number]
            try:
                info = self.attempt(number, lambda: self._filesystem(name).info(name), "the size of")
            except FileNotFoundError:
                raise FileNotFoundError(f"{self.shown(number)} does not exist; check the URL and storage_options") from None
            size = int(info["size"])
            version = next((str(info[k]) for k in ("ETag", "etag", "mtime", "LastModified", "last_modified") if info.get(k)), "")
            digest = hashlib.sha256(f"{redact(name)}\0{size}\0{version}".encode()).hexdigest()[:16]
            base = re.sub(r"[^A-Za-z0-9._-]+", "_", posixpath.basename(redact(name)))[-60:] or "shard"
            entry = self.remote[number] = (size, f"shards/{digest}-{base}")
        return entry

    def open_cached(self, number: int, opener=None):
        """Remote file ``number``'s copy in the cache, opened (downloaded first if it is not there).

        None for a local file, when caching is off, or for a file larger than the whole cache
        (read by byte ranges instead). ``opener(path)`` opens it (default: ``open(path, "rb")``)
        under its cache lock, so eviction
        cannot remove it in between; an open file stays readable after eviction (POSIX).

        Raises:
            ShardDownloadError: the download failed every attempt; the message names the file.
        """
        if self.cache is None or not is_url(self.names[number]):
            return None
        size, key = self._remote_entry(number)
        if size > self.cache.limit:
            return None
        from ..store._errors import StoreError
        from ..store._remote_fs import Location

        name = self.names[number]
        folder, base = name.rsplit("/", 1)
        location = self._locations.get(folder)
        if location is None:  # one per folder and process: its client (and connections) serve every download there
            location = self._locations.setdefault(folder, Location(folder, self.storage_options))

        def download(tmp: str) -> None:
            location.download(base, tmp, size, on_retry=self.cache.note_retry)

        try:
            return self.cache.get(key, size, download, opener=opener or (lambda path: open(path, "rb")))
        except StoreError as e:
            raise ShardDownloadError(f"cannot download {self.shown(number)} to the shard cache: {redact(str(e))}") from None

    def open(self, number: int, *, scan: bool = False):
        """A new binary file object for file ``number`` (the caller closes it).

        A remote file comes from the shard cache (downloaded first if
        needed). Uncached, ``scan=True`` asks fsspec for large blocks, for
        reading the whole file front to back (indexing); otherwise each
        read is one request.
        """
        name = self.names[number]
        if not is_url(name):
            return open(_local(name), "rb")
        cached = self.open_cached(number)
        if cached is not None:
            return cached
        fs = self._filesystem(name)
        if scan:
            return fs.open(name, "rb", block_size=_SCAN_BLOCK, cache_type="readahead")
        # One request per sample, of exactly its bytes: reads follow a shuffled plan, so read-ahead would fetch waste.
        return fs.open(name, "rb", cache_type="none")

    def _filesystem(self, name: str):
        protocol = name.split("://", 1)[0]
        fs = self._fs.get(protocol)
        if fs is None:
            fsspec = require("fsspec", "remote", f"reading {protocol}:// files")
            with self._lock:
                fs = self._fs.get(protocol)
                if fs is None:
                    fs = self._fs[protocol] = fsspec.filesystem(protocol, **self.storage_options)
        return fs

    def read(self, number: int, offset: int, size: int) -> bytes:
        """``size`` bytes of file ``number`` from ``offset``; fewer only if a local file ends first.

        A remote read that fails or comes back short (a reset connection, a
        5xx, a truncated body) is retried with backoff on a fresh handle.

        Raises:
            OSError: the last attempt failed; the message names the file and the range.
        """
        def once() -> bytes:
            handles = self._handles()
            f = handles.get(number)
            if f is None:
                f = self.open(number)
                handles[number] = f
                while len(handles) > _OPEN_PER_THREAD:
                    handles.popitem(last=False)[1].close()
            else:
                handles.move_to_end(number)
            try:
                f.seek(offset)
                data = f.read(size)
                if len(data) != size and not isinstance(f, io.BufferedReader):  # a ranged remote read came back short
                    raise OSError(f"got {len(data)} of {size} bytes (a truncated response)")
            except BaseException:
                handles.pop(number, None)
                f.close()
                raise
            return data

        return self.attempt(number, once, f"bytes {offset}-{offset + size - 1} of")

    def attempt(self, number: int, action, what: str = "reading"):
        """``action()``, retried with exponential backoff when file ``number`` is remote and the attempt fails.

        A missing file or a refused permission is not retried.
        """
        if not is_url(self.names[number]):
            return action()
        delay = _BACKOFF
        for attempt in range(_RETRIES + 1):
            try:
                return action()
            except (FileNotFoundError, PermissionError, ShardFormatError, ShardDownloadError):
                raise
            except Exception as e:  # network errors come as many types (aiohttp, botocore, OSError)
                if attempt == _RETRIES:
                    raise OSError(f"cannot read {what} {self.shown(number)}: {_RETRIES + 1} attempts failed, the last with "
                                  f"{type(e).__name__}: {redact(str(e))}; check the network and the server") from None
                time.sleep(delay * (1 + 0.5 * random.random()))
                delay *= 2
        raise AssertionError("unreachable")

    def shown(self, number: int) -> str:
        """File ``number``'s name as messages show it: a URL without user info or query string."""
        return redact(self.names[number])

    def _handles(self) -> _Handles:
        handles = getattr(self._local, "handles", None)
        if handles is None:
            handles = self._local.handles = _Handles()
        return handles

    def scan_all(self, scan, what: str) -> list:
        """``[scan(f, shown name) for each file]``: each file opened for reading front to back, retried when remote.

        Remote files are scanned by up to 8 threads at once (they wait on
        the network; fewer when their downloads would not fit in half the
        shard cache at once); local ones one after another: parsing holds the GIL,
        so threads add CPU without shortening the scan.
        """
        def one(number: int):
            def once():
                with self.open(number, scan=True) as f:
                    return scan(f, self.shown(number))

            return self.attempt(number, once, what)

        numbers = range(len(self.names))
        remote = [number for number in numbers if is_url(self.names[number])]
        if not remote:
            return [one(number) for number in numbers]
        threads = min(_INDEX_THREADS, len(self.names))
        if self.cache is not None:
            with ThreadPoolExecutor(threads, thread_name_prefix="feedline-index") as pool:
                largest = max(size for size, _ in pool.map(self._remote_entry, remote))
            # Downloads in flight hold their space: at most as many as fit in half the cache at once.
            threads = max(1, min(threads, self.cache.limit // max(1, 2 * largest)))
        if threads == 1:
            return [one(number) for number in numbers]
        with ThreadPoolExecutor(threads, thread_name_prefix="feedline-index") as pool:
            return list(pool.map(one, numbers))

    def size(self, number: int) -> int:
        name = self.names[number]
        if not is_url(name):
            return os.path.getsize(_local(name))
        return self._remote_entry(number)[0]
