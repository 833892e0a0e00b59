"""Lazy imports of optional libraries, with an error that names the extra.

The core of feedline needs only NumPy and cloudpickle. Everything else (the
frameworks, pyarrow, the image and audio decoders) is imported on first use,
so ``import feedline`` stays fast and works without them; a missing library
raises an `ImportError` that names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["require"]


def require(module: str, extra: str, purpose: str, *, package: str | None = None) -> ModuleType:
    """Import ``module``, or raise an `ImportError` that names the extra to install.

    Args:
        module: the module to import, e.g. ``"pyarrow.parquet"``.
        extra: the feedline extra that installs it (``pip install 'feedline[extra]'``).
        purpose: what needs it, the start of the error message.
        package: the name to show when the pip name differs from the module
            (``"cv2"`` is ``"opencv-python-headless"``, ``"PIL.Image"`` is
            ``"Pillow"``); default: the module's top-level package.

    Returns:
        The imported module.

    Raises:
        ImportError: the module cannot be imported; the original error is its cause.

    >>> require("numpy", "core", "this example").__name__
    'numpy'
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        name = package or module.split(".")[0]
        raise ImportError(
            f"{purpose} needs {name}, which cannot be imported here ({e}). "
            f"Install it with: pip install 'feedline[{extra}]'"
        ) from e
