"""Exceptions raised by feedline.

Every error names what failed (the sample index, its file when there is one,
the argument) and says what to do about it.
"""

from __future__ import annotations

__all__ = ["DecodeError", "FeedlineError", "RemoteTraceback", "SampleError", "SharedMemoryFull", "WorkerError"]


class FeedlineError(Exception):
    """Base class of the errors feedline raises itself.

    >>> import feedline as fl
    >>> issubclass(fl.SampleError, fl.FeedlineError), issubclass(fl.DecodeError, ValueError)
    (True, True)
    """


class RemoteTraceback(Exception):
    """Carries the formatted traceback of an exception raised in a worker.

    It is attached as the ``__cause__`` of the re-raised exception, so the
    consumer's traceback shows where the error happened inside the worker.

    >>> import numpy as np, feedline as fl
    >>> def broken(x):
    ...     raise ValueError(f"cannot read sample {x}")
    >>> pipe = fl.from_arrays(np.arange(2)).map(broken, backend="process", workers=1)
    >>> try:
    ...     list(pipe)
    ... except fl.SampleError as e:
    ...     remote = e.__cause__.__cause__  # the SampleError's cause is the worker's ValueError
    >>> isinstance(remote, fl.RemoteTraceback), "cannot read sample 0" in remote.text
    (True, True)
    >>> pipe.close()
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

    The exception the step raised is its ``__cause__``.

    >>> import numpy as np, feedline as fl
    >>> def check(x):
    ...     if x == 2:
    ...         raise ValueError("negative length")
    ...     return x
    >>> try:
    ...     list(fl.from_arrays(np.arange(4)).map(check, backend="serial"))
    ... except fl.SampleError as e:
    ...     print(e.index, e.stage, type(e.__cause__).__name__)
    2 check ValueError
    """

    def __init__(self, message: str, *, index=None, where=None, stage=None):
        super().__init__(message)
        self.index = index
        self.where = where
        self.stage = stage


class WorkerError(FeedlineError):
    """A worker died or could not start, and the work could not be redone.

    A sample that kills every worker that takes it (here ``os._exit``, as a
    crashing decoder or the kernel's out-of-memory killer would) ends the
    epoch with this error, naming the sample:

    >>> import os
    >>> import numpy as np, feedline as fl
    >>> def crash(x):
    ...     os._exit(3)
    >>> pipe = fl.from_arrays(np.arange(4)).map(crash, backend="process", workers=1)
    >>> try:
    ...     list(pipe)
    ... except fl.WorkerError as e:
    ...     message = str(e)
    >>> message.startswith("a process worker died"), "on sample 0 (exited with code 3)" in message
    (True, True)
    >>> pipe.close()
    """


class SharedMemoryFull(FeedlineError):
    """Shared memory (``/dev/shm``) has no room for a batch slot or a source array, and neither have the fallbacks.

    Docker gives containers 64 MB of it unless told otherwise; what does not
    fit goes to memory files (Linux) or files in the spill folder
    (``FEEDLINE_SPILL_DIR``) first.
    Raised where the segment is made, before anything is written into it
    (see `feedline.transport._shm`), with the sizes and what to do: give the
    container more (``docker run --shm-size=2g``), set ``FEEDLINE_SPILL_DIR``,
    or lower ``prefetch()``'s depth. It is a `FeedlineError`, so one
    ``except`` clause catches it with feedline's other errors:

    >>> import feedline as fl
    >>> issubclass(fl.SharedMemoryFull, fl.FeedlineError)
    True
    """


class DecodeError(FeedlineError, ValueError):
    """A file could not be decoded (truncated, corrupt, or not of the expected kind).

    Raised by feedline's decoders (images, audio) inside ``map``, so it
    follows ``on_error``; it names the file and the decoder's reason, and
    pickles as ``(path, reason)`` so it travels back from process workers.

    >>> import feedline as fl
    >>> e = fl.DecodeError("clips/0001.wav", "the file ends inside its data chunk")
    >>> print(e)
    cannot decode clips/0001.wav: the file ends inside its data chunk
    >>> e.path, isinstance(e, ValueError)
    ('clips/0001.wav', True)
    """

    def __init__(self, path, reason: str):
        super().__init__(f"cannot decode {path!s}: {reason}")
        self.path, self.reason = path, reason

    def __reduce__(self):
        return (type(self), (self.path, self.reason))
