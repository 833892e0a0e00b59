"""`from_ray_dataset`: random access to the rows of a materialised Ray Dataset.

Why materialise instead of streaming (``iter_batches``/``streaming_split``):
feedline's guarantees (exactly once per epoch, a perfect per-epoch shuffle,
``shard``, checkpoints that resume mid-epoch, the same batches for any
worker count) all come from indexing samples. A materialised dataset is a
list of blocks in Ray's object store with known row counts, so row ``i`` is
"block ``b``, row ``i - start[b]``": random access at the cost of running the
dataset's plan once and holding its blocks in the object store (which spills
to disk when full). A dataset too large for that is better read with
``fl.from_generator`` over its files.

Each reader (an actor of ``backend="ray"``, or the consumer's threads) fetches
a block once and keeps the last `CACHED_BLOCKS` as NumPy columns; on the
same node that is a zero-copy view of the object store. Block references
travel inside the pickled pipeline (see `feedline.backends.ray._actor`), so
Ray keeps the blocks alive while any reader exists.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

from ..pipeline._pipeline import Pipeline
from ._base import Source

__all__ = ["RayDatasetSource", "from_ray_dataset"]

CACHED_BLOCKS = 4  # decoded blocks kept per reader: a shuffled batch touches many blocks, a sequential one few


class RayDatasetSource(Source):
    """Row ``i`` of a materialised Ray Dataset, as a dict of column values.

    Tensor columns come back as NumPy arrays, scalars as NumPy scalars,
    strings as Python strings (Ray Data's ``"numpy"`` batch format, row by row).
    """

    needs_ray = True  # the runtime picks backend="ray" for it, and refuses process workers

    def __init__(self, refs: list, counts: list[int], columns: list[str]):
        self.refs = list(refs)
        self.starts = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])
        self.columns = list(columns)
        self._blocks: collections.OrderedDict = collections.OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"refs": self.refs, "starts": self.starts, "columns": self.columns}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._blocks = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _block(self, b: int) -> dict:
        with self._lock:
            block = self._blocks.get(b)
            if block is not None:
                self._blocks.move_to_end(b)
                return block
        import ray
        from ray.data.block import BlockAccessor

        block = BlockAccessor.for_block(ray.get(self.refs[b])).to_batch_format("numpy")
        with self._lock:
            self._blocks[b] = block
            while len(self._blocks) > CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        return block

    def read(self, index: int) -> dict:
        if not 0 <= index < len(self):
            raise IndexError(f"row {index} of a Ray Dataset with {len(self)} rows")
        b = int(np.searchsorted(self.starts, index, side="right")) - 1
        block = self._block(b)
        row = index - int(self.starts[b])
        return {name: block[name][row] for name in self.columns}

    def where(self, index: int) -> str:
        b = int(np.searchsorted(self.starts, index, side="right")) - 1
        return f"row {index} (block {b}) of the Ray Dataset"

    def describe(self) -> str:
        return f"from_ray_dataset({len(self)} rows in {len(self.refs)} blocks, columns={self.columns})"


def from_ray_dataset(dataset) -> Pipeline:
    """A pipeline over the rows of a `ray.data.Dataset`, with random access.

    The dataset is materialised once (its plan runs now, on the cluster) and
    its blocks stay in Ray's object store; a sample is one row, a dict
    ``{column: value}``. The map then runs on ``backend="ray"`` by default
    (actors read the blocks on their own nodes); ``"thread"`` and ``"serial"``
    read them in this process; process workers cannot (they are not
    connected to Ray). Shuffle, shard, checkpoints and determinism work as
    for any indexed source.

    Args:
        dataset: a `ray.data.Dataset` (materialised or not).

    Returns:
        A `Pipeline` whose source is the dataset's rows.

    Raises:
        ImportError: Ray is not installed (``pip install 'feedline[ray]'``).
        TypeError: ``dataset`` is not a Ray Dataset.
    """
    try:
        import ray
        import ray.data
    except ImportError as e:
        raise ImportError("from_ray_dataset() needs Ray Data: pip install 'feedline[ray]' 'ray[data]'") from e
    if not isinstance(dataset, ray.data.Dataset):
        raise TypeError(f"from_ray_dataset() needs a ray.data.Dataset; got {type(dataset).__name__}")
    materialized = dataset.materialize()
    refs = materialized.to_arrow_refs()
    counts = ray.get([_num_rows.options(num_cpus=0).remote(ref) for ref in refs]) if refs else []
    columns = list(materialized.schema().names) if refs else []
    return Pipeline(RayDatasetSource(refs, counts, columns))


def _num_rows_fn(table) -> int:
    return table.num_rows


class _LazyRemote:
    """``ray.remote(fn)``, made on first use so importing feedline never imports Ray."""

    def __init__(self, fn):
        self.fn, self.remote_fn = fn, None

    def options(self, **options):
        if self.remote_fn is None:
            import ray

            self.remote_fn = ray.remote(self.fn)
        return self.remote_fn.options(**options)


_num_rows = _LazyRemote(_num_rows_fn)
