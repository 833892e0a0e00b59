"""The Ray backend: the per-sample work in Ray actors, on any node of a cluster.

`_executor` is the consumer's side (connect, actors, death handling),
`_actor` the class each actor runs. Ray itself is imported only when an
executor starts.
"""

from ._executor import RayExecutor, connect, plan_actors

__all__ = ["RayExecutor", "connect", "plan_actors"]
