"""JAX adapter: ``pipe.jax(sharding=None)``.

Batches become `jax.Array`s, put on the device ahead of time.

Protocol:
- Who copies: ``jax.device_put`` is asynchronous: it returns at once and
  the transfer runs in JAX's runtime. The loop's thread calls it for the
  next ``depth`` batches before handing out the current one, so a jitted
  step finds its input already on the device (or on its way).
- Who frees what: the feedline batch (NumPy views of shared memory) is
  dropped after ``device_put``; JAX keeps its own reference for as long as
  the transfer (or, on the CPU, an aliasing array) needs it, and the slot
  is reused only once that reference is gone.
- Back-pressure: at most ``depth`` batches are on their way ahead of the
  step; feedline's own prefetch bounds the work behind them.
- Sharding: with a `jax.sharding.Sharding`, every array is split along it
  (for data parallel, a `NamedSharding` over a mesh with the batch axis on
  the first dimension). When JAX runs several processes, each process's
  pipeline holds its own part of the global batch (use ``.shard()``), and
  the global array is assembled with
  ``jax.make_array_from_process_local_data``.
- Leaves that are not numeric arrays (strings, lists) stay on the host.
- Checkpoints: the pipeline runs ``depth`` batches ahead of the one handed
  out, so the loader notes the pipeline's position (``it.state()``) as it
  takes each batch, and ``state_dict()`` answers with the one noted for
  the last batch handed out (the layout of `feedline.pipeline._checkpoint`,
  as ``pipe.torch()``'s loader writes it).
"""

from __future__ import annotations

import collections
import sys

import numpy as np

from .._errors import FeedlineError
from ..pipeline._checkpoint import between_epochs, encode
from ._common import EpochPosition, even_steps, map_structure, require, steps_per_epoch

__all__ = ["JaxLoader", "to_jax"]

DEFAULT_DEPTH = 2  # batches in flight to the device: one transferring while the step runs on the other


