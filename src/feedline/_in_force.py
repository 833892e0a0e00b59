"""A value in force for the process, that a ``with`` block replaces for its duration (a policy a test varies).

The mechanisms that read a policy read ``current()`` when they decide, so
a test varies a threshold by passing a whole policy value through a public
door in `feedline.testing`, never by changing a module's constant. The
value is the process's, not a thread's: a pipeline's worker threads see the
policy their consumer put in force (process workers keep the default).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Generic, Iterator, TypeVar

__all__ = ["InForce", "check_not_negative"]

T = TypeVar("T")


def check_not_negative(policy) -> None:
    """Refuse a policy (a dataclass) any of whose numbers is negative, naming the field."""
    for field in dataclasses.fields(policy):
        value = getattr(policy, field.name)
        if isinstance(value, (int, float)) and not value >= 0:
            raise ValueError(f"feedline: {type(policy).__name__}.{field.name} must not be negative, got {value!r}")


class InForce(Generic[T]):
    """The default value of one kind of policy, and the ones ``with using(value)`` blocks put in force over it."""

    def __init__(self, default: T):
        self.default = default
        self._stack: list[T] = [default]

    def current(self) -> T:
        """The value of the innermost ``using`` block still open, else the default."""
        return self._stack[-1]

    @contextlib.contextmanager
    def using(self, value: T) -> Iterator[T]:
        """Put ``value`` in force until the block ends; it must be of the default's type."""
        if not isinstance(value, type(self.default)):
            raise TypeError(f"feedline: expected a {type(self.default).__name__}, got {type(value).__name__}")
        self._stack.append(value)
        try:
            yield value
        finally:
            self._stack.remove(value)
