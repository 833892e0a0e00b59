"""`StoreError`: a store cannot be written or read as asked."""

from __future__ import annotations

from .._errors import FeedlineError

__all__ = ["StoreError"]


class StoreError(FeedlineError):
    """A store is missing, incomplete, damaged, of a newer format, or cannot hold the data.

    The message names the store (and the file, field or sample) and says
    what to do.
    """
