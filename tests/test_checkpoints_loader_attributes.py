"""`pipe.torch()`'s loader answers what code written for a DataLoader reads: dataset, batch_size, drop_last, sampler, num_workers."""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl

torch = pytest.importorskip("torch")


def _loader(samples=10, batch=4, drop=False, shuffle=True, workers=3):
    pipe = fl.from_arrays(np.arange(samples, dtype=np.float32))
    if shuffle:
        pipe = pipe.shuffle(seed=1)
    return pipe.map(lambda v: v, workers=workers, backend="thread").batch(batch, drop_remainder=drop).torch()


def _script_accuracy(loader) -> float:
    """A training script's epoch summary, as written for a DataLoader."""
    seen = sum(int(batch.shape[0]) for batch in loader)
    return seen / len(loader.dataset)


@pytest.mark.parametrize("drop", [False, True])
def test_len_of_dataset_is_the_samples_an_epoch_yields(drop):
    loader = _loader(drop=drop)
    assert len(loader.dataset) == (8 if drop else 10)
    assert _script_accuracy(loader) == 1.0
    assert loader.batch_size == 4 and loader.drop_last is drop
    assert len(loader.sampler) == len(loader.dataset)


def test_sharded_loader_dataset_counts_this_ranks_samples():
    pipe = fl.from_arrays(np.arange(10, dtype=np.float32)).shard(index=1, count=2).batch(2)
    loader = pipe.torch()
    assert len(loader.dataset) == sum(int(b.shape[0]) for b in loader) == 5


def test_lightning_reads_shuffling_from_the_sampler():
    data = pytest.importorskip("lightning.pytorch.utilities.data")
    fabric_data = pytest.importorskip("lightning.fabric.utilities.data")
    shuffled, ordered = _loader(shuffle=True), _loader(shuffle=False)
    assert data._is_dataloader_shuffled(shuffled) is True
    assert data._is_dataloader_shuffled(ordered) is False
    assert isinstance(shuffled.sampler, torch.utils.data.RandomSampler)
    assert isinstance(ordered.sampler, torch.utils.data.SequentialSampler)
    assert shuffled.batch_sampler is None
    assert fabric_data.has_len(shuffled) and fabric_data.sized_len(shuffled) == 3


def test_sampler_stand_in_refuses_to_draw_indices():
    with pytest.raises(TypeError, match="stand-in"):
        iter(_loader().sampler)


def test_num_workers_follows_the_map():
    assert _loader(workers=3).num_workers == 3
    assert fl.from_arrays(np.arange(4.0)).batch(2).torch().num_workers == 0  # no map: all in the loop's process
    loader = _loader(workers=2)
    next(iter(loader))
    assert loader.num_workers == 2


def test_unknown_length_raises_type_error_naming_the_reason():
    loader = fl.from_arrays(np.arange(6.0)).filter(lambda v: v > 2).batch(2).torch()
    with pytest.raises(TypeError, match="filter"):
        len(loader.dataset)
