"""Lazy import of pyarrow, with an error that names the extra to install.

``import feedline`` (and ``import feedline.store``) never imports pyarrow:
the core needs only NumPy, and pyarrow is a large import.
"""

from __future__ import annotations

import functools

from .._optional import require

__all__ = ["pyarrow", "pyarrow_ipc", "pyarrow_parquet"]


def _load(module: str):
    return require(module, "store", "feedline's store (and its Parquet and Hugging Face readers)", package="pyarrow")


@functools.cache
def pyarrow():
    """The ``pyarrow`` module."""
    return _load("pyarrow")


@functools.cache
def pyarrow_ipc():
    """``pyarrow.ipc``: the Arrow IPC file and stream formats."""
    return _load("pyarrow.ipc")


@functools.cache
def pyarrow_parquet():
    """``pyarrow.parquet``."""
    return _load("pyarrow.parquet")
