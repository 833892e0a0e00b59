"""The description layer: `Pipeline`, its step records, and compiling them into a `Plan`.

Imported lazily (PEP 562): a process worker unpickles step records and the
`WorkerPart` from here and should not pay for the pipeline facade and the
engine behind it.
"""

import importlib

_WHERE = {"Pipeline": "._pipeline", "Ray": "._settings", "compile_plan": "._plan"}

__all__ = ["Pipeline", "Ray", "compile_plan"]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'feedline.pipeline' has no attribute {name!r}")
    return getattr(importlib.import_module(module, __name__), name)
