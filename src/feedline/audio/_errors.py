"""The error an audio file that cannot be decoded raises."""

from __future__ import annotations

import os

from .._errors import DecodeError, FeedlineError

__all__ = ["AudioDecodeError"]


class AudioDecodeError(DecodeError):
    """An audio file is truncated, corrupt, not audio, or in an unsupported format.

    Raised from inside a ``map`` function it follows the step's ``on_error``
    policy like any other exception; the message names the file and the
    decoder's reason, so the ``SampleError`` a pipeline raises says both.

    Attributes:
        path: the file (a path string, or a short description such as
            ``"<bytes: 1234>"`` for in-memory data).
        reason: why it could not be decoded (libsndfile's message, or
            feedline's own check such as a truncated data chunk).

    >>> from feedline.audio import AudioDecodeError
    >>> print(AudioDecodeError("clips/0001.wav", "the data chunk ends early"))
    cannot decode audio file 'clips/0001.wav': the data chunk ends early
    """

    def __init__(self, path, reason: str):
        self.path = path if isinstance(path, str) else describe(path)
        self.reason = reason
        FeedlineError.__init__(self, f"cannot decode audio file {self.path!r}: {reason}")

    def __reduce__(self):
        # Travels from process workers by pickle: rebuild from (path, reason),
        # not from the formatted message.
        return (type(self), (self.path, self.reason))


def describe(file) -> str:
    """A short human name for what was given as a file: a path, bytes or a file object."""
    if isinstance(file, (str, os.PathLike)):
        return os.fsdecode(file)
    if isinstance(file, (bytes, bytearray, memoryview)):
        return f"<bytes: {len(file)}>"
    name = getattr(file, "name", None)
    return os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else f"<{type(file).__name__}>"
