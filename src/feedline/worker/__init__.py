"""The worker layer: the kernel that runs a task anywhere, and the protocol around it.

Imports only `feedline._tree`, `feedline._errors` and `feedline.transport`,
so a process worker or Ray actor loads little beyond NumPy.
"""

from .._tree import BatchGroup
from ._kernel import Cancelled, StopHere, joins_rows, run_task, sample_rng, splittable
from ._protocol import Result, Task, TaskError

__all__ = ["BatchGroup", "Cancelled", "Result", "StopHere", "Task", "TaskError", "joins_rows", "run_task", "sample_rng", "splittable"]
