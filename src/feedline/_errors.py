"""Exceptions raised by feedline.

Every error names what failed (the sample index, its file when there is one,
the argument) and says what to do about it.
"""

from __future__ import annotations

__all__ = ["DecodeError", "FeedlineError", "RemoteTraceback", "SampleError", "SharedMemoryFull", "WorkerError"]


class FeedlineError(Exception):
    """Base class of the errors feedline raises itself."""


class RemoteTraceback(Exception):
    """Carries the formatted traceback of an exception raised in a worker.

    It is attached as the ``__cause__`` of the re-raised exception, so the
    consumer's traceback shows where the error happened inside the worker.
    """

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return "\n\n--- traceback from the worker ---\n" + self.text


class SampleError(FeedlineError):
    """A sample could not be read or transformed.

    Attributes:
        index: the sample's index in the source (for generator sources, a
            ``(shard, position)`` pair).
        where: a human description of the sample (its file path, if any).
        stage: the name of the step that failed.
    """

    def __init__(self, message: str, *, index=None, where=None, stage=None):
        super().__init__(message)
        self.index = index
        self.where = where
        self.stage = stage


class WorkerError(FeedlineError):
    """A worker died or could not start, and the work could not be redone."""


class SharedMemoryFull(FeedlineError):
    """Shared memory (``/dev/shm``) has no room for a batch slot or a source array, and neither have the fallbacks.

    Docker gives containers 64 MB of it unless told otherwise; what does not
    fit goes to memory files (Linux) or files in the spill folder
    (``FEEDLINE_SPILL_DIR``) first.
    Raised where the segment is made, before anything is written into it
    (see `feedline.transport._shm`), with the sizes and what to do.
    """


class DecodeError(FeedlineError, ValueError):
    """A file could not be decoded (truncated, corrupt, or not of the expected kind).

    Raised by feedline's decoders (images, audio) inside ``map``, so it
    follows ``on_error``; it names the file and the decoder's reason, and
    pickles as ``(path, reason)`` so it travels back from process workers.
    """

    def __init__(self, path, reason: str):
        super().__init__(f"cannot decode {path!s}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self):
        return (type(self), (self.path, self.reason))
