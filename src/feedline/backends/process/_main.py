"""Entry point of a process worker: forked from the fork server (`run`), or a fresh interpreter (`main`).

Started by `_workers.start_process`: on Linux and macOS the fork server
(or its zygote) forks a child that calls `run(boot)`, never a fork of the
training process; on Windows or with ``FEEDLINE_FORKSERVER=0`` a fresh
``python -c "from feedline.backends.process._main import main; main()"``
reads its bootstrap record on stdin. It does not import the parent's
``__main__``, so a script without an ``if __name__ == "__main__"`` guard is
not re-run, and user functions arrive by value through cloudpickle.

Messages are the dataclasses of `feedline.worker._protocol`: the worker
sends `Hello`, receives `SendPart` and answers `Ready` (or `PartError`),
then receives `RunTask` / `Release` and answers each task with `Done`,
until `Stop`. A task whose generation the consumer marked cancelled (a
word in the status segment) stops before its next sample and is answered
with an empty `Done`.

The worker ignores SIGINT (the consumer decides when workers stop) and
exits when the consumer goes away: either its connection reaches EOF or,
while a long task runs, a watchdog thread sees the parent gone; it then
unlinks every segment name it still owns, so a killed consumer leaks
nothing.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import threading
import time
import traceback

from ..._blas_limit import USER_BLAS_VARS
from .._base import loading_pipeline, mark_worker

# Thread pools of native libraries, set to one thread per worker unless the user set them:
# N workers each starting N threads oversubscribe the cores.
BLAS_VARS = USER_BLAS_VARS + ("NUMEXPR_NUM_THREADS", "OPENCV_FOR_THREADS_NUM")
# TensorFlow's intra-op pool (a thread per core, read when TensorFlow runs its first op) for ops a map function
# runs, a Keras Sequence's on the TensorFlow backend too: one thread per worker, for the same reason.
# Its inter-op pool is left as it is: it was no faster with one.
TF_POOL_VARS = ("TF_NUM_INTRAOP_THREADS",)


# int64 words of a worker's status segment: task number, sample index, sample start (ns), and the newest
# generation the consumer cancelled (written by the consumer: the worker stops such a task at its next sample) ...
STATUS_WORDS = 4
CANCELLED_WORD = 3
RING_WORDS = 64  # ... then the words of its `ReleaseRing`: slots the consumer hands back


def status_ring(buffer):
    """The `ReleaseRing` over a worker's status segment (``buffer``), as the worker and the consumer both see it."""
    from ...transport._slots import ReleaseRing

    return ReleaseRing(memoryview(buffer).cast("q")[STATUS_WORDS : STATUS_WORDS + RING_WORDS])


def _parent_alive(parent_pid: int) -> bool:
    if sys.platform == "win32":
        from ..._winproc import windows_process_alive  # Windows only

        return windows_process_alive(parent_pid)
    return os.getppid() == parent_pid


def _running(pid: int) -> bool:
    """True while process ``pid`` exists and is not a zombie (Linux: /proc; elsewhere: kill 0)."""
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def main() -> None:
    """Entry point of a fresh interpreter: the boot record comes on stdin."""
    boot = pickle.load(sys.stdin.buffer)
    sys.stdin.close()
    run(boot)


def _settle(boot: dict) -> None:
    """Before anything is imported: SIGINT ignored, the consumer's import path, and (forked) its directory and environment."""
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.path[:] = boot["sys_path"]
    if "cwd" in boot:
        os.chdir(boot["cwd"])
        os.environ.clear()
        os.environ.update(boot["env"])
    mark_worker()  # user code that describes a pipeline here starts no fork server ahead of time


def _publish(writer, result, part):
    """Place a finished task's batch in a shared-memory slot: the fields `Done` names it by, or None (it is pickled)."""
    if result.payload is not None and part.batch_size is not None:
        fields = writer.publish(result.payload)  # None: not for shared memory, pickled instead
        if fields is not None:
            result.payload = None
        return fields
    writer.publish(None)  # nothing to place: the slots the task took are free again
    return None


