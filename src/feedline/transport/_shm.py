"""Named shared-memory segments, without Python's resource tracker.

Protocol and ownership:
- A segment is created by exactly one process (its owner) under a name that
  starts with ``feedline_<consumer pid>_``, so a leak can always be traced
  to the pipeline that made it, and swept.
- A process that attaches to a segment it will keep (the consumer attaching
  a worker's batch slot) unlinks the *name* at once: the memory lives on in
  every existing mapping and is freed by the OS when the last mapping goes,
  even if every process is killed. Names therefore exist only for the
  moment between creation and the first attach.
- ``multiprocessing.shared_memory`` is not used on POSIX because in Python
  3.10-3.12 every process that merely attaches registers the segment with
  its own resource tracker, which unlinks it (and warns) when that process
  exits. We call ``shm_open``/``mmap`` directly instead; on Windows, where a
  segment lives as long as a handle to it, the standard class is used.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys

from .._errors import SharedMemoryFull

__all__ = ["Segment", "segment_prefix", "sweep", "unlink"]

_WINDOWS = sys.platform == "win32"
if not _WINDOWS:
    import _posixshmem


SHM_DIR = "/dev/shm"  # where POSIX shared memory lives on Linux (a tmpfs; its size is the limit)


def _reserve(fd: int, size: int, what: str) -> None:
    """Allocate the segment's memory now, so that a full ``/dev/shm`` is an error here, with a reason.

    ``ftruncate`` reserves nothing: a worker writing a batch into a slot on
    a full ``/dev/shm`` died of SIGBUS, was replaced three times, and the
    epoch ended with an error that blamed the sample (4 MB ``/dev/shm``,
    batches of 8 512x512x3 images). Allocating costs what the worker's
    first writes would have (the pages are touched once either way), and a
    slot is made once and used for many batches.
    """
    try:
        os.posix_fallocate(fd, 0, size)
    except AttributeError:  # no posix_fallocate (macOS): as before
        return
    except OSError as e:
        if e.errno not in (errno.ENOSPC, errno.ENOMEM):
            return  # a file system that cannot reserve (EINVAL, EOPNOTSUPP): as before
        try:
            stats = os.statvfs(SHM_DIR)
            room = f"{SHM_DIR} has {stats.f_bavail * stats.f_frsize / 2**20:,.1f} MiB free of {stats.f_blocks * stats.f_frsize / 2**20:,.0f} MiB"
        except OSError:
            room = f"{SHM_DIR} has too little free"
        raise SharedMemoryFull(
            f"shared memory is full: {what} needs {size / 2**20:,.1f} MiB and {room}. Process workers hand batches "
            f"over in shared memory: enlarge it (docker run --shm-size=8g; Kubernetes: an emptyDir volume with medium: "
            f"Memory mounted at {SHM_DIR}), make batches smaller, or use backend='thread' (no shared memory)") from e


def segment_prefix(consumer_pid: int | None = None) -> str:
    """Name prefix of every segment belonging to one consumer process."""
    return f"feedline_{consumer_pid or os.getpid()}_"


class Segment:
    """A mapped shared-memory segment.

    Attributes:
        name: the segment's name (without a leading slash).
        size: its size in bytes.
        buf: a writable ``mmap`` over the whole segment.
    """

    __slots__ = ("name", "size", "buf", "_win")

    def __init__(self, name: str, size: int, buf, win=None):
        self.name, self.size, self.buf, self._win = name, size, buf, win

    @classmethod
    def create(cls, name: str, size: int, what: str = "a batch slot") -> "Segment":
        """Create a new segment of ``size`` bytes (at least one page); ``what`` it holds names it in `SharedMemoryFull`."""
        size = max(int(size), mmap.PAGESIZE)
        if _WINDOWS:
            from multiprocessing import shared_memory

            shm = shared_memory.SharedMemory(name=name, create=True, size=size)
            return cls(name, size, shm._mmap, shm)
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            os.ftruncate(fd, size)
            _reserve(fd, size, what)
            buf = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            unlink(name)
            raise
        os.close(fd)
        return cls(name, size, buf)

    @classmethod
    def attach(cls, name: str, *, readonly: bool = False) -> "Segment":
        """Map an existing segment by name."""
        if _WINDOWS:
            from multiprocessing import shared_memory

            shm = shared_memory.SharedMemory(name=name)
            return cls(name, shm.size, shm._mmap, shm)
        flags = os.O_RDONLY if readonly else os.O_RDWR
        fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
        try:
            size = os.fstat(fd).st_size
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            buf = mmap.mmap(fd, size, access=access)
        finally:
            os.close(fd)
        return cls(name, size, buf)


def unlink(name: str) -> bool:
    """Remove a segment's name; True if it existed. Mappings stay valid."""
    if _WINDOWS:
        return False  # Windows frees a segment with its last handle.
    try:
        _posixshmem.shm_unlink("/" + name)
        return True
    except FileNotFoundError:
        return False


def sweep(prefix: str) -> list[str]:
    """Unlink every segment whose name starts with ``prefix``; return them.

    Only possible where segments are listed as files (Linux's /dev/shm);
    elsewhere owners unlink by the names they recorded.
    """
    removed = []
    try:
        names = os.listdir("/dev/shm")
    except OSError:
        return removed
    for name in names:
        if name.startswith(prefix) and unlink(name):
            removed.append(name)
    return removed
