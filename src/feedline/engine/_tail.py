"""The epoch's last batches split into pieces, so that every worker finishes the epoch at about the same time.

A task is a whole batch, and a batch is indivisible on a worker: with few
tasks left, one worker runs the epoch's last batch while the others idle.
With two workers and an odd count of batches left, one of them idles for a
whole batch at the end of the epoch; on 64 workers, the last wave of an epoch holds up to 63 of them for a
batch. So each of the epoch's last ``workers`` batches runs as up to
`MAX_PIECES` tasks of consecutive rows (``Task.indices`` cut in order),
each given to a worker only once it has nothing to run (``Task.piece``:
queued behind a whole batch, a piece would end one worker's epoch a
batch after the other's), and the consumer joins the pieces
back into the batch (`join`) before it goes out: the batch, its resume
point and its place in the order are those of the whole task.

Only where joining gives exactly the batch one task would have made: rows
collated by the default collate (a custom ``collate`` or a padded batch may
depend on every row), no ``map_batch`` in the worker (it would see half a
batch), one batch a task (not a group of batches, nor a bulk read), an
indexed source, and thread or process workers (a Ray task is a round trip
over the network). And only where it pays: a piece takes at least
``MechanismPolicy.tail_piece_seconds`` of work (the batch's measured time per task so far in
this epoch; the pieces' messages and the join cost a fraction of that), and the
join's copy of the batch costs under `COPY_SHARE` of a task.

The epoch's first batch is cut the same way when no task's time is known
yet (`TailPieces.first_pieces`): one piece for each worker the executor
says is idle (`Executor.idle_workers`: thread workers; process workers
may still be starting). The first batch then comes out once each idle
worker has done its share, not after one worker has done all of it
(beside the others, which share the GIL with it on thread workers).
"""

from __future__ import annotations

import numpy as np

from .._mechanism_policy import current_mechanisms
from .._tree import _Rows, concat_pieces, slice_rows
from ..worker import Result, joins_rows

__all__ = ["COPY_RATE", "COPY_SHARE", "MAX_PIECES", "PiecesDiffer", "TailPieces", "join", "piece_indices"]

MAX_PIECES = 8  # pieces of one batch, at most: the last wave's idle time falls from a batch to an eighth of one
COPY_RATE = 1 << 30  # bytes/s the join makes a batch at: a fresh array is faulted in page by page, the slow case
COPY_SHARE = 0.1  # the join's copy must cost under this share of the task's work


class TailPieces:
    """Which tasks run as pieces, and the pieces of each that have come back."""

    def __init__(self, plan, backend: str):
        part = plan.part
        self.size = part.batch_size
        self.enabled = (joins_rows(part) and not plan.streaming and plan.padder is None
                        and backend in ("thread", "process"))  # (the automatic choice runs as one of them)
        self._waiting: dict[int, tuple] = {}  # task number -> (its pieces' results, None until back; their indices)

    def pieces(self, number: int, tasks: int, workers: int, rows: int, task_seconds: float | None,
               batch_bytes: int | None) -> int:
        """How many tasks task ``number`` of ``tasks`` (``rows`` rows) runs as: 1, or its pieces.

        ``task_seconds``: the time a whole batch takes, from this epoch's
        tasks so far or the last epoch's (None before any came back);
        ``batch_bytes``: bytes of a whole batch (None before the first).
        """
        if not self.enabled or workers < 2 or number < tasks - workers or not task_seconds or not batch_bytes:
            return 1
        if batch_bytes / COPY_RATE > COPY_SHARE * task_seconds:
            return 1  # the join's copy would cost more than the idle time it saves
        work = task_seconds * rows / self.size  # (the epoch's last batch may be short)
        return max(1, min(MAX_PIECES, workers, rows, int(work / current_mechanisms().tail_piece_seconds)))

    def first_pieces(self, rows: int, idle: int) -> int:
        """How many tasks the epoch's first batch (``rows`` rows) runs as, before any task's time is known: 1, or a piece per idle worker.

        With nothing measured, the first batch would run whole on one
        worker while the others start on the batches after it (and, on
        threads, share the GIL with it), so it comes out after a whole
        batch's time or more. Cut over the ``idle`` workers, it comes out
        once they have each done a share of it. Later batches are not cut:
        with the workers busy, pieces would gain nothing.
        """
        if not self.enabled or idle < 2:
            return 1
        return max(1, min(MAX_PIECES, idle, rows))

    def expect(self, number: int, pieces: list) -> None:
        """Task ``number`` went out as tasks of these ``pieces`` (their indices, in order)."""
        self._waiting[number] = ([None] * len(pieces), pieces)

    def add(self, number: int, piece: int, result: Result) -> tuple | None:
        """Piece ``piece`` of task ``number`` is back: ``(results, indices)`` of every piece, in order, once all are."""
        results, indices = self._waiting[number]
        results[piece] = result
        if any(r is None for r in results):
            return None
        del self._waiting[number]
        return results, indices


