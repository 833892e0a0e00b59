"""Batch slots: how a process worker hands a finished batch to the consumer.

Protocol (one writer, one reader per slot):
- The worker owns its slots. To publish a batch it picks a free slot (or
  creates one, named ``feedline_<consumer pid>_w<worker>_<n>``), writes every
  array of the batch into it at 64-byte aligned offsets (collation writes
  there directly, so usually nothing is copied), and sends a small message:
  slot id, the slot's name the first time, the layout, and the batch's
  skeleton (its non-array parts).
- The consumer maps a slot the first time it sees it and unlinks its name
  at once, then builds NumPy views over the layout: no copy, no pickle of
  the data. The views share one base object; when the last view (the last
  reference the user holds, through NumPy or ``torch.from_numpy``) is
  garbage collected, a finalizer queues the slot id, and the consumer sends
  it back to the worker with its next message. Only then may the worker
  reuse the slot, so a batch the user still holds is never overwritten.
- Kept batches are copied, not mapped: the consumer counts the batches
  it handed out as views of slots and not yet got back (`SlotViews`, one
  per executor). Past its bound (`mapped_bound`, ``FEEDLINE_MAPPED_BATCHES``)
  a batch is copied into ordinary arrays as it is opened and its slot is
  released at once; the views over the slot are dropped before the release
  is handed back, so nothing the user holds ever sees the slot reused. Each
  slot the user keeps is a kernel mapping in the consumer (and in its
  worker) and a page of shared memory at least: ``list(pipe)`` of 75,000
  small batches died of ``ENOMEM`` at Linux's 65,530 mappings a process
  (``vm.max_map_count``). A loop that drops each batch has out only what
  is in flight and the batch in hand, so it keeps the zero-copy views
  (tasks of many small batches, from the second epoch, may reach the
  bound: those batches are a few KiB, and copied).
- Hand-back goes through shared memory too: each worker has a `ReleaseRing`
  of words in its status segment; the consumer writes a released slot id
  there and the worker takes it when it next needs a slot. No message and
  no wake-up of the worker per batch (issue 14: on a tiny map every other
  batch cost a `Release` message, and its wake-up took the worker's core).
  Only when the ring is full does the id travel with the next message.
- Back-pressure is not done here: the consumer bounds the number of tasks
  in flight, so a worker holds at most (in-flight tasks + batches the user
  still references as views, which `SlotViews` bounds) slots, plus a few
  made while released ones were on their way back. On a full /dev/shm a
  slot is a memory file or a file in the spill folder; where neither can
  be, a worker waits (bounded) for one of its slots.
- Shutdown: a worker unlinks the names of its slots on exit (names already
  unlinked by the consumer are ignored). If the worker is killed before the
  consumer attached a new slot, the consumer sweeps the worker's prefix; a
  slot in a memory file went with the worker, and the consumer runs the
  task that announced it again (`feedline.transport._shm.SegmentGone`).
"""

from __future__ import annotations

import collections
import itertools
import math
import mmap
import os
import time
import weakref

import numpy as np

from .._errors import SharedMemoryFull
from .._tree import BatchGroup, flatten, unflatten
from ._shm import MAPPED_VAR, Segment, max_mappings, unlink, warn_spilled

__all__ = ["MAPPED_VAR", "ReleaseRing", "SlotReader", "SlotViews", "SlotWriter", "mapped_bound"]

_ALIGN = 64
# Seconds a worker waits, on a full /dev/shm, for the consumer to hand back a slot (`SlotWriter._handed_back`):
# the wait ends as soon as one comes, so only an epoch that fails anyway waits it all; 0.5 s ended one CI run on a
# loaded machine in SharedMemoryFull while the slot was on its way.
ROOM_WAIT = 3.0
ROOM_POLL = 0.001  # ... looking at its ring this often
# Batches out as views of slots at once where `MAPPED_VAR` is unset: far past what a loop that drops each batch
# has out (prefetched plus held), far under the kernel's mappings a process; each costs a page of shared memory at least.
MAPPED_BATCHES = 1024
MAPPINGS_SHARE = 4  # ... and at most this fraction of the process's mapping limit: the rest is the interpreter's and the user's


