"""The source protocol shared by every kind of source."""

from __future__ import annotations

__all__ = ["Source"]


class Source:
    """Random access to samples by integer index.

    Subclasses implement `__len__` and `read`. A source is pickled once and
    sent to every worker, so it must hold its data compactly (arrays, not
    Python lists of objects) and open files lazily, in the worker.

    Attributes:
        streaming: False for random-access sources; `GeneratorSource` sets it.
        gather: optional bulk read ``gather(indices, alloc) -> batch``; when
            a pipeline has no per-sample step, batches are read with one call
            instead of one `read` per sample.
        user_code: True when reading a sample runs the user's Python (a
            sequence's ``__getitem__``, a generator), which the backend
            choice must treat like a ``map``.
        needs_ray: True when samples can be read only where Ray is connected
            (a Ray Dataset's blocks): the runtime then runs the work on Ray.
        parallel_gather: True when ``gather`` spends its time in copies that
            release the GIL (a store), so the backend choice also tries a
            thread pool on bulk reads.
        prepared_when_pickled: True when pickling the source first runs
            `prepare` (a cache writes its store), so that nothing but the
            run itself may pickle it (not a look ahead at a map's libraries).
    """

    streaming = False
    gather = None
    user_code = False
    needs_ray = False
    parallel_gather = False
    prepared_when_pickled = False

    def prepare(self) -> None:
        """Get ready to be read, in the consumer, before any worker starts (e.g. write a cache)."""

    def read_ahead(self, indices) -> None:
        """The samples this epoch will read, in delivery order (from where it starts), told in the consumer.

        The plan knows the whole epoch's order before the first task runs; a
        source that fetches its data (a remote store's files) starts fetching
        exactly those, in that order. Default: nothing.
        """

    def take_counters(self) -> dict:
        """Counts of events in this process since the last call, for ``stats()``: ``{name: int}``.

        A source that does work besides reading (a remote store downloads
        and retries) counts it; the engine takes the counts after each task,
        in whichever process ran it, and adds them to `Stats.source_counts`.
        Each call returns only what happened since the previous one, so
        every event is counted once. Default: nothing to count.
        """
        return {}

    def work_identity(self) -> tuple:
        """What reading a sample runs, for the automatic choice's memory (`feedline.engine._remembered`).

        The kind of source by default; sources that run the user's code
        add that code, so editing it makes the automatic choice try again.
        """
        return (type(self).__module__, type(self).__qualname__)

    def identity(self) -> str | None:
        """A digest of the source's data that a saved state of ``fl.concatenate`` / ``fl.mix`` records per input.

        So that a state of ``concatenate([a, b])`` is refused by
        ``concatenate([b, a])``. Stable across processes, and cheap (large
        data is sampled). None: the input is known only by its kind and
        length (docs/vocabulary.md, "Checkpoints").
        """
        return None

    def file_of(self, index: int) -> str | None:
        """The file that holds sample ``index``, for sources of files (else None)."""
        return None

    def __len__(self) -> int:
        raise NotImplementedError

    def read(self, index: int):
        """Return sample ``index`` (0 <= index < len(self))."""
        raise NotImplementedError

    def where(self, index: int) -> str | None:
        """A human description of sample ``index`` for error messages (a file path)."""
        return None

    def describe(self) -> str:
        """One line for ``print(pipe)``."""
        return f"{type(self).__name__}(len={len(self)})"
