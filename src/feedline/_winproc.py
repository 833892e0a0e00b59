"""Whether a Windows process is alive (``os.kill(pid, 0)`` would terminate it there)."""

from __future__ import annotations

__all__ = ["windows_process_alive"]


def windows_process_alive(pid: int) -> bool:
    """True while process ``pid`` runs: open it for SYNCHRONIZE and poll its handle."""
    import _winapi

    try:
        handle = _winapi.OpenProcess(0x00100000, False, pid)  # SYNCHRONIZE
    except OSError:
        return False
    try:
        return _winapi.WaitForSingleObject(handle, 0) != 0
    finally:
        _winapi.CloseHandle(handle)
