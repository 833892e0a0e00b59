"""Orbax: the pipeline's position saved and restored inside an ``ocp.CheckpointManager``, beside the model.

`PipelineSave` / `PipelineRestore` are ``ocp.args`` registered with
`PipelineCheckpointHandler`, so a manager picks the handler from the
arguments, as for Grain's iterators. The item is whatever you iterate that
has ``state_dict()`` / ``load_state_dict()``: ``pipe.jax()``'s loader, the
pipeline itself, or ``pipe.torch()``'s loader. Each JAX process writes its own file
(``process_<i>-of-<n>.json``): a rank's position describes its own share.
docs/checkpoints.md, "JAX: Orbax".
"""

from __future__ import annotations

import functools
import json

from ._common import require

__all__ = ["PipelineCheckpointHandler", "PipelineRestore", "PipelineSave"]


def PipelineSave(item):  # noqa: N802 (an ocp.args class to its users, made on first use)
    """``ocp.args`` that save ``item.state_dict()`` (``pipe.jax()``'s loader, the pipeline, or ``pipe.torch()``'s loader).

    >>> # mngr.save(step, args=ocp.args.Composite(params=ocp.args.StandardSave(params), data=PipelineSave(loader)))
    """
    return _classes()[1](item)


def PipelineRestore(item):  # noqa: N802
    """``ocp.args`` that restore into ``item`` (built as when saved): its next ``iter()`` continues there; returns ``item``."""
    return _classes()[2](item)


def PipelineCheckpointHandler():  # noqa: N802
    """The handler, for ``ocp.CheckpointManager(..., item_handlers={"data": PipelineCheckpointHandler()})``."""
    return _classes()[0]()


@functools.cache
def _classes():
    ocp = require("orbax.checkpoint", "orbax", "feedline.adapters.orbax", package="orbax-checkpoint")
    import dataclasses

    import jax

    def path_of(directory):
        return directory / f"process_{jax.process_index()}-of-{jax.process_count()}.json"

    class Handler(ocp.CheckpointHandler):
        """Writes one JSON file per JAX process: ``{"feedline": 1, "position": "<JSON text>"}``."""

        def save(self, directory, item=None, args=None):
            item = args.item if args is not None else item
            path_of(directory).write_text(json.dumps(item.state_dict()))

        def restore(self, directory, item=None, args=None):
            item = args.item if args is not None else item
            path = path_of(directory)
            if not path.exists():
                saved = sorted(p.name for p in directory.iterdir())
                raise FileNotFoundError(
                    f"no feedline position for this process in {directory} (wanted {path.name}, found {saved}): "
                    "restore on as many JAX processes as saved, or see docs/checkpoints.md for other rank counts"
                )
            try:
                state = json.loads(path.read_text())
            except ValueError as e:
                raise ValueError(f"{path} is not the JSON PipelineSave writes ({e}); the checkpoint is damaged") from e
            item.load_state_dict(state)
            return item

        def metadata(self, directory):
            return None

    Handler.__name__ = Handler.__qualname__ = "PipelineCheckpointHandler"

    @ocp.args.register_with_handler(Handler, for_save=True)
    @dataclasses.dataclass
    class Save(ocp.args.CheckpointArgs):
        item: object

    @ocp.args.register_with_handler(Handler, for_restore=True)
    @dataclasses.dataclass
    class Restore(ocp.args.CheckpointArgs):
        item: object

    Save.__name__ = Save.__qualname__ = "PipelineSave"
    Restore.__name__ = Restore.__qualname__ = "PipelineRestore"
    return Handler, Save, Restore
