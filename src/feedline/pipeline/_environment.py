"""Data-parallel rank and world size, read from the training environment for ``shard()``."""

from __future__ import annotations

import os
import sys

from .._errors import FeedlineError

__all__ = ["rank_from_environment"]


def rank_from_environment() -> tuple[int, int]:
    """(rank, world size) from torch.distributed, JAX, Ray Train, or RANK/WORLD_SIZE."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    jax = sys.modules.get("jax")
    if jax is not None and jax.process_count() > 1:
        return jax.process_index(), jax.process_count()
    train = sys.modules.get("ray.train")
    if train is not None:
        try:
            context = train.get_context()
        except RuntimeError:  # not inside a Ray Train worker (e.g. the driver that built the trainer)
            context = None
        size = context.get_world_size() if context is not None else None
        if isinstance(size, int) and size > 1:
            return context.get_world_rank(), size
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    raise FeedlineError(
        "shard() found no rank: torch.distributed is not initialised, JAX runs one process, this is "
        "not a Ray Train worker, and "
        "RANK/WORLD_SIZE are not set. Pass shard(index, count) explicitly."
    )
