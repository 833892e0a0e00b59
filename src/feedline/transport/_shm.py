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
- Where ``/dev/shm`` has no room (Docker and Kubernetes give containers 64
  MB of it), a segment is an anonymous memory file (Linux ``memfd_create``):
  the same memory as ``/dev/shm`` but not limited by its mount, never on a
  disk, and never leaked (it goes with the last descriptor and mapping).
  Its name carries where it lives, ``<name>@memfd:<pid>:<fd>:<inode>``:
  another process maps it through ``/proc/<pid>/fd/<fd>``, so the owner
  keeps that descriptor open until it unlinks the name (`unlink` of an
  owner closes it; of anyone else, a no-op), and a segment whose owner died
  before the first attach cannot be mapped (`SegmentGone`: the process
  executor runs that worker's task again). ``FEEDLINE_MEMFD=0`` turns it off.
- Elsewhere, or without room there either, a segment is a file of the same
  name in a spill folder (`spill_dir`: a per-user folder in the temporary
  directory), mapped the same way: the memory is the page cache, shared by
  every mapping, and the name rules are the same (unlinked at the first
  attach). The consumer warns once. joblib and Ray fall back the same way.
  Only if that folder has no room either is it `SharedMemoryFull`.
- ``multiprocessing.shared_memory`` is not used on POSIX because in Python
  3.10-3.12 every process that merely attaches registers the segment with
  its own resource tracker, which unlinks it (and warns) when that process
  exits. We call ``shm_open``/``mmap`` directly instead; on Windows, where a
  segment lives as long as a handle to it, the standard class is used.
- A mapping holds no file descriptor (`_map`): Python's ``mmap.mmap`` keeps
  a duplicate open for each, and the consumer maps every slot of every
  worker, so ``list(pipe)`` of 2,000 batches died of ``Too many open
  files`` at the usual limit of 1,024 (macOS: 256). The memory is unmapped
  when the last view of it is gone.
- A mapping still counts against the kernel's mappings a process
  (``vm.max_map_count``, `max_mappings`): the consumer copies batches kept
  past a bound instead (`feedline.transport._slots.SlotViews`), and a
  mapping refused there says so (`_map`).
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import sys
import tempfile
import warnings
import weakref

from .._errors import SharedMemoryFull

__all__ = ["MAPPED_VAR", "MEMFD_VAR", "SPILL_VAR", "Segment", "SegmentGone", "bounded_room", "max_mappings", "segment_prefix", "spill_dir",
           "sweep", "unlink", "warn_spilled"]

_WINDOWS = sys.platform == "win32"
if not _WINDOWS:
    import _posixshmem

    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mmap.restype = ctypes.c_void_p
    _libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    _libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    _MAP_FAILED = ctypes.c_void_p(-1).value


MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"  # Linux: the most memory mappings one process may have
SHM_DIR = "/dev/shm"  # where POSIX shared memory lives on Linux (a tmpfs; its size is the limit)
SPILL_VAR = "FEEDLINE_SPILL_DIR"  # where segments go when /dev/shm is full (default: `spill_dir`); "0": nowhere
MAPPED_VAR = "FEEDLINE_MAPPED_BATCHES"  # batches the consumer keeps as views of shared memory at once (`_slots.mapped_bound`)
MEMFD_VAR = "FEEDLINE_MEMFD"  # "0": no memory files where /dev/shm is full (the spill folder at once)
_MEMFD = "@memfd:"  # in a segment's name: ``<name>@memfd:<owner pid>:<fd>:<inode>``
_OFF = ("0", "off", "no", "false")
_own_memfds: dict[str, int] = {}  # name -> the descriptor this process keeps open so that others can map it
_warned: list[bool] = []  # the spill warning was given in this process
_swept: list[bool] = []  # this process removed the files of dead consumers from the spill folder


def spill_dir() -> str | None:
    """The folder for segments that find no room in ``/dev/shm``: ``$FEEDLINE_SPILL_DIR``, else one per user in the temporary directory; None: off.

    The same in the consumer and its workers (they inherit its environment).
    """
    setting = os.environ.get(SPILL_VAR, "").strip()
    if setting.lower() in _OFF:
        return None
    if setting:
        return os.path.expanduser(setting)
    return os.path.join(tempfile.gettempdir(), f"feedline-spill-{os.getuid()}")


def bounded_room() -> int | None:
    """Bytes of ``/dev/shm`` where segments cannot go anywhere else (no memory files, no spill folder); None: unbounded.

    Where they can, a full ``/dev/shm`` costs speed, not the epoch; where
    they cannot (both turned off), what runs ahead of the consumer must fit
    in it (`feedline.engine._autotune.DepthTuner`).
    """
    if _WINDOWS or _memfd_on() or spill_dir() is not None:
        return None
    try:
        stats = os.statvfs(SHM_DIR)
    except OSError:
        return None
    return stats.f_blocks * stats.f_frsize


def warn_spilled(segment: "Segment") -> None:
    """Warn once per process that batches go through files in the spill folder (``/dev/shm`` is full)."""
    if not segment.spilled or _warned:
        return
    _warned.append(True)
    warnings.warn(f"feedline: {SHM_DIR} has no room for what process workers hand over ({_room(SHM_DIR)}), so it goes "
                  f"through files in {os.path.dirname(segment.spilled)} instead (the page cache: as fast while memory "
                  f"lasts, written back to disk now and then). Enlarge {SHM_DIR} (docker run --shm-size=8g; Kubernetes: "
                  f"an emptyDir volume with medium: Memory mounted at {SHM_DIR}) or set {SPILL_VAR} to a tmpfs folder",
                  RuntimeWarning, stacklevel=2)


def _room(folder: str) -> str:
    try:
        stats = os.statvfs(folder)
        return f"{stats.f_bavail * stats.f_frsize / 2**20:,.1f} MiB free of {stats.f_blocks * stats.f_frsize / 2**20:,.0f} MiB"
    except OSError:
        return "too little free"


def _reserve(fd: int, size: int) -> bool:
    """Allocate the segment's memory now, so that a full ``/dev/shm`` shows here; False: no room.

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
        return True
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.ENOMEM):
            return False
        return True  # a file system that cannot reserve (EINVAL, EOPNOTSUPP): as before
    return True


def _full(what: str, size: int, spill: str | None, memfd: bool) -> SharedMemoryFull:
    where = f"{SHM_DIR} has {_room(SHM_DIR)}"
    if memfd:
        where += ", memory files (memfd) found no room either (a memory limit?)"
    if spill is not None:
        if not os.path.isdir(spill):
            state = "could not be made (a read-only file system?)"
        elif not os.access(spill, os.W_OK | os.X_OK):
            state = "is not writable"
        else:
            state = f"has {_room(spill)}"
        where += f", and the spill folder {spill} ({SPILL_VAR}) {state}"
    return SharedMemoryFull(
        f"shared memory is full: {what} needs {size / 2**20:,.1f} MiB and {where}. Process workers hand batches "
        f"over in shared memory: enlarge it (docker run --shm-size=8g; Kubernetes: an emptyDir volume with medium: "
        f"Memory mounted at {SHM_DIR}), set {SPILL_VAR} to a writable folder with room, make batches smaller, or "
        f"use backend='thread' (no shared memory)")


def _sweep_dead_consumers(folder: str) -> None:
    """Remove files of consumers that are gone (killed with their workers: a disk keeps files, unlike /dev/shm at reboot)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        parts = name.split("_")
        if len(parts) < 3 or parts[0] != "feedline" or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            try:
                os.unlink(os.path.join(folder, name))
            except OSError:
                pass
        except OSError:  # alive, another user's (EPERM): theirs
            pass


class SegmentGone(FileNotFoundError):
    """A segment's name no longer leads to it: unlinked, or its owner (a memory file's) has exited."""


def _memfd_on() -> bool:
    """Memory files can stand in for a full ``/dev/shm``: Linux, ``/proc`` mounted, not turned off."""
    return (hasattr(os, "memfd_create") and os.path.isdir("/proc/self/fd")
            and os.environ.get(MEMFD_VAR, "").strip().lower() not in _OFF)


def _create_memfd(name: str, size: int):
    """``(buffer, name with its address)`` of a new memory file of ``size`` bytes; None where memory has no room (a cgroup limit)."""
    try:
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
    except OSError:
        return None
    buf = _map_reserved(fd, size, fallback=True)
    if buf is None:
        os.close(fd)
        return None
    address = f"{name}{_MEMFD}{os.getpid()}:{fd}:{os.fstat(fd).st_ino}"
    _own_memfds[address] = fd
    return buf, address


def _open_memfd(address: str, flags: int) -> int:
    """A descriptor of the memory file ``address`` names, opened through its owner's ``/proc`` entry."""
    pid, fd, inode = (int(part) for part in address.rpartition(_MEMFD)[2].split(":"))
    path, gone = f"/proc/{pid}/fd/{fd}", f"shared memory {address}: the process that made it (pid {pid}) has exited or unlinked it"
    try:
        opened = os.open(path, flags)
    except FileNotFoundError:
        raise SegmentGone(gone) from None
    except PermissionError as e:
        raise PermissionError(f"feedline: cannot map shared memory {address} through {path} ({e.strerror}): this system "
                              f"keeps processes from opening each other's descriptors; set {MEMFD_VAR}=0 to use the "
                              f"spill folder instead, or enlarge {SHM_DIR}") from e
    if os.fstat(opened).st_ino != inode:  # the pid or the descriptor number was reused
        os.close(opened)
        raise SegmentGone(gone)
    return opened


def _spill_path(name: str) -> str | None:
    folder = spill_dir()
    return None if folder is None else os.path.join(folder, name)


def _create_spilled(name: str, size: int):
    """``(buffer, path)`` of a new file ``name`` of ``size`` bytes in the spill folder; None where it has no room either."""
    path = _spill_path(name)
    if path is None:
        return None
    if not _swept:
        _swept.append(True)
        _sweep_dead_consumers(os.path.dirname(path))
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError:
        return None
    buf = _map_reserved(fd, size, fallback=True)
    os.close(fd)
    if buf is None:
        os.unlink(path)
        return None
    return buf, path


def _open_spilled(path: str, flags: int) -> int | None:
    """A descriptor of the spilled segment at ``path``; None if there is none (or no spill folder: a file in its way)."""
    try:
        return os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None


def max_mappings() -> int | None:
    """The most memory mappings a process may have (Linux's ``vm.max_map_count``); None where it is not known."""
    try:
        with open(MAX_MAP_COUNT) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _refused(code: int) -> OSError:
    """The error of a mapping the kernel refused with ``code``: where this process is at its mapping limit, it says so."""
    limit = max_mappings()
    if code != errno.ENOMEM or limit is None:
        return OSError(code, os.strerror(code))
    try:
        with open("/proc/self/maps") as f:
            mapped = sum(1 for _ in f)
    except OSError:
        return OSError(code, os.strerror(code))
    if mapped < limit - 16:  # short of the limit: memory is short, not mappings
        return OSError(code, os.strerror(code))
    return OSError(code, f"{os.strerror(code)}: this process has {mapped:,} memory mappings and the kernel allows "
                         f"{limit:,} ({MAX_MAP_COUNT}). Batches from process workers kept past {MAPPED_VAR} are copied "
                         f"out of shared memory; lower it, free mappings held elsewhere (memory-mapped files), or raise "
                         f"the limit (sysctl -w vm.max_map_count=262144)")


def _map(fd: int, size: int, writable: bool = True) -> memoryview:
    """The first ``size`` bytes of the open file ``fd``, mapped shared, as a byte memoryview that holds no descriptor.

    The mapping goes when the last view of it does (a finalizer on the
    ctypes array the views keep alive); not at interpreter exit, where
    other exit handlers may still read a batch (the OS unmaps at exit).
    Read-only where ``writable`` is False, so that NumPy refuses writes
    instead of the process dying of a segmentation fault.
    """
    protection = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
    address = _libc.mmap(None, size, protection, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        raise _refused(ctypes.get_errno())
    memory = (ctypes.c_char * size).from_address(address)
    weakref.finalize(memory, _libc.munmap, address, size).atexit = False
    view = memoryview(memory).cast("B")
    return view if writable else view.toreadonly()


def _map_reserved(fd: int, size: int, fallback: bool = False):
    """Size the open file ``fd`` to ``size`` bytes, reserve them (`_reserve`) and map it; None: no room.

    ``fallback``: a memory file or the spill folder, where any failure
    (``OSError``) means no room too; the next place is tried.
    """
    try:
        os.ftruncate(fd, size)
        return _map(fd, size) if _reserve(fd, size) else None
    except OSError:
        if fallback:
            return None
        raise


def segment_prefix(consumer_pid: int | None = None) -> str:
    """Name prefix of every segment belonging to one consumer process."""
    return f"feedline_{consumer_pid or os.getpid()}_"


class Segment:
    """A mapped shared-memory segment.

    Attributes:
        name: the segment's name (without a leading slash).
        size: its size in bytes.
        buf: a byte ``memoryview`` over the whole segment (`_map`; read-only
            if attached so; on Windows the standard class's ``mmap``).
        spilled: the file's path where it lives in the spill folder, not in
            ``/dev/shm`` (see the module docstring); "" otherwise.
    """

    __slots__ = ("name", "size", "buf", "spilled", "_win")

    def __init__(self, name: str, size: int, buf, win=None, spilled: str = ""):
        self.name, self.size, self.buf, self._win, self.spilled = name, size, buf, win, spilled

    @classmethod
    def create(cls, name: str, size: int, what: str = "a batch slot", spill: bool = True) -> "Segment":
        """Create a new segment of ``size`` bytes (at least one page); ``what`` it holds names it in `SharedMemoryFull`.

        ``spill``: where ``/dev/shm`` has no room, make it a memory file or in
        the spill folder (module docstring); False: raise `SharedMemoryFull`
        at once. The segment's `name` then says where it is: pass that name
        to `attach` and `unlink`.
        """
        size = max(int(size), mmap.PAGESIZE)
        if _WINDOWS:
            from multiprocessing import shared_memory

            shm = shared_memory.SharedMemory(name=name, create=True, size=size)
            return cls(name, size, shm._mmap, shm)
        fd = _posixshmem.shm_open("/" + name, os.O_CREAT | os.O_EXCL | os.O_RDWR, mode=0o600)
        try:
            buf = _map_reserved(fd, size)
        except BaseException:
            os.close(fd)
            unlink(name)
            raise
        os.close(fd)
        if buf is not None:
            return cls(name, size, buf)
        unlink(name)
        memfd = spill and _memfd_on()
        made = _create_memfd(name, size) if memfd else None
        if made is not None:
            return cls(made[1], size, made[0])
        spilled = _create_spilled(name, size) if spill else None
        if spilled is None:
            raise _full(what, size, spill_dir() if spill else None, memfd)
        return cls(name, size, spilled[0], spilled=spilled[1])

    @classmethod
    def attach(cls, name: str, *, readonly: bool = False) -> "Segment":
        """Map an existing segment by name.

        Raises:
            SegmentGone: the name was unlinked, or the memory file's owner
                has exited (a `FileNotFoundError`).
        """
        if _WINDOWS:
            from multiprocessing import shared_memory

            shm = shared_memory.SharedMemory(name=name)
            return cls(name, shm.size, shm._mmap, shm)
        flags = os.O_RDONLY if readonly else os.O_RDWR
        spilled = ""
        if _MEMFD in name:
            fd = _open_memfd(name, flags)
        else:
            try:
                fd = _posixshmem.shm_open("/" + name, flags, mode=0o600)
            except FileNotFoundError:
                spilled = _spill_path(name) or ""
                fd = _open_spilled(spilled, flags) if spilled else None  # made in the spill folder (/dev/shm was full)
                if fd is None:
                    raise SegmentGone(f"shared memory {name}: no such segment (unlinked, or never made)") from None
        try:
            size = os.fstat(fd).st_size
            buf = _map(fd, size, writable=not readonly)
        finally:
            os.close(fd)
        return cls(name, size, buf, spilled=spilled)


def unlink(name: str) -> bool:
    """Remove a segment's name; True if it existed. Mappings stay valid."""
    if _WINDOWS:
        return False  # Windows frees a segment with its last handle.
    if _MEMFD in name:  # the owner lets go of the descriptor others map it by; to anyone else the name means nothing
        fd = _own_memfds.pop(name, None)
        if fd is not None:
            os.close(fd)
        return fd is not None
    try:
        _posixshmem.shm_unlink("/" + name)
        return True
    except FileNotFoundError:
        pass
    spilled = _spill_path(name)
    if spilled is None:
        return False
    try:
        os.unlink(spilled)
        return True
    except (FileNotFoundError, NotADirectoryError):  # not there, or no spill folder at all
        return False


def sweep(prefix: str) -> list[str]:
    """Unlink every segment whose name starts with ``prefix``; return them.

    Only possible where segments are listed as files (Linux's /dev/shm);
    elsewhere owners unlink by the names they recorded.
    """
    removed = []
    if _WINDOWS:
        return removed
    for folder in (SHM_DIR, spill_dir()):
        try:
            names = os.listdir(folder) if folder else []
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and unlink(name):
                removed.append(name)
    return removed
