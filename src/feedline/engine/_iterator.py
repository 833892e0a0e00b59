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
from ._buckets import Buckets
from ._budget import BudgetCut
from ._packer import Packer
from ._recut import Recut
from ._state import MAX_TASK_BYTES, OLD_CHUNK, STATE_VERSION, cache_share, measured_chunk, seal, task_grid
from ._stats import Stats
from ._tail import TailPieces, join, piece_indices
from ._window import WindowShuffle

__all__ = ["EpochIterator", "STATE_VERSION"]


class EpochIterator:
    """Iterates one epoch; made by ``iter(pipe)``, ``pipe.epoch(k)`` or ``pipe.resume(state)``."""

    def __init__(
        self, runtime, epoch: int, *, fingerprint: str, source_kind: str, state: dict | None = None,
        created: float | None = None, owner=None, parts: list | None = None,
    ):
        self._created = created if created is not None else time.perf_counter()
        self._owner = owner  # keeps the pipeline (and so its workers) alive while iterating
        self._fingerprint = fingerprint
        self._parts = parts  # [label, digest] of what the fingerprint covers (`Pipeline._parts`)
        self._runtime = runtime
        self._plan = plan = runtime.plan
        self._executor = runtime.executor
        self.epoch = epoch
        self._generation = runtime.begin(self, self._on_superseded)
        self._depth = runtime.depth
        self._size = plan.part.batch_size
        self._ordered = plan.ordered
        self._unbatched = self._size is None
        self._done: dict[int, object] = {}
        self._out: collections.deque = collections.deque()  # (item, resume point, rows)
        self._last_rows = 0
        self._batch_bytes = None  # bytes of one whole batch, from the first (sizes tasks of several batches)
        # A collate that passes whole batches through (a Keras Sequence's) counts the samples in each.
        self._rows_of = getattr(plan.part.collate, "rows_of", None)
        self._recut = None if plan.part.aligned or self._unbatched or plan.window else _recut_for(plan, state)
        self._shuffler = _window_for(plan, epoch, state)  # shuffle(window=N): rows of a stream shuffled here
        self._window_done = False
        self._tail = TailPieces(plan, runtime.backend)  # the epoch's last batches as pieces (`engine/_tail.py`)
        self._in_flight = 0  # tasks out (a task sent as pieces counts once)
        self._pieced: set[int] = set()  # tasks joined from pieces, not yet taken
        self._rows_done = 0  # rows of the tasks (and pieces) back so far: with stats_.task_seconds, the time a row takes
        self._finished = False
        self._superseded = False
        self._error = None
        self.stats_ = Stats(runtime.backend, runtime.workers, self._depth, runtime.decision, runtime.cores)
        self.stats_.epoch = epoch
        self.stats_.source_kind = source_kind
        runtime.publish(self.stats_)
        self._started = None
        start_task, self._skip_rows = 0, 0
        if state is not None:
            start_task, self._skip_rows = state["task"], state["offset"]
            self.stats_.skipped = [(_index_from_json(i), r) for i, r in state.get("skipped", [])]
            self.stats_.batches = state.get("batches", 0)
        # (task number, index, reason) of every skip; a checkpoint keeps only those
        # of tasks before its position, because resuming re-runs the rest.
        self._skip_log = [(-1, i, r) for i, r in self.stats_.skipped]
        self._restarts_at_start = self._executor.restarts
        self._point = {"task": start_task, "offset": self._skip_rows}
        if state is not None and plan.streaming:
            self._point["streams"] = state["streams"]
        if state is not None and "buckets" in state:
            self._point["buckets"] = state["buckets"]
        if plan.pack is not None:  # pack(): the items the rows hold (none yet at the start)
            self._point["pack"] = state["pack"] if state is not None else {"first": 0, "next": 0, "open": [], "pending": []}
        if plan.window is not None:  # shuffle(window=N): rows delivered and the oldest row held (none yet at the start)
            self._point["window"] = state["window"] if state is not None else {"delivered": 0, "first": 0}
        if plan.streaming:
            self._init_streams(state)
        else:
            self._order = plan.epoch_indices(epoch)
            count = len(self._order)
            # A checkpoint names its task grid (older ones: 64 samples a task, unbatched; a batch a task, batched).
            chunk = None
            if state is not None:
                chunk = state.get("chunk", OLD_CHUNK) if self._unbatched else state.get("chunk")
            elif self._unbatched or plan.groups_batches:
                chunk = runtime.learned_chunk  # measured on the last epoch (None on the first)
            self._step, self._num_tasks, self._covered = task_grid(plan, count, chunk)
            runtime.tuner.task_batches = max(1, self._step // self._size) if plan.groups_batches else 1
            plan.part.source.read_ahead(self._order[start_task * self._step:])  # e.g. a remote store fetches these files, in order
        self._next_submit = self._next_take = start_task

    # ------------------------------------------------------------ streams
    def _init_streams(self, state):
        self._shards = self._plan.epoch_shards(self.epoch)
        streams = (state or {}).get("streams", {})
        self._exhausted = set(streams.get("exhausted", []))
        self._positions = {int(k): v for k, v in streams.get("positions", {}).items()}
        self._cursor = streams.get("cursor", 0)  # position in self._shards of the next shard to dispatch
        # Every shard's first task in this iterator names its start, so a worker
        # holding a stale open shard (from a superseded iterator) reopens it.
        self._restart = {s: self._positions.get(s, 0) for s in self._shards}
        self._task_shard: dict[int, int] = {}
        self._num_tasks = None

    def _next_stream_task(self):
        live = [s for s in self._shards if s not in self._exhausted]
        if not live:
            return None
        for _ in range(len(self._shards)):
            shard = self._shards[self._cursor % len(self._shards)]
            self._cursor = (self._cursor + 1) % len(self._shards)
            if shard not in self._exhausted:
                start = self._restart.pop(shard, None)
                return shard, start
        return None

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
                picked = self._next_stream_task()
                if picked is None:
                    return
                shard, start = picked
                self._task_shard[number] = (shard, self._cursor)
                task = Task(self.epoch, number, shard=shard, start=start)
                self._executor.submit((self._generation, number), task, self._shards.index(shard))
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
        """Send task ``number`` as pieces if it is one of the epoch's last and long enough to pay (`engine/_tail.py`)."""
        if not self._tail.enabled or self._step != self._size:
            return False
        # A batch's time from this epoch's tasks so far, else from the last epoch's (a window as deep as the
        # epoch sends every task before any is back: 32 threads, 51 batches)
        per_row = self.stats_.task_seconds / self._rows_done if self._rows_done else self._runtime.row_seconds
        seconds = per_row * self._size if per_row else None
        batch_bytes = self._batch_bytes or self._runtime.tuner.batch_bytes  # (the depth tuner's, from the first batch)
        count = self._tail.pieces(number, self._num_tasks, self._runtime.workers, len(indices), seconds, batch_bytes)
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
                result = join(*back, where=self._plan.part.source.where)
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
        if number in self._pieced:
            self._pieced.discard(number)  # its pieces were counted as they came back
        else:
            self._count(number, result)
        self.stats_.add_counts(self._plan.part.source.take_counters())  # the consumer's own (a remote store's read-ahead)
        self._skip_log.extend((number, index, reason) for index, reason in result.skipped)
        if result.error is not None:
            if isinstance(result.payload, BatchGroup):  # the whole batches before the failure come first
                payload, rows, _, skip = self._undelivered(result)
                self._emit_whole_batches(payload, rows, number, skip, finished=False)
            self._error = result.error
            self._out.append((_ERROR, result.error, 0))
            return
        if self._plan.streaming:
            shard, cursor = self._task_shard.pop(number)
            # Inside an unbatched task, the point is "this task again, from its start, minus `offset` items".
            before = {"positions": dict(self._positions), "exhausted": sorted(self._exhausted), "cursor": self._shards.index(shard)}
            self._positions[shard] = result.consumed
            if result.exhausted:
                self._exhausted.add(shard)
            point = {"task": number + 1, "streams": {"positions": dict(self._positions), "exhausted": sorted(self._exhausted), "cursor": cursor}}
            if self._shuffler is not None:
                self._window_rows(result, number, before)
            elif self._recut is not None:  # batched: rows are re-cut across shards, so only the epoch's last batch is short
                self._recut_rows(result, number, before, point["streams"])
            elif result.rows:
                self._emit_rows(result, point, number, before)
            return
        payload, rows, indices, skip = self._undelivered(result)
        if self._unbatched:
            for j, item in enumerate(payload or []):
                last = j == len(payload) - 1
                self._out.append((item, {"task": number + 1 if last else number, "offset": 0 if last else skip + j + 1}, 1))
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
            point = {"task": number + 1, "offset": 0} if finished else {"task": number, "offset": skip + rows}
            self._out.append((payload, point, rows))
            return
        for j, start in enumerate(range(0, rows, size)):
            end = min(rows, start + size)
            batch = group[j] if group is not None else slice_rows(payload, start, end, rows=rows)
            point = {"task": number + 1, "offset": 0} if finished and end == rows else {"task": number, "offset": skip + end}
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
                self._out.append((item, point if last else {"task": number, "offset": skip + j + 1, "streams": before}, 1))
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
        if self._started is None:
            self._started = now
            self.stats_.started_at = now
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
        stats.wall_seconds = after - self._started
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
                with short_switch_interval():  # beside busy Python threads, a batch back waits <= 0.5 ms, not 5, for us
                    self._collect()
            else:
                self._collect()

    def _finish(self) -> None:
        if self._finished:
            return
        self._finished = True
        if self.stats_.skipped:
            shown = ", ".join(str(i) for i, _ in self.stats_.skipped[:10])
            warnings.warn(
                f"feedline skipped {len(self.stats_.skipped)} samples in epoch {self.epoch} "
                f"(on_error='skip'): {shown}{' ...' if len(self.stats_.skipped) > 10 else ''}. "
                "See it.stats() for the reasons.",
                RuntimeWarning,
                stacklevel=_user_stacklevel(),
            )
        self._refresh()
        if self._rows_done:
            self._runtime.row_seconds = self.stats_.task_seconds / self._rows_done
        plan, backend, workers = self._plan, self._runtime.backend, self._runtime.workers
        messages = backend in ("process", "ray")  # where a task is a message: its size from the work measured per sample
        bulk = plan.part.bulk_read and plan.groups_batches and backend in ("thread", "serial")  # one gather for several batches
        settled = self._runtime.executor.settled  # an automatic choice's trial measures on its grid: learn after it
        if (self._unbatched or plan.groups_batches) and not plan.streaming and (messages or bulk) and settled:
            max_bytes = MAX_TASK_BYTES if messages else cache_share(workers)
            room = self._runtime.tuner.task_room() if messages else None  # a small /dev/shm holds the whole window
            learned = measured_chunk(self.stats_.task_seconds, self.stats_.samples, len(self._order), workers,
                                     batch=self._size, batch_bytes=self._batch_bytes or 0,
                                     max_bytes=max_bytes if room is None else min(max_bytes, room),
                                     previous=self._runtime.learned_chunk)
            self._runtime.learned_chunk = learned or self._runtime.learned_chunk
        self._runtime.publish(self.stats_)

    def _abort(self, _finalizing=sys.is_finalizing) -> None:
        self._finished = True
        if _finalizing():  # the interpreter is ending (a generator closed at exit): its modules may be gone, its workers go with it
            return
        self._executor.cancel(self._generation)
        self._refresh()
        self._runtime.publish(self.stats_)

    def _on_superseded(self) -> None:
        if not self._finished:
            self._superseded = True
            self._executor.cancel(self._generation)

    def close(self) -> None:
        """Stop this epoch early; outstanding work is cancelled (workers stay up)."""
        if not self._finished:
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
        state = {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "batches": self.stats_.batches,
            "skipped": [[_jsonable(i), r] for t, i, r in self._skip_log if t < self._point.get("task", 0)],
            "fingerprint": self._fingerprint,
            # Index steps that shuffle carry a seed (duck-typed: the engine sees only the Plan).
            "seeds": [int(step.seed) for step in self._plan.index_steps if getattr(step, "seed", None) is not None],
        }
        if self._parts:
            state["parts"] = self._parts
        if self._plan.order_seed is not None:
            state["mix_seed"] = int(self._plan.order_seed)  # so that resume can say when only it differs
        if self._plan.streaming:
            streams = self._point.get("streams", {"positions": {}, "exhausted": [], "cursor": 0})
            state.update(task=0, offset=self._point.get("offset", 0), streams=streams)
        else:
            state.update(task=self._point["task"], offset=self._point["offset"])
            if self._unbatched or self._step != self._size:
                state["chunk"] = self._step  # samples per task: the grid "task" counts in
        if "buckets" in self._point:
            state["buckets"] = self._point["buckets"]  # bucket_by_length: rows of each bucket handed out since "task"
        if "pack" in self._point:
            state["pack"] = self._point["pack"]  # pack(): which items the rows held, and the next one to place
        if "window" in self._point:
            state["window"] = self._point["window"]  # shuffle(window=N): rows delivered, and the oldest row held
        return seal(state)

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
        if isinstance(self._recut, (Packer, BudgetCut)):
            stats.packed = isinstance(self._recut, Packer)
            stats.items, stats.item_slots = self._recut.fill.items, self._recut.fill.slots


_ERROR = object()


def _batch_bytes(batch, rows: int, size: int) -> int:
    """Bytes of the arrays of a whole batch of ``size`` rows, from ``batch`` of ``rows`` rows."""
    arrays = flatten(batch)[1] if rows else []
    return int(sum(a.nbytes for a in arrays if isinstance(a, np.ndarray)) * size / max(1, rows))


def _recut_for(plan, state):
    """The re-cut of a plan whose tasks may not be whole batches: one carry of rows, buckets, packed rows or a budget."""
    padder = plan.padder
    if plan.pack is not None:
        pack = plan.pack
        return Packer(pack.max_length, pack.fit, pack.buffer, pack.pad_value, plan.rows_per_batch, plan.drop_remainder,
                      (state or {}).get("pack"), plan.part.source.where)
    if plan.budget is not None:
        return BudgetCut(plan.budget, padder.join, padder.cut, plan.part.source.where)
    if padder is None:
        return Recut(plan.part.batch_size, plan.drop_remainder, plan.part.source.where)
    if padder.buckets is None:
        return Recut(plan.part.batch_size, plan.drop_remainder, plan.part.source.where, join=padder.join, cut=padder.cut)
    return Buckets(padder.buckets, plan.drop_remainder, padder.join, padder.cut, (state or {}).get("buckets"))


def _window_for(plan, epoch: int, state):
    """The shuffle window of a stream with ``shuffle(window=N)``, resumed from ``state["window"]`` if given."""
    if plan.window is None:
        return None
    return WindowShuffle(plan.window.window, plan.window.seed, epoch, plan.part.batch_size, plan.drop_remainder,
                         (state or {}).get("window"), plan.part.source.where)


def _user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the first frame outside feedline."""
    import os
    import sys

    package = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(package):
        frame, level = frame.f_back, level + 1
    return level


def _index_from_json(index):
    return tuple(index) if isinstance(index, list) else index


def _jsonable(index):
    return list(index) if isinstance(index, tuple) else int(index)
