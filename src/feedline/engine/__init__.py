"""The consumer's side: the runtime (executor, depth), backend choice and tuning, the epoch iterator.

Sees backends only through `feedline.backends.Executor` and `make_executor`,
and the pipeline only through its compiled `Plan`.
"""

from ._autotune import DepthTuner, WorkerTuner
from ._iterator import STATE_VERSION, EpochIterator
from ._runtime import Runtime
from ._stats import Stats

__all__ = ["STATE_VERSION", "DepthTuner", "EpochIterator", "Runtime", "Stats", "WorkerTuner"]
