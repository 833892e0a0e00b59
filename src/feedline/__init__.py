"""feedline: keep accelerators fed.

An input pipeline (read, decode, augment, batch) that runs on every core,
ahead of the training step, with the same results for any worker count,
on every OS.

>>> import numpy as np, feedline as fl
>>> pipe = fl.from_arrays(np.arange(8)).map(lambda x: x * 2).batch(4)
>>> [b.tolist() for b in pipe]
[[0, 2, 4, 6], [8, 10, 12, 14]]
"""

import importlib
from typing import TYPE_CHECKING

# Public names are imported on first use (PEP 562). A process worker imports
# `feedline.backends.process._main`, which imports this package first: keeping it
# lazy spares every worker the consumer-side modules (a large share of a worker's
# start; benchmarks/RESULTS.md, "Where the defaults come from").
_WHERE = {
    "DecodeError": "._errors",
    "EpochIterator": ".engine",
    "FeedlineError": "._errors",
    "Pipeline": ".pipeline",
    "Ray": ".pipeline",
    "RemoteTraceback": "._errors",
    "SampleError": "._errors",
    "SharedMemoryFull": "._errors",
    "Stats": ".engine",
    "WorkerError": "._errors",
    "combine_states": ".engine._elastic",
    "concatenate": ".sources",
    "from_array_record": ".sources",
    "from_arrays": ".sources",
    "from_files": ".sources",
    "from_generator": ".sources",
    "from_hf_dataset": ".store",
    "from_keras_sequence": ".adapters._keras_sequence",
    "from_parquet": ".store",
    "from_ray_dataset": ".sources._ray",
    "from_sequence": ".sources",
    "from_store": ".store",
    "from_tfrecord": ".sources",
    "from_webdataset": ".sources",
    "mix": ".sources",
    "get_worker_info": ".worker._info",
}

if TYPE_CHECKING:  # for type checkers and IDEs; at run time see __getattr__
    from ._errors import (
        DecodeError,
        FeedlineError,
        RemoteTraceback,
        SampleError,
        SharedMemoryFull,
        WorkerError,
    )
    from .adapters._keras_sequence import from_keras_sequence
    from .engine import EpochIterator, Stats
    from .engine._elastic import combine_states
    from .pipeline import Pipeline, Ray
    from .sources import from_array_record, from_arrays, from_files, from_generator, from_sequence, from_tfrecord, from_webdataset
    from .sources._compose import concatenate, mix
    from .sources._ray import from_ray_dataset
    from .store import from_hf_dataset, from_parquet, from_store
    from .worker._info import get_worker_info


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline' has no attribute {name!r}")
    from ._switch_interval import short_switch_interval

    with short_switch_interval():  # imports read files: beside busy threads each read waits for the GIL
        value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list:
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0"

__all__ = [
    "DecodeError",
    "EpochIterator",
    "FeedlineError",
    "Pipeline",
    "Ray",
    "RemoteTraceback",
    "SampleError",
    "SharedMemoryFull",
    "Stats",
    "WorkerError",
    "combine_states",
    "concatenate",
    "from_array_record",
    "from_arrays",
    "from_files",
    "from_generator",
    "from_hf_dataset",
    "from_keras_sequence",
    "from_parquet",
    "from_ray_dataset",
    "from_sequence",
    "from_store",
    "from_tfrecord",
    "from_webdataset",
    "mix",
    "get_worker_info",
]

if sorted(__all__) != sorted(_WHERE):  # pragma: no cover - a name added to one list only
    raise ImportError("feedline/__init__.py: __all__ and _WHERE disagree")