class JaxLoader:
    """An iterable over a pipeline's batches as JAX arrays; each ``iter()`` is the next epoch.

    Made by ``pipe.jax()``; see `to_jax` for the arguments. `state_dict` /
    `load_state_dict` checkpoint it (with Orbax: `feedline.adapters.orbax`).

    >>> import numpy as np, feedline as fl
    >>> loader = fl.from_arrays(np.arange(6)).batch(2).jax()
    >>> it = iter(loader)
    >>> next(it).tolist()
    [0, 1]
    >>> saved = loader.state_dict()  # after the batch handed out
    >>> again = fl.from_arrays(np.arange(6)).batch(2).jax()
    >>> again.load_state_dict(saved)
    >>> [b.tolist() for b in again]
    [[2, 3], [4, 5]]
    """

    def __init__(self, pipe, sharding=None, depth: int = DEFAULT_DEPTH, even_batches: bool = True):
        jax = require("jax", "jax", "pipe.jax()")
        if sharding is not None and not isinstance(sharding, (jax.sharding.Sharding, jax.Device)):
            raise TypeError(
                f"pipe.jax(sharding=...) takes a jax.sharding.Sharding (e.g. NamedSharding(mesh, "
                f"PartitionSpec('batch'))) or a jax.Device; got {type(sharding).__name__}"
            )
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"to_jax(depth=...) must be an integer >= 1, got {depth!r}")
        self._pipe = pipe
        self.sharding = sharding
        self.depth = depth
        self.even_batches = even_batches
        self._position = EpochPosition(pipe)  # the pipeline's epoch and where it stands (ahead of the step)
        self._epoch = None  # the epoch being handed out: a token of its generator, or None between epochs
        self._handed = None  # the position after the last batch handed out (before the first: where the epoch starts)

    def __len__(self) -> int:
        """Batches per epoch (the same on every process of a sharded pipeline)."""
        steps = steps_per_epoch(self._pipe, self.even_batches)
        if steps is None:
            raise TypeError("len() is unknown for this pipeline (generator source or filter())")
        return steps

    def __iter__(self):
        steps = even_steps(self._pipe, self.even_batches)
        return self._ahead(self._position.epoch(steps))

    def state_dict(self) -> dict:
        """Where the loader stands, for Orbax (`feedline.adapters.orbax`), ``pickle`` or ``json``.

        As ``pipe.torch()``'s loader: taken mid-epoch, `load_state_dict`
        makes the next ``iter()`` continue right after the last batch
        handed out (not after the ``depth`` batches already on their way to
        the device), and later epochs follow; taken between epochs, the
        next ``iter()`` starts the next epoch. Any backend and worker count
        before and after. Details: docs/checkpoints.md.
        """
        if self._epoch is None:
            return self._position.state_dict()
        if isinstance(self._handed, FeedlineError):  # the pipeline keeps no position (map(ordered=False))
            raise FeedlineError(str(self._handed)) from self._handed
        return encode(self._handed)

    def load_state_dict(self, state_dict: dict) -> None:
        """Make the next ``iter()`` continue from ``state_dict`` (see `state_dict`).

        Raises:
            ValueError: the state is not a loader state of this version, or
                was taken on another pipeline (the field and the fix named).
        """
        self._position.load_state_dict(state_dict, "JaxLoader")

    def _put(self, batch):
        jax = sys.modules["jax"]
        numeric = []

        def collect(leaf):
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "biufc":
                numeric.append(leaf)
                return _Slot(len(numeric) - 1)
            return leaf

        skeleton = map_structure(collect, batch)
        if not numeric:
            return batch
        if self.sharding is not None and jax.process_count() > 1 and isinstance(self.sharding, jax.sharding.Sharding):
            placed = [jax.make_array_from_process_local_data(self.sharding, a) for a in numeric]
        else:
            placed = jax.device_put(numeric, self.sharding)  # one call: transfers are issued together
        return map_structure(lambda leaf: placed[leaf.i] if isinstance(leaf, _Slot) else leaf, skeleton)

    def _ahead(self, batches):
        staged: collections.deque = collections.deque()  # (batch on its way, the position after it)
        token = self._epoch = object()
        position = self._position  # before the first batch: where the epoch starts (the loaded position, or the next epoch)
        self._handed = position.pending if position.pending is not None else between_epochs(self._pipe._next_epoch)
        try:
            for batch in batches:
                staged.append((self._put(batch), self._after()))
                del batch
                if len(staged) > self.depth:
                    yield self._hand(staged.popleft())
            while staged:
                yield self._hand(staged.popleft())
        finally:
            if self._epoch is token:
                self._epoch = None
            batches.close()

    def _after(self) -> dict | FeedlineError:
        """The position after the batch just taken from the pipeline (`EpochPosition.state_dict`'s, not encoded).

        Where the pipeline cannot say (``map(ordered=False)``), the refusal,
        which `state_dict` raises: iterating goes on.
        """
        position = self._position
        iterator = position.iterator
        if position.steps is not None and position.given >= position.steps:
            return between_epochs(iterator.epoch + 1)
        if isinstance(self._handed, FeedlineError):
            return self._handed
        try:
            state = iterator.state()
        except FeedlineError as refusal:
            return refusal
        return {"next_epoch": iterator.epoch + 1, "state": state, "given": position.given}

    def _hand(self, staged):
        batch, self._handed = staged
        return batch

    def __repr__(self) -> str:
        return f"JaxLoader(sharding={self.sharding!r}, depth={self.depth}) over\n{self._pipe!r}"


class _Slot:
    """Placeholder for the ``i``-th numeric leaf while a batch is on its way."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def to_jax(pipe, sharding=None, *, depth: int = DEFAULT_DEPTH, even_batches: bool = True) -> JaxLoader:
    """Iterate ``pipe`` as JAX arrays, put on the device ``depth`` batches ahead.

    Args:
        pipe: the pipeline.
        sharding: where arrays go: None for the default device, a
            `jax.Device`, or a `jax.sharding.Sharding` to split each batch
            across devices (its first axis across the mesh's data axis).
        depth: batches transferred ahead of the one handed out.
        even_batches: for a sharded pipeline (``.shard()``), yield the same
            number of batches in every process (default).

    Returns:
        A `JaxLoader`: each ``iter()`` is the next epoch; ``len()`` is
        batches per epoch; ``state_dict()`` / ``load_state_dict()`` resume
        right after the last batch handed out.

    Raises:
        ImportError: JAX is not installed (``pip install 'feedline[jax]'``).
        TypeError: ``sharding`` is neither a Sharding nor a Device.

    >>> import numpy as np, feedline as fl
    >>> [b.sum().item() for b in fl.from_arrays(np.arange(6)).batch(4).jax()]
    [6, 9]
    """
    return JaxLoader(pipe, sharding=sharding, depth=depth, even_batches=even_batches)