class PiecesDiffer(Exception):
    """The pieces' batches cannot be joined into exactly what one task makes: the task runs again whole."""


def piece_indices(indices, count: int) -> list:
    """``indices`` cut into ``count`` runs of consecutive rows, as even as can be (the first ones a row longer)."""
    size, extra = divmod(len(indices), count)
    out, start = [], 0
    for j in range(count):
        end = start + size + (1 if j < extra else 0)
        out.append(indices[start:end])
        start = end
    return out


def holds_numpy_scalars_as_rows(node) -> bool:
    """Whether a `concat_pieces` result re-collates a column from NumPy scalars (a piece had stacked it as an array).

    Pieces that held one column as arrays of different dtypes, or as an
    array in one and a list in another, are joined as rows, and an array's
    rows come back as NumPy scalars: Python ints or floats that one collate
    would have kept as they were (an object column) cannot be told apart
    from them any more.
    """
    if isinstance(node, _Rows):
        return any(isinstance(v, np.generic) for v in node)
    if isinstance(node, dict):
        return any(holds_numpy_scalars_as_rows(v) for v in node.values())
    if isinstance(node, (tuple, list)):
        return any(isinstance(v, (dict, tuple, list)) and holds_numpy_scalars_as_rows(v) for v in node)
    return False


def join(results: list, indices: list) -> Result:
    """The result one task would have returned, from its pieces' results (and indices) in order.

    Raises `PiecesDiffer` where joining cannot give exactly that: a
    column held differently in a way that cannot be undone
    (`holds_numpy_scalars_as_rows`), or rows that do not collate together
    or in a piece (the batch runs again whole, so that its error names the
    sample one task's collation names, not the first of a piece that
    differs).

    Otherwise the first piece that failed gives the error (its sample is
    the earliest failing one of the batch, as in one task), with no rows,
    as a one-batch task returns a failure. Rows are concatenated along the
    first axis (`concat_pieces`) and collated again where pieces held a
    column differently (`slice_rows`), which is what the default collate
    makes of all the rows at once. Times and counts are the pieces' sums.
    """
    joined = _summed(results)
    joined.span = (min(r.span[0] for r in results), max(r.span[1] for r in results))
    joined.worker = results[0].worker
    failed = next((r for r in results if r.error is not None), None)
    if any(r.error is not None and r.error.stage == "batch" for r in results):
        raise PiecesDiffer  # a piece's rows did not collate: which sample one task names depends on all the rows
    if failed is not None:
        joined.error = failed.error
        return joined
    total = sum(r.rows for r in results)
    kept = [(r.payload, r.rows, [int(i) for i in ids]) for r, ids in zip(results, indices) if r.rows]
    try:
        whole = concat_pieces([k[0] for k in kept], rows=[k[1] for k in kept], indices=[k[2] for k in kept])
        exact = not holds_numpy_scalars_as_rows(whole)  # (not: small ints stacked in one piece, a big int in another)
        payload = slice_rows(whole, 0, total, rows=total) if exact else None
    except Exception as exc:  # rows that do not stack: one task's collation names the sample
        raise PiecesDiffer from exc
    if not exact:
        raise PiecesDiffer
    joined.payload, joined.rows = payload, total
    return joined


def _summed(results: list) -> Result:
    """A result holding the pieces' summed times, counters, CPU and transport."""
    joined = Result()
    for r in results:
        for stage, seconds in r.times.items():
            joined.times[stage] = joined.times.get(stage, 0.0) + seconds
        for name, n in r.counters.items():
            joined.counters[name] = joined.counters.get(name, 0) + n
        joined.cpu += r.cpu
        joined.cpu_wait += r.cpu_wait
        joined.fresh_pages += r.fresh_pages
        joined.kernel_cpu += r.kernel_cpu
        joined.transport += r.transport
    return joined
