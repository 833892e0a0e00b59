"""PyTorch adapter: ``pipe.torch(device=None, pin_memory=None)``.

Batches become torch tensors: on the CPU by ``torch.from_numpy`` (no copy;
a process worker's shared-memory slot stays reserved until the tensor is
freed); on CUDA, staged ``depth`` batches ahead through pinned memory and a
side stream. Protocol rule: a staged batch is handed out only after the
current stream waits on its copy event and ``record_stream`` marks its
tensors, so no host sync and no early reuse. Details: docs/adapters.md, "PyTorch".
"""

from __future__ import annotations

import contextlib
import sys
import warnings

import numpy as np

from .._errors import FeedlineError
from .._helper_thread import OrderedHelper
from . import _torch_attributes
from ._common import EpochPosition, even_steps, map_structure, require, steps_per_epoch

__all__ = ["TorchLoader", "to_torch"]

DEFAULT_DEPTH = 2  # batches staged on the device ahead of the step: one being copied while one waits


class TorchLoader:
    """An iterable over a pipeline's batches as torch tensors; each ``iter()`` is the next epoch.

    Use it where a ``DataLoader`` would go: a ``for`` loop, PyTorch
    Lightning's ``train_dataloaders=``, or anything that calls ``iter()``
    and ``len()``. Made by ``pipe.torch()``; see `to_torch` for the
    arguments.

    Attributes:
        device: the `torch.device` batches are put on (None: left on the CPU).
        pin_memory: whether host copies are staged in pinned memory.
        depth: batches copied to the device ahead of the one handed out.
        dataset, batch_size, drop_last, sampler, batch_sampler, num_workers:
            what code written for a ``DataLoader`` reads (stand-ins where
            feedline has no such object; docs/checkpoints.md).

    >>> import numpy as np, feedline as fl
    >>> loader = fl.from_arrays(np.arange(6)).batch(2).torch()
    >>> len(loader), loader.batch_size
    (3, 2)
    >>> it = iter(loader)
    >>> next(it).tolist()
    [0, 1]
    >>> saved = loader.state_dict()  # after the batch handed out
    >>> again = fl.from_arrays(np.arange(6)).batch(2).torch()
    >>> again.load_state_dict(saved)
    >>> [b.tolist() for b in again]
    [[2, 3], [4, 5]]
    """

    batch_sampler = None  # batches are made in feedline's workers: there is no batch sampler to replace

    def __init__(self, pipe, device=None, pin_memory=None, depth: int = DEFAULT_DEPTH, even_batches: bool = True):
        torch = require("torch", "torch", "pipe.torch()")
        self._pipe = pipe
        self.device = None if device is None else torch.device(device)
        if self.device is not None and self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError(
                    f"pipe.torch(device={str(self.device)!r}): this PyTorch has no usable CUDA device "
                    f"(torch {torch.__version__}, torch.cuda.is_available() is False); pass device=None "
                    "to get CPU tensors"
                )
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        if pin_memory is None:
            pin_memory = self.device is not None and self.device.type == "cuda"
        if pin_memory and not torch.cuda.is_available():
            raise RuntimeError(
                "pipe.torch(pin_memory=True) needs CUDA (pinned memory only speeds up copies to a "
                "CUDA device), and torch.cuda.is_available() is False; leave pin_memory=None"
            )
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"to_torch(depth=...) must be an integer >= 1, got {depth!r}")
        self.pin_memory = bool(pin_memory)
        self.depth = depth
        self.even_batches = even_batches
        self._position = EpochPosition(pipe)
        self.dataset = _torch_attributes.LoaderDataset(pipe, even_batches)
        _warn_if_unsharded_under_ddp(pipe)

    @property
    def batch_size(self) -> int | None:
        """Samples per batch, as ``.batch(size)`` set it (None: the pipeline does not batch)."""
        return self._pipe._plan.part.batch_size

    @property
    def drop_last(self) -> bool:
        """Whether a last partial batch is dropped (``.batch(..., drop_remainder=True)``)."""
        return self._pipe._plan.drop_remainder

    @property
    def sampler(self):
        """A stand-in: a ``RandomSampler`` subclass if the pipeline shuffles, else ``SequentialSampler``; ``len()`` = samples per epoch."""
        return _torch_attributes.sampler_for(self.dataset)

    @property
    def num_workers(self) -> int:
        """Workers of the pipeline's map: running now, else ``map(workers=)``, else one per core; 0 without a map."""
        return _torch_attributes.num_workers(self._pipe)

    def __len__(self) -> int:
        """Batches per epoch (the same on every rank of a sharded pipeline).

        Raises:
            TypeError: the pipeline's length is unknown (generator source or ``filter``).
        """
        steps = steps_per_epoch(self._pipe, self.even_batches)
        if steps is None:
            raise TypeError(f"len() is unknown for this pipeline: {_why_unknown(self._pipe)}")
        return steps

    def set_epoch(self, epoch: int) -> None:
        """Make the next ``iter()`` epoch ``epoch`` (as ``DistributedSampler.set_epoch`` does).

        Optional: without it, each ``iter()`` is the pipeline's next epoch.
        Call it when resuming training at epoch ``epoch``, so the shuffle
        and augmentation match those of an uninterrupted run. The same as
        ``pipe.set_epoch(epoch)``.

        Raises:
            ValueError: ``epoch`` is not an integer >= 0.
        """
        self._pipe.set_epoch(epoch)

    def __iter__(self):
        return self.convert(self._position.epoch(even_steps(self._pipe, self.even_batches)))

    def close_epoch(self) -> None:
        """Stop the epoch being read now: its queued tasks are cancelled, its running ones stop at their next sample.

        For a framework that stops reading without closing its iterator
        (Lightning's ``limit_val_batches``: `feedline.adapters.lightning`);
        reading that iterator on ends it. Nothing happens between epochs.
        """
        if self._position.iterator is not None:
            self._position.iterator.close()

    def state_dict(self) -> dict:
        """Where the loader stands, for ``torch.distributed.checkpoint``, Lightning or ``torch.save``.

        Taken mid-epoch, `load_state_dict` makes the next ``iter()``
        continue right after the last batch handed out, and later epochs
        follow; taken between epochs, the next ``iter()`` starts the next
        epoch. Works at any backend and worker count, before and after.
        Details: docs/checkpoints.md.

        Raises:
            FeedlineError: the loader stages batches on a device ahead of
                the step (their position is not tracked yet); checkpoint
                with ``device=None`` and move batches in the step.
        """
        if self.device is not None and self.device.type != "cpu":
            raise FeedlineError(
                f"state_dict() of a loader staging batches on {self.device} ahead of the step is not "
                "supported yet (the pipeline's position is ahead of the batch handed out); use "
                "pipe.torch() without device= and move each batch with .to(device) in the training step"
            )
        return self._position.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        """Make the next ``iter()`` continue from ``state_dict`` (see `state_dict`).

        Raises:
            ValueError: the state is not a loader state of this version, or
                was taken on another pipeline (the field and the fix named).
        """
        self._position.load_state_dict(state_dict, "TorchLoader")

    def convert(self, batches):
        """Tensors (on ``device``, ``depth`` ahead) from an iterator of NumPy batches, which it closes."""
        if self.device is None or self.device.type == "cpu":
            return self._host(batches)
        return self._ahead(batches)

    def _host(self, batches):
        torch = sys.modules["torch"]
        pin = self.pin_memory
        with contextlib.closing(batches):
            for batch in batches:
                tensors = map_structure(_to_tensor, batch)
                if pin:
                    tensors = map_structure(lambda t: t.pin_memory() if isinstance(t, torch.Tensor) else t, tensors)
                del batch
                yield tensors

    def _ahead(self, batches):
        """Stage ``depth`` batches on the device ahead of the one handed out (see the module docstring).

        On CUDA the staging (the pinned copy, one memcpy of the whole
        batch, and queueing its device copy) runs on a helper thread, so
        the training loop's thread only hands batches out: measured on an
        H100 with ResNet-50 at batch 256, staging in the loop's thread cost
        it 12 ms per step (benchmarks/gpu_training.py). ``batches`` is still
        iterated here, in the caller's thread, so its errors, its order and
        its closing are the caller's as before; the helper only copies.
        """
        torch = sys.modules["torch"]
        device, pin = self.device, self.pin_memory
        cuda = device.type == "cuda"
        stream = torch.cuda.Stream(device) if cuda else None

        def put(leaf):
            tensor = _to_tensor(leaf)
            if not isinstance(tensor, torch.Tensor):
                return tensor
            if pin:
                tensor = tensor.pin_memory()
            return tensor.to(device, non_blocking=pin)

        def stage(batch):
            if not cuda:
                return map_structure(put, batch), None
            with torch.cuda.stream(stream):
                moved = map_structure(put, batch)
                event = torch.cuda.Event()
                event.record(stream)
            return moved, event

        def hand_out(moved, event):
            if event is not None:
                current = torch.cuda.current_stream(device)
                current.wait_event(event)
                map_structure(lambda t: t.record_stream(current) if isinstance(t, torch.Tensor) else None, moved)
            return moved

        # Exit order matters: the helper finishes (its copies read the batches' shared memory) before `batches` closes.
        with contextlib.closing(batches), OrderedHelper(stage, threaded=cuda, name="feedline-to-device") as staging:
            for moved, event in staging.ahead(batches, self.depth):
                yield hand_out(moved, event)

    def __repr__(self) -> str:
        where = "cpu" if self.device is None else str(self.device)
        return f"TorchLoader(device={where}, pin_memory={self.pin_memory}, depth={self.depth}) over\n{self._pipe!r}"


