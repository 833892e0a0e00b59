"""The error raised for an image that cannot be decoded."""

from __future__ import annotations

from .._errors import DecodeError, FeedlineError

__all__ = ["ImageDecodeError"]


class ImageDecodeError(DecodeError):
    """An image file (or buffer) could not be decoded.

    The message names the file, the format it was read as and the decoder's
    reason. Inside a pipeline it is an ordinary exception of a map function,
    so it follows ``map(..., on_error=...)``: ``"skip"`` drops the sample and
    counts it, ``"raise"`` reports it as a `feedline.SampleError`.

    Attributes:
        name: the file path, or ``"<N bytes>"`` for an in-memory buffer.
        format: ``"jpeg"``, ``"png"``, or what the first bytes look like.
        reason: the decoder's own words.

    >>> import feedline.vision as fv
    >>> try:
    ...     fv.decode(b"not an image")
    ... except fv.ImageDecodeError as e:
    ...     print(e.name, e.format)
    <12 bytes> an image
    """

    def __init__(self, name: str, format: str, reason: str, hint: str | None = None):
        what = {"jpeg": "JPEG", "png": "PNG"}.get(format, format)
        hint = hint or "the file is damaged or not an image: re-create or remove it, or skip such samples with map(..., on_error='skip')"
        shown = name if name.startswith("<") else repr(name)
        FeedlineError.__init__(self, f"cannot decode {shown} as {what}: {reason}; {hint}")
        self.name, self.format, self.reason, self.hint = name, format, reason, hint
        self.path = name  # as in feedline.DecodeError, the base class for every media

    def __reduce__(self):  # keep the attributes when the error travels from a process worker
        return (type(self), (self.name, self.format, self.reason, self.hint))