def run(boot: dict) -> None:
    """Serve tasks until told to stop or the consumer is gone.

    ``boot["parent_pid"]`` is this process's parent: the consumer, or the
    fork server (`_forkserver`), which exits when the consumer does.
    A forked worker also gets the consumer's current directory and
    environment, which a fresh interpreter inherits by itself.
    """
    _settle(boot)

    from multiprocessing.connection import Client

    import cloudpickle
    import numpy as np

    from ..._cpu_wait import CpuWaitClock
    from ...transport import _transfer
    from ...transport._shm import Segment, sweep, unlink
    from ...transport._slots import SlotWriter
    from ...worker import Cancelled, Result, TaskError, run_task
    from ...worker._protocol import Done, Hello, PartError, Ready, Release, RunTask, SendPart, Stop
    from ...worker._wire import decode, encode

    wid, parent_pid, prefix = boot["worker_id"], boot["parent_pid"], boot["prefix"]
    consumer_pid = boot.get("consumer_pid", parent_pid)
    # SIGTERM waits until our names exist and the handler that removes them is in place.
    posix_term = hasattr(signal, "pthread_sigmask") and hasattr(signal, "SIGTERM")
    if posix_term:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    # Status words: [task number, sample index (-1: none), monotonic_ns when that sample began, cancelled through], then the ring.
    status_seg = Segment.create(f"{prefix}w{wid}_status", (STATUS_WORDS + RING_WORDS) * 8)
    status = np.ndarray((STATUS_WORDS,), np.int64, buffer=status_seg.buf)
    status[:] = -1
    writer = SlotWriter(f"{prefix}w{wid}_", returned=status_ring(status_seg.buf))
    waits = CpuWaitClock()  # runnable but waiting for a CPU, per task (the report: other programs hold the cores)

    def cleanup(parent_gone: bool) -> None:
        writer.close()
        unlink(status_seg.name)
        if parent_gone and consumer_pid != parent_pid and _running(consumer_pid):
            parent_gone = False  # only the fork server died: the consumer still owns its names
        if parent_gone:
            # The consumer cannot clean up any more: remove every name it owned
            # (its shared arrays, slots other workers had not handed over).
            for name in _transfer.attached_names():
                unlink(name)
            sweep(prefix)

    def consumer_alive() -> bool:
        if consumer_pid == parent_pid:
            return _parent_alive(parent_pid)
        # Forked by the fork server or a zygote: they follow the consumer out, but only after
        # it is gone, and late on a busy machine. Its names are ours to remove once it is gone.
        return _running(consumer_pid)

    def consumer_gone() -> bool:
        # A dying process closes its files before it becomes a zombie and its children
        # are re-parented, so EOF can arrive while it still seems alive: wait to be sure.
        deadline = time.monotonic() + 1.0
        while consumer_alive():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def watchdog() -> None:
        while True:
            time.sleep(0.2)
            if not _parent_alive(parent_pid):
                cleanup(parent_gone=True)
                os._exit(0)

    threading.Thread(target=watchdog, name="feedline-watchdog", daemon=True).start()

    def terminated(signum, frame) -> None:
        # close() terminates workers that are still starting, and the consumer may
        # die before its sweep: remove our own names first, then die of the signal.
        cleanup(parent_gone=False)
        # A slot created just before the signal may not be recorded by the writer
        # yet (CI caught one left): every name under our own prefix goes (Linux).
        sweep(writer.prefix)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    if posix_term:
        signal.signal(signal.SIGTERM, terminated)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})

    def send(message) -> None:
        conn.send_bytes(encode(message))

    words = memoryview(status_seg.buf).cast("q")  # the same words as ``status``; item writes cost less than NumPy's

    generation = [-1]  # of the task running now: it stops once the consumer cancelled that generation

    def progress(index) -> None:
        # The sample a death is blamed on. Called per sample: keep it cheap.
        if words[CANCELLED_WORD] >= generation[0]:
            raise Cancelled
        words[1] = index if isinstance(index, int) else -1

    def timed_progress(index) -> None:
        # map(timeout=...): the start time is written before the index, so a reader that sees the
        # same time before and after reading the index never pairs a new index with an old time.
        if words[CANCELLED_WORD] >= generation[0]:
            raise Cancelled
        words[2] = time.monotonic_ns()
        words[1] = index if isinstance(index, int) else -1

    try:
        conn = Client(boot["address"], authkey=boot["authkey"])
        send(Hello(wid, os.getpid(), status_seg.name))
    except (OSError, EOFError):  # the consumer closed (or died) before we were up
        cleanup(parent_gone=consumer_gone())
        return
    part, streams = None, {}
    try:
        while True:
            try:
                message = decode(conn.recv_bytes())
            except (EOFError, OSError):
                # A clean shutdown sends Stop first, so EOF means the consumer died.
                cleanup(parent_gone=consumer_gone())
                return
            if isinstance(message, RunTask):
                key, task = message.key, message.task
                if message.release:
                    writer.release(message.release)
                status[0] = task.number
                generation[0] = key[0]
                try:
                    if words[CANCELLED_WORD] >= key[0]:
                        raise Cancelled  # queued behind the sample it was on when its epoch was left: not begun at all
                    result = run_task(part, task, writer.alloc, progress if part.timeout is None else timed_progress, streams,
                                      waits, own_process=True, worker=(*message.worker, "process"))
                except Cancelled:  # nobody will read it: an empty answer frees its place in the consumer's window
                    result = Result()
                except BaseException as exc:  # reported to the consumer, never swallowed
                    result = Result(error=TaskError.from_exception(exc))
                status[1] = -1
                fields = _publish(writer, result, part)
                try:
                    send(Done(key, result, fields))
                except (OSError, EOFError):  # the consumer is gone
                    cleanup(parent_gone=consumer_gone())
                    return
            elif isinstance(message, Release):
                writer.release(message.slots)
            elif isinstance(message, SendPart):
                try:
                    with loading_pipeline():  # a module that iterates a pipeline when imported is refused (`check_not_loading`)
                        part = cloudpickle.loads(message.data)
                except BaseException:
                    send(PartError(traceback.format_exc()))
                    continue
                send(Ready())
            elif isinstance(message, Stop):
                break
    finally:
        cleanup(parent_gone=False)
        conn.close()


if __name__ == "__main__":
    main()
