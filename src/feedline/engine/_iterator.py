"""One epoch of a pipeline, from the consumer's side.

The iterator turns the epoch's index list (or stream shards) into tasks,
keeps at most ``depth`` of them outstanding on the executor (the
back-pressure rule: a slow consumer stops new work, never piles up
batches), puts results back in task order, and hands out batches.

Batches in order: results are held in a small reorder buffer keyed by task
number, so the output is the same for any worker count or backend. With
``ordered=False`` results are used as they arrive.

Short tasks (``filter`` or ``on_error="skip"``): rows are carried over and
re-cut into full batches (`feedline.engine._recut`); the batch steps then
run here, in the consumer.

Resumption: every output carries the point just after it (task number and
rows of that task already used, or, for streams, each shard's position),
so ``state()`` is exact at every batch boundary.
"""

from __future__ import annotations

import collections
import sys
import time
import warnings

import numpy as np

from .._errors import FeedlineError, SampleError
from .._switch_interval import short_switch_interval
from .._tree import BatchGroup, flatten, slice_rows
from ..worker import Task
from ._budget import BudgetCut
from ._deal import Deal
from ._packer import Packer
from ._resume_point import ResumePoint, checkpoint, resumed_skips, start_point
from ._row_carry import recut_for, window_for
from ._shares import epoch_order
from ._state import STATE_VERSION
from ._stats import Stats
from ._stream_cursor import StreamCursor
from ._tail import PiecesDiffer, TailPieces, join, piece_indices
from ._task_grid import next_epoch_chunk, start_chunk, task_grid

__all__ = ["EpochIterator", "STATE_VERSION"]


