"""Process-wide settings that several pipelines may want at once: the first hold applies it, the last release undoes it."""

from __future__ import annotations

import threading

__all__ = ["CountedSetting"]


class CountedSetting:
    """A hold on a process-wide setting; subclasses say how to `apply` and `undo` it.

    Each subclass keeps its own count: creating an instance is a hold (the
    first applies the setting), and `release` gives it up once, however
    often it is called (the last one undoes the setting, with what `apply`
    returned).

    >>> class Loud(CountedSetting):
    ...     @staticmethod
    ...     def apply():
    ...         print("on"); return "saved"
    ...     @staticmethod
    ...     def undo(state):
    ...         print("off", state)
    >>> a, b = Loud(), Loud()
    on
    >>> a.release(); a.release(); b.release()
    off saved
    """

    _lock: threading.Lock
    _holders: int
    _state: object

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._lock, cls._holders, cls._state = threading.Lock(), 0, None

    def __init__(self):
        cls = type(self)
        with cls._lock:
            if cls._holders == 0:
                cls._state = self.apply()
            cls._holders += 1
        self._held = True

    def release(self) -> None:
        cls = type(self)
        with cls._lock:
            if not self._held:
                return
            self._held = False
            cls._holders -= 1
            if cls._holders == 0:
                state, cls._state = cls._state, None
                self.undo(state)

    @classmethod
    def holders(cls) -> int:
        """Live holds; read under the lock, so a release in progress has undone the setting by the time this reads 0."""
        with cls._lock:
            return cls._holders

    @staticmethod
    def apply():
        """Apply the setting; what it returns is given to `undo`."""
        raise NotImplementedError

    @staticmethod
    def undo(state) -> None:
        raise NotImplementedError
