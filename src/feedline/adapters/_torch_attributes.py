"""What code written for a ``torch.utils.data.DataLoader`` reads off ``pipe.torch()``'s loader.

Framework code (Lightning's checks, training scripts' ``len(loader.dataset)``)
inspects ``dataset``, ``batch_size``, ``drop_last``, ``sampler``,
``batch_sampler`` and ``num_workers``. feedline has no sampler or dataset
object (the pipeline orders, reads and batches in its workers), so these are
stand-ins that answer the questions truthfully: how many samples an epoch
yields, whether the order is shuffled, how many workers run. docs/checkpoints.md.
"""

from __future__ import annotations

import functools
import os

from ..pipeline._steps import Map, Shuffle
from ._common import require, steps_per_epoch

__all__ = ["LoaderDataset", "num_workers", "sampler_for"]


class LoaderDataset:
    """``loader.dataset``: ``len()`` is the samples one epoch of the loader yields (this rank's, if sharded).

    Not indexable: samples are read in feedline's workers; the pipeline
    itself is ``pipeline``.
    """

    def __init__(self, pipe, even_batches: bool):
        self.pipeline = pipe
        self._even = even_batches

    def __len__(self) -> int:
        """Samples per epoch.

        Raises:
            TypeError: the pipeline's length is unknown (generator source, ``filter``, ...).
        """
        steps = steps_per_epoch(self.pipeline, self._even)
        if steps is None:
            len(self.pipeline)  # raises the TypeError that says why
        plan = self.pipeline._plan
        size = plan.part.batch_size
        if size is None:
            return steps
        samples = len(plan.epoch_indices(0))
        return steps * size if plan.drop_remainder else min(samples, steps * size)

    def __repr__(self) -> str:
        return f"LoaderDataset(samples per epoch of\n{self.pipeline!r})"


def shuffled(pipe) -> bool:
    return any(isinstance(step, Shuffle) for step in pipe.steps)


def num_workers(pipe) -> int:
    """The map's workers: those running now, else the number given to ``map(workers=)``, else one per core; 0 with no map."""
    maps = [step for step in pipe.steps if isinstance(step, Map)]
    if not maps:
        return 0
    runtime = pipe._runtime
    executor = None if runtime is None else runtime.executor
    if executor is not None:
        return executor.workers
    given = [step.workers for step in maps]
    return max(given) if None not in given else os.cpu_count() or 1


def sampler_for(dataset: LoaderDataset):
    """``loader.sampler``: a ``RandomSampler`` stand-in for a shuffled pipeline, else a ``SequentialSampler`` one."""
    return _sampler_classes()[shuffled(dataset.pipeline)](dataset)


@functools.cache
def _sampler_classes() -> dict:
    data = require("torch", "torch", "pipe.torch()").utils.data

    def refuse(self):
        raise TypeError(
            "loader.sampler of pipe.torch() is a stand-in (its type says whether the order is shuffled, "
            "len() gives the samples per epoch): the pipeline orders its samples in its workers, so there "
            "are no indices to draw here; iterate the loader itself"
        )

    class ShuffledOrder(data.RandomSampler):
        """Stands for the pipeline's own shuffle: an isinstance check says shuffled, ``len()`` is samples per epoch."""

        __iter__ = refuse

    class InOrder(data.SequentialSampler):
        """Stands for an unshuffled pipeline: an isinstance check says sequential, ``len()`` is samples per epoch."""

        __iter__ = refuse

    return {True: ShuffledOrder, False: InOrder}