class EpochIterator:
    """Iterates one epoch; made by ``iter(pipe)``, ``pipe.epoch(k)`` or ``pipe.resume(state)``.

    ``it.state()`` is a small JSON-able dict; ``pipe.resume(state)`` returns
    an iterator that continues exactly after the last batch received.

    >>> import numpy as np, feedline as fl
    >>> pipe = fl.from_arrays(np.arange(6)).batch(2)
    >>> it = iter(pipe)
    >>> next(it).tolist()
    [0, 1]
    >>> [b.tolist() for b in pipe.resume(it.state())]
    [[2, 3], [4, 5]]
    """

    def __init__(
        self, runtime, epoch: int, *, fingerprint: str, source_kind: str, state: dict | None = None,
        created: float | None = None, owner=None, parts: list | None = None, shard: dict | None = None,
    ):
        self._created = created if created is not None else time.perf_counter()
        self._owner = owner  # keeps the pipeline (and so its workers) alive while iterating
        self._fingerprint = fingerprint
        self._parts = parts  # [label, digest] of what the fingerprint covers (`Pipeline._parts`)
        self._shard = shard  # this rank of a sharded pipeline, for states that resume on other ranks (`_elastic`)
        self._elastic = (state or {}).get("elastic")  # the global position an epoch resumed from other ranks started at
        self._runtime = runtime
        self._plan = plan = runtime.plan
        self._executor = runtime.executor
        self.epoch = epoch
        self._generation = runtime.begin(self, self._on_superseded)
        self._depth = runtime.depth
        self._size = plan.part.batch_size
        self._ordered = plan.ordered
        self._unbatched = self._size is None
        self._init_consumer(state)
        self._init_stats(source_kind, state)
        self._point = start_point(plan, state)
        start_task, self._skip_rows = self._point.task, self._point.offset
        if plan.streaming:
            self._init_streams(state)
        else:
            self._init_tasks(state, start_task)
        self._next_submit = self._next_take = self._first_task = start_task

    def _init_consumer(self, state) -> None:
        """What the consumer side holds: finished tasks, batches cut and not handed out, the rows carried between tasks."""
        plan = self._plan
        self._done: dict[int, object] = {}
        self._out: collections.deque = collections.deque()  # (item, resume point, rows)
        self._last_rows = 0
        self._batch_bytes = None  # bytes of one whole batch, from the first (sizes tasks of several batches)
        # A collate that passes whole batches through (a Keras Sequence's) counts the samples in each.
        self._rows_of = getattr(plan.part.collate, "rows_of", None)
        self._recut = None if plan.part.aligned or self._unbatched or plan.window else recut_for(plan, state, self.epoch)
        self._shuffler = window_for(plan, self.epoch, state)  # shuffle(window=N): rows of a stream shuffled here
        self._window_done = False
        self._tail = TailPieces(plan, self._runtime.backend)  # the epoch's last batches as pieces (`engine/_tail.py`)
        self._in_flight = 0  # tasks out (a task sent as pieces counts once)
        self._pieced: set[int] = set()  # tasks joined from pieces, not yet taken
        self._rows_done = 0  # rows of the tasks (and pieces) back so far: with stats_.task_seconds, the time a row takes
        self._finished = False
        self._superseded = False
        self._error = None

    def _init_stats(self, source_kind: str, state) -> None:
        """The epoch's `Stats`, published at once; a resumed epoch starts from the batches and skips of its state."""
        runtime = self._runtime
        self.stats_ = Stats(runtime.backend, runtime.workers, self._depth, runtime.decision, runtime.cores)
        self.stats_.epoch = self.epoch
        self.stats_.source_kind = source_kind
        runtime.publish(self.stats_)
        if state is not None:
            self.stats_.skipped = resumed_skips(state)
            self.stats_.batches = state.get("batches", 0)
        # (task number, index, reason) of every skip; a checkpoint keeps only those
        # of tasks before its position, because resuming re-runs the rest.
        self._skip_log = [(-1, i, r) for i, r in self.stats_.skipped]
        self._restarts_at_start = self._executor.restarts

    def _init_tasks(self, state, start_task: int) -> None:
        """An indexed epoch: its order and task grid; the source reads ahead from the first task to run."""
        plan, runtime = self._plan, self._runtime
        self._order = epoch_order(plan, self.epoch, self._elastic)
        chunk = start_chunk(plan, state, runtime.learned_chunk)
        self._step, self._num_tasks, self._covered = task_grid(plan, len(self._order), chunk)
        runtime.tuner.task_batches = max(1, self._step // self._size) if plan.groups_batches else 1
        plan.part.source.read_ahead(self._order[start_task * self._step:])  # e.g. a remote store fetches these files, in order

    # ------------------------------------------------------------ streams
    def _init_streams(self, state) -> None:
        """A generator source's epoch: its shards, where each stands, the next to read (`StreamCursor`)."""
        self._streams = StreamCursor(self._plan.epoch_shards(self.epoch), (state or {}).get("streams"))
        self._num_tasks = None

    # -------------------------------------------------------------- tasks
    def _window_full(self) -> bool:
        # Ordered: tasks not yet handed to the consumer (running, or finished and
        # waiting behind an earlier one) are bounded, so the reorder buffer is too.
        if self._ordered:
            return self._next_submit - self._next_take >= self._depth
        return self._in_flight >= self._depth

    def _submit_more(self) -> None:
        while not self._window_full() and not self._error:
            number = self._next_submit
            if self._plan.streaming:
                picked = self._streams.next_task(number)
                if picked is None:
                    return
                shard, start = picked
                task = Task(self.epoch, number, shard=shard, start=start)
                self._executor.submit((self._generation, number), task, self._streams.slot(shard))
            else:
                if number >= self._num_tasks:
                    return
                step = self._step
                indices = self._order[number * step : min((number + 1) * step, self._covered)]
                if not self._submit_pieces(number, indices):
                    self._executor.submit((self._generation, number), Task(self.epoch, number, indices=indices), None)
            self._next_submit += 1
            self._in_flight += 1

    def _submit_pieces(self, number: int, indices) -> bool:
        """Send task ``number`` as pieces: the epoch's first while nothing is measured, or one of its last where it pays (`engine/_tail.py`)."""
        if not self._tail.enabled or self._step != self._size:
            return False
        # A batch's time from this epoch's tasks so far, else from the last epoch's (a window as deep as the
        # epoch sends every task before any is back)
        per_row = self.stats_.task_seconds / self._rows_done if self._rows_done else self._runtime.row_seconds
        seconds = per_row * self._size if per_row else None
        batch_bytes = self._batch_bytes or self._runtime.tuner.batch_bytes  # (the depth tuner's, from the first batch)
        count = (self._tail.first_pieces(len(indices), self._executor.idle_workers()) if number == self._first_task
                 and not seconds else self._tail.pieces(number, self._num_tasks, self._runtime.workers, len(indices),
                                                        seconds, batch_bytes))
        if count < 2:
            return False
        pieces = piece_indices(indices, count)
        self._tail.expect(number, pieces)
        for j, rows in enumerate(pieces):
            self._executor.submit((self._generation, number, j), Task(self.epoch, number, indices=rows, piece=True), None)
        return True

    def _collect(self) -> None:
        events = self._executor.wait(None)
        for event in events:
            number, result = event.key[1], event.result
            if len(event.key) > 2:  # a piece of a task (`_submit_pieces`): counted now, the task once all are back
                self._count(number, result)
                back = self._tail.add(number, event.key[2], result)
                if back is None:
                    continue
                try:
                    result = join(*back)
                except PiecesDiffer:  # run whole: the batch one task makes (the pieces' work and its own both counted)
                    self._executor.submit((self._generation, number), Task(self.epoch, number, indices=np.concatenate(back[1])), None)
                    continue
                self._pieced.add(number)
            self._in_flight -= 1
            self._done[number] = result
        if self._ordered:
            while self._next_take in self._done:
                self._take(self._next_take, self._done.pop(self._next_take))
                self._next_take += 1
        else:
            for number in sorted(self._done):
                self._take(number, self._done.pop(number))

    # ---------------------------------------------------------- assembly
    def _count(self, number: int, result) -> None:
        """Add a task's (or a piece's) times, span and counts to the epoch's stats."""
        self.stats_.add_result(result)
        self.stats_.add_span(result, number)
        self.stats_.add_counts(result.counters)
        self._rows_done += result.rows

    def _take(self, number: int, result) -> None:
        """Use task ``number``'s result (in task order, when ordered): count it, then queue what it delivers."""
        if number in self._pieced:
            self._pieced.discard(number)  # its pieces were counted as they came back
        else:
            self._count(number, result)
        self.stats_.add_counts(self._plan.part.source.take_counters())  # the consumer's own (a remote store's read-ahead)
        self._skip_log.extend((number, index, reason) for index, reason in result.skipped)
        if result.error is not None:
            self._take_failed(number, result)
        elif self._plan.streaming:
            self._take_stream(number, result)
        else:
            self._take_indexed(number, result)

    def _take_failed(self, number: int, result) -> None:
        """A task that failed: its error is queued in order, after the whole batches it made before the failure."""
        if isinstance(result.payload, BatchGroup):  # the whole batches before the failure come first
            payload, rows, _, skip = self._undelivered(result)
            self._emit_whole_batches(payload, rows, number, skip, finished=False)
        self._error = result.error
        self._out.append((_ERROR, result.error, 0))

    def _take_stream(self, number: int, result) -> None:
        """A generator task: its shard advances; its rows go through the window, the re-cut, or out as they are."""
        # Inside an unbatched task, the point is "this task again, from its start, minus `offset` items".
        before, after = self._streams.advance(number, result.consumed, result.exhausted)
        point = ResumePoint(number + 1, 0, after)
        if self._shuffler is not None:
            self._window_rows(result, number, before)
        elif self._recut is not None:  # batched: rows are re-cut across shards, so only the epoch's last batch is short
            self._recut_rows(result, number, before, point.streams)
        elif result.rows:
            self._emit_rows(result, point, number, before)

    def _take_indexed(self, number: int, result) -> None:
        """An indexed task: its items, its whole batches, or its rows for the re-cut, less those delivered before a resume."""
        payload, rows, indices, skip = self._undelivered(result)
        if self._unbatched:
            for j, item in enumerate(payload or []):
                last = j == len(payload) - 1
                self._out.append((item, ResumePoint(number + 1) if last else ResumePoint(number, skip + j + 1), 1))
            return
        if self._plan.part.aligned:
            if rows:
                self._emit_whole_batches(payload, rows, number, skip)
            return
        if rows:
            self._recut.add(payload, rows, number, result.rows, indices)
        self._cut(final=False)

    def _undelivered(self, result, cut=slice_rows):
        """``(payload, rows, indices, skip)`` of a result, less the ``skip`` rows a resumed first task already delivered."""
        payload, rows, indices = result.payload, result.rows, result.indices
        skip, self._skip_rows = self._skip_rows, 0
        if skip and rows:
            if isinstance(payload, BatchGroup):  # a resumed task of several batches: the offset is whole batches
                payload = BatchGroup(payload.batches[skip // self._size :])
            else:
                payload = payload[skip:] if self._unbatched else cut(payload, skip, rows, rows=rows)
            indices = indices[skip:] if indices is not None else None
            rows -= skip
        return payload, rows, indices, skip

    def _emit_whole_batches(self, payload, rows: int, number: int, skip: int, finished: bool = True) -> None:
        """Queue the batches of an aligned task: one, or several (`BatchGroup`, or rows read in bulk) cut apart here.

        Each batch's resume point is just after it: the next task once the
        task's last batch is out (``finished``), else this task again, past
        the rows delivered so far (``skip``: those delivered before a resume).
        """
        size = self._size
        group = payload.batches if isinstance(payload, BatchGroup) else None
        if self._batch_bytes is None:
            self._batch_bytes = _batch_bytes(group[0] if group else payload, min(rows, size) if group else rows, size)
        if group is None and rows <= size:
            point = ResumePoint(number + 1) if finished else ResumePoint(number, skip + rows)
            self._out.append((payload, point, rows))
            return
        for j, start in enumerate(range(0, rows, size)):
            end = min(rows, start + size)
            batch = group[j] if group is not None else slice_rows(payload, start, end, rows=rows)
            point = ResumePoint(number + 1) if finished and end == rows else ResumePoint(number, skip + end)
            self._out.append((batch, point, end - start))

    def _recut_rows(self, result, number: int, before: dict, after: dict) -> None:
        """A generator task's rows join the re-cut; a resumed first task drops the rows already delivered."""
        payload, rows, indices, _ = self._undelivered(result, self._recut.slice)
        if rows:
            self._recut.add(payload, rows, number, result.rows, indices, before=before, after=after)
        self._cut(final=False)

    def _window_rows(self, result, number: int, before: dict) -> None:
        """A generator task's rows go through the shuffle window; a resumed first task drops the rows already read."""
        payload, rows, indices, skip = self._undelivered(result)
        if rows:
            self._window_call(self._shuffler.add, payload, rows, indices, number, before, self._unbatched, dropped=skip)

    def _window_call(self, method, *args, **kwargs) -> None:
        """Run the window, timed; queue what it cuts, or its error (rows that do not batch together) in order."""
        t0 = time.perf_counter()
        try:
            cut = method(*args, **kwargs)
        except SampleError as exc:
            self._error = exc
            self._out.append((_ERROR, exc, 0))
            return
        finally:
            self.stats_.consumer_seconds["shuffle window"] += time.perf_counter() - t0
        for item, point, rows in cut:
            self._out.append((item if self._unbatched else self._consumer_batch_steps(item), point, rows))

    def _cut(self, final: bool) -> None:
        try:
            cut = self._recut.cut(final)
        except SampleError as exc:  # rows that do not fit the rows before them: raised at that batch, in order
            self._error = exc
            self._out.append((_ERROR, exc, 0))
            return
        for batch, point, rows in cut:
            self._out.append((self._consumer_batch_steps(batch), point, rows))

    def _emit_rows(self, result, point, number: int, before: dict) -> None:
        if self._unbatched:
            skip, self._skip_rows = self._skip_rows, 0  # items of a resumed task already delivered
            items = result.payload[skip:]
            for j, item in enumerate(items):
                last = j == len(items) - 1
                self._out.append((item, point if last else ResumePoint(number, skip + j + 1, before), 1))
        else:
            self._out.append((result.payload, point, result.rows))

    def _consumer_batch_steps(self, batch):
        for op in self._plan.consumer_batch_ops:
            t0 = time.perf_counter()
            batch = op.fn(batch)
            self.stats_.consumer_seconds[op.name] += time.perf_counter() - t0
        return batch

    # ----------------------------------------------------------- protocol
    def __iter__(self):
        return self

    def __next__(self):
        if self._superseded:
            raise FeedlineError(
                f"this iterator (epoch {self.epoch}) was superseded: a newer iter(pipe), pipe.epoch() or "
                "pipe.resume() started on the same pipeline. Iterate one epoch at a time, or build a "
                "second pipeline for a second concurrent stream."
            )
        if self._finished:
            raise StopIteration
        if self._runtime.closed:
            raise FeedlineError(
                f"this iterator (epoch {self.epoch}) belongs to a pipeline that was closed; "
                "start a new epoch with iter(pipe), which starts fresh workers"
            )
        now = time.perf_counter()
        if self.stats_.started_at is None:
            self.stats_.begin(now)
        self.stats_.inflight_total += self._in_flight
        blocked = self._window_full() and self._in_flight < self._runtime.workers
        self._waited = False
        self._runtime.consumer_inside = True
        try:
            item = self._next_item()
        except StopIteration:
            self._finish()
            raise
        except KeyboardInterrupt:
            # Ctrl-C: stop the workers now; iterating again starts fresh ones.
            self._abort()
            self._runtime.close()
            raise
        except BaseException:
            self._abort()
            raise
        finally:
            self._runtime.consumer_inside = False
            self._runtime.consumer_left = time.perf_counter()
        after = time.perf_counter()
        stats = self.stats_
        stats.wait_seconds += after - now
        stats.lap(after)  # (the wall time since the first next(), the full collections meanwhile)
        if stats.first_batch_seconds is None:
            stats.first_batch_seconds = after - self._created  # from iter(): includes starting workers
        stats.batches += 1
        rows = self._last_rows if self._rows_of is None else self._rows_of(item)
        stats.samples += rows
        stats.waits.append((now, after, rows))
        decision = self._runtime.tuner.observe(self._waited, blocked, item, stats)
        if decision is not None:
            self._runtime.set_depth(self._runtime.tuner.depth)
            self._depth = self._runtime.depth
            stats.depth = self._depth
            stats.decisions.append(decision)
        decision = self._runtime.observe_workers(stats)
        if decision is not None:  # more workers (they wait on I/O): a deeper window for them
            self._depth = stats.depth = self._runtime.depth
            stats.workers = self._runtime.workers
            stats.decisions.append(decision)
        return item

    def _next_item(self):
        while True:
            if self._out:
                item, point, self._last_rows = self._out.popleft()
                if item is _ERROR:
                    raise point if isinstance(point, BaseException) else point.to_exception()
                self._point = point
                return item
            self._submit_more()
            if self._in_flight == 0:
                # Nothing running and nothing left to submit: every result is taken.
                if self._shuffler is not None and not self._window_done and not self._error:
                    self._window_done = True
                    self._window_call(self._shuffler.finish)
                    if self._out:
                        continue
                if self._recut is not None and self._recut.rows:
                    self._cut(final=True)
                    if self._out:
                        continue
                raise StopIteration
            self._waited = True
            if self._executor.workers_elsewhere:
                with short_switch_interval():  # beside busy Python threads, a batch back waits a tenth of the default switch interval for us
                    self._collect()
            else:
                self._collect()

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        self._warn_skipped()
        self._refresh()
        if self._rows_done:
            self._runtime.row_seconds = self.stats_.task_seconds / self._rows_done
        count = 0 if self._plan.streaming else len(self._order)
        self._runtime.learned_chunk = next_epoch_chunk(self._plan, self._runtime, self.stats_, count, self._batch_bytes)
        self._runtime.publish(self.stats_)

    def _warn_skipped(self) -> None:
        """Warn, at the user's line, of the samples ``on_error="skip"`` skipped this epoch."""
        skipped = self.stats_.skipped
        if not skipped:
            return
        shown = ", ".join(str(i) for i, _ in skipped[:10])
        warnings.warn(
            f"feedline skipped {len(skipped)} samples in epoch {self.epoch} "
            f"(on_error='skip'): {shown}{' ...' if len(skipped) > 10 else ''}. "
            "See it.stats() for the reasons.",
            RuntimeWarning,
            stacklevel=_user_stacklevel(),
        )

    def _abort(self, _finalizing=sys.is_finalizing) -> None:
        self._finished = True
        if _finalizing():  # the interpreter is ending (a generator closed at exit): its modules may be gone, its workers go with it
            return
        self._executor.cancel(self._generation)
        self._let_go()
        self._runtime.publish(self.stats_)

    def _on_superseded(self) -> None:
        if not self._finished:
            self._superseded = True
            self._executor.cancel(self._generation)
            self._let_go()

    def _let_go(self) -> None:
        """Drop the results a left epoch holds and nobody will take: their batches' slots go back to the workers now.

        The iterator may live on (closed or superseded, and still referenced); what it kept
        (finished tasks behind the reorder buffer, batches cut and not handed out, rows carried
        to the next batch) would hold a process worker's slots, or a thread's reused arrays,
        until it is collected. Its counters are read first; ``state()`` needs none of it.
        """
        self._refresh()
        self._done.clear()
        self._out.clear()
        self._pieced.clear()
        self._in_flight = 0
        self._tail = TailPieces(self._plan, self._runtime.backend)
        self._recut = self._shuffler = None

    def close(self) -> None:
        """Stop this epoch early; outstanding work is cancelled (workers stay up)."""
        if self._finished:
            return
        if self._superseded:  # cancelled and let go then: ``pipe.stats()`` stays the newer epoch's
            self._finished = True
            return
        self._abort()

    def __del__(self):
        try:
            if not self._finished and not self._superseded:
                self._executor.cancel(self._generation)
        except Exception:  # interpreter shutdown: nothing left to cancel
            return

    # ----------------------------------------------------- state and stats
    @property
    def finished(self) -> bool:
        """Whether this epoch ended (its last batch taken, an error, or ``close()``)."""
        return self._finished

    def state(self) -> dict:
        """Where this epoch stands, as a small JSON-serialisable dict.

        ``pipe.resume(state)`` continues right after the last batch this
        iterator returned, with the same batches the uninterrupted run
        would have produced. ``"seeds"`` are the pipeline's shuffle seeds
        (so that resume can say when only they differ); ``"digest"``
        covers every other field, so that resume refuses an edited or
        damaged state (see `feedline.engine._state`).
        """
        if not self._ordered:
            raise FeedlineError("state() needs ordered output; remove ordered=False from map() to checkpoint mid-epoch")
        plan = self._plan
        indexed = not plan.streaming
        return checkpoint(
            plan, self._point, epoch=self.epoch, batches=self.stats_.batches, skip_log=self._skip_log,
            fingerprint=self._fingerprint, parts=self._parts,
            chunk=self._step if indexed and self._step != self._size else None,  # where a task is not one batch
            shard=self._shard_field() if self._shard is not None and indexed else None, elastic=self._elastic,
        )

    def _shard_field(self) -> dict:
        """This rank and, where positions are samples (aligned tasks), how many of its share it delivered."""
        if not self._plan.part.aligned:
            return dict(self._shard)
        task, offset = self._point.task, self._point.offset
        taken = len(self._order) if task >= self._num_tasks else min(self._covered, task * self._step) + offset
        return dict(self._shard, taken=taken)

    def stats(self) -> Stats:
        """Counters for this epoch so far (see `feedline.Stats`)."""
        self._refresh()
        return self.stats_

    def _refresh(self) -> None:
        """Counters the executor keeps: restarts, and the backend the automatic choice settled on."""
        stats, runtime = self.stats_, self._runtime
        stats.worker_restarts = self._executor.restarts - self._restarts_at_start
        stats.backend, stats.decision, stats.trial = runtime.backend, runtime.decision, runtime.trial
        if self._shuffler is not None:
            stats.window_peak = self._shuffler.peak
        if isinstance(self._recut, (Packer, BudgetCut, Deal)):
            stats.packed = self._recut.packs
            stats.items, stats.item_slots = self._recut.fill.items, self._recut.fill.slots
        if isinstance(self._recut, Deal):
            stats.dropped_batches, stats.dropped_samples = self._recut.dropped_batches, self._recut.dropped_rows
            stats.padded_batches = self._recut.padded_batches


_ERROR = object()


def _batch_bytes(batch, rows: int, size: int) -> int:
    """Bytes of the arrays of a whole batch of ``size`` rows, from ``batch`` of ``rows`` rows."""
    arrays = flatten(batch)[1] if rows else []
    return int(sum(a.nbytes for a in arrays if isinstance(a, np.ndarray)) * size / max(1, rows))


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside feedline."""
    import os
    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level