def _layout(specs):
    offset, layout = 0, []
    for shape, dtype in specs:
        dtype = np.dtype(dtype)
        nbytes = math.prod(int(s) for s in shape) * dtype.itemsize
        layout.append((offset, tuple(int(s) for s in shape), dtype.str))
        offset += -(-nbytes // _ALIGN) * _ALIGN
    return layout, offset


def _views(buffer, layout, total):
    flat = np.frombuffer(buffer, dtype=np.uint8, count=total) if total else np.empty(0, np.uint8)
    arrays = []
    for offset, shape, dtype in layout:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize  # math.prod: np.prod is far slower on a short tuple, per batch
        arrays.append(flat[offset : offset + nbytes].view(dtype).reshape(shape))
    return flat, arrays


def mapped_bound() -> int:
    """Batches the consumer hands out as views of slots at once (`SlotViews`): ``$FEEDLINE_MAPPED_BATCHES``, else `MAPPED_BATCHES`.

    The default is lowered where the kernel allows few mappings a process
    (`feedline.transport._shm.max_mappings`). 0 copies every batch.

    Raises:
        ValueError: the variable is set to something other than a whole number >= 0.
    """
    setting = os.environ.get(MAPPED_VAR, "").strip()
    if not setting:
        limit = max_mappings()
        return MAPPED_BATCHES if limit is None else min(MAPPED_BATCHES, limit // MAPPINGS_SHARE)
    if not setting.isdigit():
        raise ValueError(f"{MAPPED_VAR}={setting!r}: the number of batches from process workers kept as views of shared "
                         f"memory at once (past it they are copied), a whole number >= 0; unset it for {MAPPED_BATCHES}")
    return int(setting)


class SlotViews:
    """The consumer's count of batches out as views of slots, and its bound: past it, `SlotReader.open` copies.

    One per executor, shared by its readers. ``released`` takes ``(worker
    id, slot id)`` from the finalizers, in whatever thread drops a batch's
    last view (``deque.append`` is atomic); `take` hands them to the
    executor. Only the consumer's thread changes ``out``.

    >>> views = SlotViews(bound=2)
    >>> views.out = 2  # two batches opened as views (`SlotReader.open` counts them)
    >>> views.copying()
    True
    >>> views.released.append((0, 5))  # the user let go of one
    >>> views.copying(), views.take(), views.out
    (False, [(0, 5)], 1)
    """

    def __init__(self, bound: int):
        self.bound = bound
        self.released: collections.deque = collections.deque()
        self.out = 0  # slots opened and not yet taken back by `take` (released ones wait in ``released``)

    def copying(self) -> bool:
        """Whether the next batch is to be copied: `bound` batches are out as views already."""
        return self.out - len(self.released) >= self.bound

    def take(self) -> list[tuple[int, int]]:
        """``(worker id, slot id)`` of every slot released since the last call, in order."""
        taken = []
        while self.released:
            taken.append(self.released.popleft())
        self.out -= len(taken)
        return taken


class ReleaseRing:
    """Slot ids handed back from the consumer to a worker through shared words, without a message.

    One writer (the consumer: `push`) and one reader (the worker: `take`).
    A word holds ``slot id + 1``, or 0 when empty; the consumer writes a
    word only after the worker emptied it, and each side walks the words in
    the same order. Each word is written whole by one side at a time, so no
    lock and no ordering between words is needed: a reader that does not
    see a word yet stops there and finds it on its next call.

    >>> words = memoryview(bytearray(4 * 8)).cast("q")
    >>> consumer, worker = ReleaseRing(words), ReleaseRing(words)
    >>> [consumer.push(s) for s in (7, 0, 3, 5, 9)]
    [True, True, True, True, False]
    >>> worker.take(), consumer.push(9), worker.take()
    ([7, 0, 3, 5], True, [9])
    """

    def __init__(self, words):
        self.words = words  # a memoryview cast to "q" (int64), shared by both processes
        self.position = 0

    def push(self, slot: int) -> bool:
        """Hand ``slot`` back; False if the ring is full (then send it with a message)."""
        if self.words[self.position]:
            return False
        self.words[self.position] = slot + 1
        self.position = (self.position + 1) % len(self.words)
        return True

    def take(self) -> list[int]:
        """The slot ids handed back since the last call, in order."""
        taken, words = [], self.words
        while words[self.position]:
            taken.append(words[self.position] - 1)
            words[self.position] = 0
            self.position = (self.position + 1) % len(words)
        return taken


class SlotWriter:
    """Worker side: a pool of slots, reused once the consumer releases them.

    ``returned`` is the worker's `ReleaseRing`, read whenever a slot is needed.
    """

    def __init__(self, prefix: str, max_free: int = 4, returned: ReleaseRing | None = None):
        self.prefix = prefix
        self.max_free = max_free
        self.returned = returned
        self.slots: dict[int, Segment] = {}
        self.free: set[int] = set()
        self.announced: set[int] = set()
        self.retired: list[int] = []
        self._ids = itertools.count()
        self._pending: list = []  # (slot id, layout, total, arrays) of each alloc of the task being run

    def _take(self, total: int) -> int:
        if self.returned is not None:
            self.release(self.returned.take())
        slot = self._fitting(total)
        if slot is not None:
            return slot
        if len(self.free) >= self.max_free:  # too small to reuse: retire one
            victim = min(self.free, key=lambda s: self.slots[s].size)
            self.free.discard(victim)
            self._retire(victim)
        slot = next(self._ids)
        size = -(-total // mmap.PAGESIZE) * mmap.PAGESIZE
        try:
            self.slots[slot] = Segment.create(f"{self.prefix}{slot}", size)  # a memory file or spilled if /dev/shm is full
        except SharedMemoryFull:
            reused = self._handed_back(total)  # nowhere to spill: one of ours on its way back, or the error
            if reused is None:
                raise
            return reused
        return slot

    def _fitting(self, total: int) -> int | None:
        """The smallest free slot that holds ``total`` bytes, taken; None if none does."""
        fitting = [s for s in self.free if self.slots[s].size >= total]
        if not fitting:
            return None
        slot = min(fitting, key=lambda s: self.slots[s].size)
        self.free.discard(slot)
        return slot

    def _handed_back(self, total: int) -> int | None:
        """/dev/shm is full: a slot of ours that fits, once the consumer hands one back within `ROOM_WAIT`; None if none comes.

        A worker makes a new slot when none of its own is back yet, and the
        consumer hands slots back a little after the user lets go of a
        batch; where /dev/shm is small (Docker's 64 MB) those few extra
        slots filled it and the epoch ended with `SharedMemoryFull`, while
        the slots the consumer was about to hand back would have done.
        Slots held by batches the consumer cannot take yet (they wait
        behind an earlier one) never come back: the wait is bounded, and
        then the error stands. Only where nothing can spill
        (`feedline.transport._shm`): a file there costs a first epoch less
        than waiting for a slot that will not come back (docs/bad_input.md,
        "Full disk").
        """
        if self.returned is None or len(self.slots) <= len(self.free):
            return None  # nothing of ours is out: nothing can come back
        deadline = time.monotonic() + ROOM_WAIT
        while time.monotonic() < deadline:
            time.sleep(ROOM_POLL)
            self.release(self.returned.take())
            slot = self._fitting(total)
            if slot is not None:
                return slot
        return None

    def _retire(self, slot: int) -> None:
        seg = self.slots.pop(slot)
        unlink(seg.name)
        self.retired.append(slot)

    def alloc(self, specs):
        """Destination arrays for a batch, inside one slot (see `collate_into`).

        Arrays of Python objects (e.g. integers beyond 64 bits) cannot live in
        shared memory: they get ordinary arrays, and `publish` declines them (the batch is pickled).
        A task may allocate several (a `BatchGroup`); `publish` then places
        them and frees what no batch used.
        """
        if any(np.dtype(dtype).hasobject for _, dtype in specs):
            return [np.empty(shape, dtype) for shape, dtype in specs]
        layout, total = _layout(specs)
        slot = self._take(total)
        _, arrays = _views(self.slots[slot].buf, layout, total)
        self._pending.append((slot, layout, total, arrays))
        return arrays

    def publish(self, payload) -> dict | None:
        """The message fields for a task's batch (or ``{"group": [...]}`` for a `BatchGroup`); None: pickle it.

        Slots allocated for the task but not holding a published batch are
        free again afterwards.
        """
        try:
            if payload is None:
                return None
            batches = payload.batches if isinstance(payload, BatchGroup) else [payload]
            flat = [flatten(batch) for batch in batches]
            if any(a.dtype.hasobject for _, arrays in flat for a in arrays):
                return None
            fields = [self._place(*one) for one in flat]
            return {"group": fields} if isinstance(payload, BatchGroup) else fields[0]
        finally:
            self.free.update(pending[0] for pending in self._pending)
            self._pending.clear()

    def _place(self, skeleton, arrays) -> dict:
        """Publish a flattened batch (no arrays of objects); return the message fields that describe it."""
        collated_here = [k for k, pending in enumerate(self._pending)
                         if len(arrays) == len(pending[3]) and all(a is b for a, b in zip(arrays, pending[3]))]
        if collated_here:
            slot, layout, total, _ = self._pending.pop(collated_here[0])
        else:  # not collated in place (a collate= of the user's, or map_batch): copied in
            layout, total = _layout([(a.shape, a.dtype) for a in arrays])
            slot = self._take(total)
            _, dest = _views(self.slots[slot].buf, layout, total)
            for d, a in zip(dest, arrays):
                np.copyto(d, a)
        name = None
        if slot not in self.announced:
            self.announced.add(slot)
            name = self.slots[slot].name
        retired, self.retired = self.retired, []
        return {"skeleton": skeleton, "slot": slot, "name": name, "layout": layout, "total": total, "retired": retired}

    def release(self, slots) -> None:
        for slot in slots:
            if slot in self.slots:
                self.free.add(slot)

    def close(self) -> None:
        for seg in self.slots.values():
            unlink(seg.name)
        self.slots.clear()


class SlotReader:
    """Consumer side, one per worker: maps slots and builds zero-copy views (copies past the bound of ``views``).

    ``views`` is the executor's `SlotViews`: the finalizer of a batch's
    views appends ``(worker id, slot id)`` to its ``released``.
    """

    def __init__(self, worker_id: int, views: SlotViews):
        self.worker_id = worker_id
        self.views = views
        self.maps: dict[int, Segment] = {}

    def open(self, fields: dict):
        """The batch that `SlotWriter.publish` described in ``fields`` (a `BatchGroup` for ``{"group": [...]}``)."""
        if "group" in fields:
            return BatchGroup([self.open(one) for one in fields["group"]])
        for slot in fields["retired"]:
            self.maps.pop(slot, None)
        slot = fields["slot"]
        if fields["name"] is not None:
            self.maps[slot] = Segment.attach(fields["name"])
            warn_spilled(self.maps[slot])
            unlink(fields["name"])
        copying = self.views.copying()
        self.views.out += 1
        flat, arrays = _views(self.maps[slot].buf, fields["layout"], fields["total"])
        if flat.base is not None and not copying:
            weakref.finalize(flat.base, self.views.released.append, (self.worker_id, slot))
            return unflatten(fields["skeleton"], arrays)
        arrays = [a.copy() for a in arrays] if copying else arrays  # (no base: empty arrays, nothing in the slot)
        del flat  # no view of the slot is left before it goes back
        self.views.released.append((self.worker_id, slot))
        return unflatten(fields["skeleton"], arrays)
