"""A local cache of a remote store's files: bounded, least-recently-used, atomic, shared by processes.

Protocol (every process and thread on the machine follows it, so workers
and DDP ranks can share one cache directory):
- A file is downloaded under its own lock (``<file>.lock``, an OS file lock
  that dies with its holder) to ``<file>.tmp-<pid>-<random>``, checked
  (size, and checksum when the manifest has one), then renamed into place:
  the final name only ever holds a complete file. A holder of the lock that
  finds ``.tmp-`` files deletes them: their writer died mid-download.
- A second process that wants the same file waits on the lock, then finds
  it present: each file is downloaded once. A thread of the process that is
  downloading it waits on an in-process event instead (woken the moment
  the file is renamed into place, not at the lock's next poll).
- Use is recorded in the file's mtime: a reader sets it to now; the
  read-ahead sets it to `PREFETCHED` (downloaded, not read yet).
- Before each download, under the cache-wide lock (``.cache.lock``), room
  is made for it: complete files plus the downloads in progress (each one's
  ``.tmp-<pid>-<random>-<size>`` file reserves its full size from the
  moment it is created, under that lock; a dead writer's reservation does
  not count) plus the new file must fit ``limit``, so the cache never holds
  more, even with many downloads at once. Files are evicted for it: read
  files first, oldest use first, then prefetched ones; a file whose lock is
  held (being opened) is passed over. If nothing more can go (the rest is
  being downloaded), a reader waits for downloads to end, up to
  `ROOM_WAIT` seconds, then gets a `StoreError` that says to raise
  ``cache_limit``; the read-ahead does not wait (`CacheFull`: it skips the
  file, which its reader fetches when it needs it). A reader that finds a file complete maps it without taking
  the lock; if eviction removed it in between, the reader fetches it again.
  On POSIX a mapped file that is evicted stays readable through its mapping
  (its disk space is freed when the last mapping goes).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import sys
import threading
import time
import zlib

from .._optional import require
from ._errors import StoreError

__all__ = ["PREFETCHED", "ROOM_WAIT", "CacheFull", "ShardCache", "default_cache_dir", "parse_size"]

PREFETCHED = 1.0  # mtime of a file the read-ahead fetched and no reader has used yet
_GLOBAL_LOCK = ".cache.lock"
_LOCK_POLL = 0.005  # seconds between tries of a file lock another process holds (filelock's default, 0.05, delays every wait)
_COUNTERS = ("hits", "downloads", "bytes", "retries", "failures", "evicted")
ROOM_WAIT = 60.0  # seconds a reader waits for room in a full cache (downloads in progress to end) before an error
_ROOM_POLL = 0.02  # seconds between looks for room
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


class CacheFull(StoreError):
    """No room in the cache for a file right now: the rest is being downloaded (see the module docstring)."""


def parse_size(value, name: str = "cache_limit") -> int:
    """Bytes from an int or a string such as ``"20GiB"`` or ``"500 MB"``.

    >>> parse_size("2 GiB"), parse_size(1000), parse_size("1.5kb")
    (2147483648, 1000, 1500)
    """
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a number of bytes or a string such as '20GiB', got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(digits):]
        if unit not in _UNITS or not digits:
            raise ValueError(f"{name}={value!r} is not a size; write bytes or e.g. '20GiB', '500MB'")
        number = int(float(digits) * _UNITS[unit])
    else:
        raise TypeError(f"{name} must be a number of bytes or a string such as '20GiB', got {type(value).__name__}")
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return number


def default_cache_dir() -> str:
    """``$FEEDLINE_CACHE_DIR``, else ``$XDG_CACHE_HOME/feedline/stores``, else ``~/.cache/feedline/stores``."""
    if os.environ.get("FEEDLINE_CACHE_DIR"):
        return os.environ["FEEDLINE_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "feedline", "stores")


def _filelock():
    return require("filelock", "remote", "the cache of a remote store")


def verify_checksum(path: str, checksum) -> str | None:
    """None if ``path`` matches ``checksum`` (``"sha256:<hex>"``, ``"crc32:<hex>"``), else what differs.

    A checksum in a form this version does not know is not checked (the size still is).
    """
    if not isinstance(checksum, str) or ":" not in checksum:
        return None
    kind, expected = checksum.split(":", 1)
    kind = kind.lower()
    if kind == "sha256":
        digest = hashlib.sha256()
        update = digest.update
    elif kind == "crc32":
        state = [0]

        def update(block):
            state[0] = zlib.crc32(block, state[0])
    else:
        return None
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            update(block)
    actual = digest.hexdigest() if kind == "sha256" else f"{state[0]:08x}"
    return None if actual == expected.lower() else f"{kind} {actual} where the manifest says {expected}"


class ShardCache:
    """Files of remote stores under ``root``, at most ``limit`` bytes in all.

    Args:
        root: the cache directory (created); several stores share it.
        limit: the most bytes its files may take.
    """

    def __init__(self, root: str, limit: int):
        self.root = os.path.abspath(os.fspath(root))
        self.limit = int(limit)
        os.makedirs(self.root, exist_ok=True)
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._taken = dict.fromkeys(_COUNTERS, 0)  # what `take_counts` returned so far
        self._counts_lock = threading.Lock()
        self._downloading: dict = {}  # path -> threading.Event set when this process's download of it ends

    def __getstate__(self) -> dict:
        return {"root": self.root, "limit": self.limit}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["root"], state["limit"])

    def __repr__(self) -> str:
        return f"ShardCache({self.root!r}, limit={self.limit})"

    def counts(self) -> dict:
        """This process's counters: hits, downloads, bytes, retries, failures, evicted."""
        with self._counts_lock:
            return dict(self._counts)

    def take_counts(self) -> dict:
        """The counters' growth since the last call (only those that grew), so each event is reported once."""
        with self._counts_lock:
            grown = {k: v - self._taken[k] for k, v in self._counts.items() if v != self._taken[k]}
            self._taken = dict(self._counts)
        return grown

    def _count(self, key: str, n: int = 1) -> None:
        with self._counts_lock:
            self._counts[key] += n

    # ------------------------------------------------------------ one file
    def path(self, key: str) -> str:
        """The local path of ``key`` (``<store>/raw/part-00000.arrow``)."""
        return os.path.join(self.root, *key.split("/"))

    def _lock(self, path: str):
        return _filelock().FileLock(path + ".lock")

    def get(self, key: str, size: int, download, *, checksum=None, opener=None, prefetch: bool = False):
        """Make ``key`` present and complete; return ``opener(path)`` (default: the path).

        Args:
            key: where the file goes, relative to the cache root.
            size: its size in bytes (from the manifest).
            download: ``download(tmp_path)`` writes the file (raises `StoreError` when it cannot).
            checksum: the manifest's checksum, if any (see `verify_checksum`).
            opener: called with the path while the file's lock is held, so that eviction
                cannot remove it first (without one, a reader that maps the path may find it
                evicted in between and must fetch it again).
            prefetch: fetched by the read-ahead: marked unread (`PREFETCHED`).
        """
        if size > self.limit:
            raise StoreError(f"the file {key!r} has {size} bytes, more than the whole cache_limit of {self.limit}; "
                             "raise cache_limit (e.g. cache_limit='50GiB')")
        path = self.path(key)
        if opener is None and _complete(path, size):  # no lock needed to find a complete file
            if not prefetch:
                self._count("hits")
                self.mark_read(path)
            return path
        if opener is None and self._wait_for_own_download(path) and _complete(path, size):
            if not prefetch:
                self._count("hits")
                self.mark_read(path)
            return path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with self._lock(path).acquire(poll_interval=_LOCK_POLL):
            if _complete(path, size):
                self._count("hits")
            else:
                done = self._downloading[path] = threading.Event()
                try:
                    self._fetch(key, path, size, download, checksum, prefetch)
                finally:
                    del self._downloading[path]
                    done.set()
            if not prefetch:
                os.utime(path)  # used now: last in the LRU order
            return opener(path) if opener is not None else path

    def _wait_for_own_download(self, path: str) -> bool:
        """Wait for another thread of this process that is downloading ``path``; True if there was one."""
        done = self._downloading.get(path)
        if done is None:
            return False
        done.wait()
        return True

    def _fetch(self, key, path, size, download, checksum, prefetch) -> None:
        folder, name = os.path.split(path)
        for entry in os.scandir(folder):
            if entry.name.startswith(name + ".tmp-"):
                os.remove(entry.path)  # left by a downloader that died: we hold the lock, nobody writes it
        if os.path.exists(path):
            os.remove(path)  # wrong size: not what the manifest lists
        tmp = self._reserve(key, size, keep=path, wait=0.0 if prefetch else ROOM_WAIT)
        try:
            download(tmp)
            got = os.path.getsize(tmp)
            if got != size:
                raise StoreError(f"{key!r} arrived with {got} bytes where the manifest says {size}")
            wrong = verify_checksum(tmp, checksum)
            if wrong:
                raise StoreError(f"{key!r} arrived damaged: {wrong}; the remote copy differs from the one "
                                 "the manifest describes: copy the store again")
            if prefetch:
                os.utime(tmp, (PREFETCHED, PREFETCHED))
            os.replace(tmp, path)
        except BaseException:
            self._count("failures")
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        self._count("downloads")
        self._count("bytes", size)

    def note_retry(self, name=None, error=None) -> None:
        """Count one retried download (the `Location.download` ``on_retry`` hook)."""
        self._count("retries")

    # ------------------------------------------------------------ eviction
    def files(self) -> list[tuple[float, int, str]]:
        """``(mtime, size, path)`` of every complete file in the cache."""
        return self._scan()[0]

    def _scan(self) -> tuple[list, int]:
        """Every complete file as ``(mtime, size, path)``, and the bytes live downloads have reserved."""
        out, reserved = [], 0
        for folder, _, names in os.walk(self.root):
            for name in names:
                if name.endswith(".lock"):
                    continue
                full = os.path.join(folder, name)
                if ".tmp-" in name:
                    reserved += _reservation(name)
                    continue
                try:
                    st = os.stat(full)
                except FileNotFoundError:
                    continue
                out.append((st.st_mtime, st.st_size, full))
        return out, reserved

    def used_bytes(self) -> int:
        """Bytes the cache's complete files take, and the downloads in progress have reserved."""
        files, reserved = self._scan()
        return sum(size for _, size, _ in files) + reserved

    def _reserve(self, key: str, size: int, keep: str, wait: float) -> str:
        """Make room for ``size`` bytes and reserve it: the path of the (empty) temporary file to download into."""
        deadline = time.monotonic() + wait
        while True:
            with _filelock().FileLock(os.path.join(self.root, _GLOBAL_LOCK)).acquire(poll_interval=_LOCK_POLL):
                total = self._make_room(size, keep)
                if total <= self.limit:
                    tmp = f"{keep}.tmp-{os.getpid()}-{secrets.token_hex(4)}-{size}"
                    open(tmp, "wb").close()  # the reservation: every process counts it from now on
                    return tmp
            if time.monotonic() >= deadline:
                break
            time.sleep(_ROOM_POLL)
        if wait == 0:
            raise CacheFull(f"no room for {key!r} in the cache now")
        raise StoreError(
            f"the cache {self.root!r} has no room for {key!r} ({size} bytes) within cache_limit={self.limit} bytes: "
            f"{total - size} bytes are files being downloaded or opened, and none of them ended within {wait:.0f} s. "
            "Raise cache_limit (it must hold the files that every worker and the read-ahead use at once)"
        )

    def _make_room(self, size: int, keep: str) -> int:
        """Evict (under the cache-wide lock) until ``size`` more bytes fit; the total there would then be."""
        files, reserved = self._scan()
        total = sum(s for _, s, _ in files) + reserved + size
        if total <= self.limit:
            return total
        # Read files, oldest use first; then the prefetched (unread) ones, which are about to be needed.
        order = sorted(files, key=lambda f: (f[0] == PREFETCHED, f[0]))
        for _, fsize, full in order:
            if total <= self.limit:
                break
            if full == keep:
                continue
            lock = self._lock(full)
            try:
                lock.acquire(blocking=False)
            except _filelock().Timeout:
                continue  # being opened right now
            try:
                os.remove(full)
            except (FileNotFoundError, PermissionError):  # gone already; mapped on Windows
                continue
            finally:
                lock.release()
            total -= fsize
            self._count("evicted")
        return total

    def mark_read(self, path: str) -> None:
        """Record that a reader used ``path`` (moves it to the recent end of the LRU order)."""
        try:
            os.utime(path)
        except FileNotFoundError:
            pass  # evicted since: its reader holds the mapping


def _reservation(name: str) -> int:
    """Bytes a download's temporary file reserves: its full size, while its writer lives (0 once it died)."""
    try:
        pid, _, size = name.rsplit(".tmp-", 1)[1].split("-")
        pid, size = int(pid), int(size)
    except ValueError:
        return 0  # not a reservation (a temporary file of an older feedline): its writer locks the file instead
    if pid != os.getpid() and sys.platform != "win32":  # (Windows: kept, removed when the file is fetched next)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0  # its writer died; whoever fetches the file next removes it
        except PermissionError:
            pass  # alive, another user's
    return size  # also if it was renamed into place since the listing (and so missed as a complete file)


def _complete(path: str, size: int) -> bool:
    try:
        return os.path.getsize(path) == size
    except FileNotFoundError:
        return False
