"""What crosses the boundary between the consumer and a worker, as dataclasses.

`Task` goes out, `Result` comes back; a failure travels as a `TaskError`,
built in one place (`TaskError.from_exception` / `TaskError.crash`) and
turned back into an exception in one place (`TaskError.to_exception`).
The process backend's messages (`Hello`, `Ready`, ... below) are the only
shapes its pipe carries; see `feedline.backends.process` for the order.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field

import numpy as np

from .._errors import RemoteTraceback, SampleError, SharedMemoryFull, WorkerError

__all__ = [
    "Done", "Hello", "PartError", "Ready", "Release", "Result", "RunTask", "SendPart", "Stop", "Task", "TaskError",
]


@dataclass
class Task:
    """One unit of work: a run of the epoch's indices, or the next batch of a stream shard."""

    epoch: int
    number: int
    indices: np.ndarray | None = None
    shard: int | None = None
    start: int | None = None  # streaming: raw position to (re)start the shard from
    timed_out: tuple = ()  # indices that ran past map(timeout=...) before: they fail with TimeoutError, unread
    piece: bool = False  # part of a batch (`feedline.engine._tail`): given to a worker only once one has nothing to run


@dataclass
class TaskError:
    """Why a task failed: the sample, where it lives, the stage, and the original exception.

    ``exception`` holds the cloudpickled exception when it can travel (so the
    consumer re-raises the user's own type as the cause); the formatted
    traceback always travels. ``worker_exit`` is set when the worker died
    instead of raising (how it exited), which becomes a `WorkerError`.
    """

    index: object
    where: str | None
    stage: str
    type: str
    message: str
    traceback: str = ""
    exception: bytes | None = None
    worker_exit: str | None = None

    @classmethod
    def from_exception(cls, exc: BaseException, index=None, where=None, stage: str = "worker") -> "TaskError":
        """The record of ``exc`` raised on sample ``index`` in ``stage``."""
        import cloudpickle

        try:
            pickled = cloudpickle.dumps(exc)
        except Exception as pickling_error:  # an exception that cannot travel is described instead
            pickled = None
            exc = RuntimeError(f"{type(exc).__name__}: {exc} (not picklable: {pickling_error})")
        return cls(
            index=index, where=where, stage=stage, type=type(exc).__name__, message=str(exc),
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)), exception=pickled,
        )

    @classmethod
    def crash(cls, message: str, how: str, index=None, where=None, error_type: str = "WorkerError") -> "TaskError":
        """A task given up because its worker kept dying (``how``: the last exit)."""
        return cls(index=index, where=where, stage="worker", type=error_type, message=message, worker_exit=how)

    def to_exception(self) -> BaseException:
        """The exception the consumer raises: `WorkerError` for a crash, `SharedMemoryFull` as it is, else `SampleError` with the cause chained."""
        if self.worker_exit is not None:
            return WorkerError(self.message)
        cause = None
        if self.exception is not None:
            import cloudpickle

            try:
                cause = cloudpickle.loads(self.exception)
            except Exception:  # the exception's class may not exist here; the text still travels
                cause = None
        remote = RemoteTraceback(self.traceback)
        if cause is not None and cause.__cause__ is None:
            cause.__cause__ = remote
        if isinstance(cause, SharedMemoryFull):
            return cause  # the machine's shared memory, not the sample: raised as it is
        sample = f"sample {self.index}" if self.index is not None else "a sample"
        if self.where:
            sample += f" ({self.where})"
        error = SampleError(
            f"{self.stage} failed on {sample}: {self.type}: {self.message}", index=self.index, where=self.where, stage=self.stage,
        )
        error.__cause__ = cause if cause is not None else remote
        return error


@dataclass
class Result:
    """What a worker returns for a task."""

    payload: object = None  # batch tree, piece, list of samples, or `BatchGroup`; None if no rows
    rows: int = 0
    indices: list | None = None  # the rows' sample indices, when filter/skip may drop some (names a sample in a re-cut error)
    skipped: list = field(default_factory=list)  # [(index, reason)]
    times: dict = field(default_factory=dict)  # stage name -> seconds
    error: TaskError | None = None
    exhausted: bool = False  # streaming: the shard has no more samples
    consumed: int = 0  # streaming: raw position after this task
    span: tuple = (0.0, 0.0)  # perf_counter at start and end, in the worker (a system-wide clock)
    worker: int = 0  # which worker ran it (position in the pool; -1: the consumer)
    transport: float = 0.0  # consumer seconds spent receiving and mapping the batch
    cpu: float = 0.0  # CPU seconds the worker thread used on the task
    cpu_wait: float = 0.0  # seconds it was runnable but waiting for a CPU (thread workers on Linux; else 0)
    fresh_pages: int = 0  # minor page faults the worker thread took on the task: memory got fresh from the kernel (Linux)
    kernel_cpu: float = 0.0  # ... and its system CPU seconds, in which the kernel zeroed those pages (Linux)
    counters: dict = field(default_factory=dict)  # the source's counts during the task (Source.take_counters)
    stopped: int | None = None  # stopped after this many samples (`StopHere`): the rows are theirs, the rest runs elsewhere


# ---- the process backend's messages, consumer -> worker
@dataclass
class SendPart:
    """The pickled `WorkerPart`, sent once after `Hello`."""

    data: bytes


@dataclass
class RunTask:
    """A task for a worker, with the shared-memory slots the consumer let go since its last message (as `Release`)."""

    key: tuple
    task: Task
    release: list = field(default_factory=list)
    worker: tuple = (0, 1)  # (its position in the pool, the pool's size now): what get_worker_info() says


@dataclass
class Release:
    """Shared-memory slots the consumer no longer uses."""

    slots: list


@dataclass
class Stop:
    """Finish and exit (a clean shutdown: EOF without it means the consumer died)."""


# ---- worker -> consumer
@dataclass
class Hello:
    worker_id: int
    pid: int
    status_segment: str  # shared-memory word where the worker writes its current task and sample


@dataclass
class Ready:
    """The part was loaded; tasks may come."""


@dataclass
class PartError:
    """The part could not be unpickled here; the traceback says why."""

    traceback: str


@dataclass
class Done:
    key: tuple
    result: Result
    fields: object = None  # where the batch lies in shared memory (`feedline.transport._slots`), or None
