"""feedline: keep accelerators fed.

An input pipeline (read, decode, augment, batch) that runs on every core,
ahead of the training step, with the same results for any worker count,
on every OS.

>>> import numpy as np, feedline as fl
>>> pipe = fl.from_arrays(np.arange(8)).map(lambda x: x * 2).batch(4)
>>> [b.tolist() for b in pipe]
[[0, 2, 4, 6], [8, 10, 12, 14]]
"""

from ._errors import DecodeError, FeedlineError, RemoteTraceback, SampleError, WorkerError
from ._iterator import EpochIterator
from ._pipeline import Pipeline
from ._stats import Stats
from .adapters.keras import from_keras_sequence
from .sources import from_arrays, from_files, from_generator, from_sequence

__version__ = "0.1.0"

__all__ = [
    "DecodeError",
    "EpochIterator",
    "FeedlineError",
    "Pipeline",
    "RemoteTraceback",
    "SampleError",
    "Stats",
    "WorkerError",
    "from_arrays",
    "from_files",
    "from_generator",
    "from_keras_sequence",
    "from_sequence",
]