def _to_tensor(leaf):
    """A NumPy array as a tensor sharing its memory; other leaves unchanged."""
    if not isinstance(leaf, np.ndarray) or leaf.dtype.kind not in "biufc":
        return leaf
    torch = sys.modules["torch"]
    if not leaf.flags.writeable:
        leaf = leaf.copy()  # torch tensors are writable; never alias read-only (e.g. memory-mapped) data
    if not leaf.dtype.isnative:
        leaf = leaf.astype(leaf.dtype.newbyteorder("="))
    return torch.from_numpy(leaf)


def _why_unknown(pipe) -> str:
    try:
        len(pipe)
    except TypeError as e:
        return str(e)
    return "unknown"


def _warn_if_unsharded_under_ddp(pipe) -> None:
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized() or dist.get_world_size() < 2:
        return
    from ._common import _shards

    if not any(step.count > 1 for step in _shards(pipe)):
        warnings.warn(
            f"torch.distributed runs {dist.get_world_size()} ranks but this pipeline has no shard() step, "
            "so every rank sees every sample. Add .shard() before .batch() (rank and world size are "
            "read from torch.distributed) unless the ranks are meant to see the same data.",
            RuntimeWarning,
            stacklevel=5,  # the caller of pipe.torch()
        )


def to_torch(pipe, device=None, pin_memory=None, *, depth: int = DEFAULT_DEPTH, even_batches: bool = True) -> TorchLoader:
    """Iterate ``pipe`` as torch tensors, copied to ``device`` ahead of time.

    Args:
        pipe: the pipeline.
        device: None (or ``"cpu"``) for CPU tensors that share memory with
            feedline's batches; a CUDA device (``"cuda"``, ``"cuda:1"``,
            a `torch.device`) to copy each batch there ``depth`` steps ahead,
            on a side stream; any other device is copied with ``.to()``.
        pin_memory: stage host copies in pinned memory (default: True for
            a CUDA device). True with ``device=None`` yields pinned CPU tensors.
        depth: batches staged on the device ahead of the one handed out.
        even_batches: for a sharded pipeline, yield the same number of
            batches on every rank (default); False yields each rank's own.

    Returns:
        A `TorchLoader`: each ``iter()`` is the next epoch; ``len()`` is
        batches per epoch.

    Raises:
        ImportError: PyTorch is not installed (``pip install 'feedline[torch]'``).
        RuntimeError: a CUDA device or pinned memory without CUDA.

    >>> import numpy as np, feedline as fl
    >>> loader = fl.from_arrays(np.arange(6, dtype=np.float32)).batch(4).torch()
    >>> [b.tolist() for b in loader]
    [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]
    """
    return TorchLoader(pipe, device=device, pin_memory=pin_memory, depth=depth, even_batches=even_batches)
