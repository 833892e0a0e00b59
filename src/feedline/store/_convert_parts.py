"""What both converters (`._convert` for folders, `._convert_shards` for shard files) share.

The per-file work that runs in the workers (`Decode`, and `Unreadable` for
the files it skips), the summary the command prints (`ConvertSummary`) and
the progress bar. Both converters import this module; it imports neither,
so imports flow one way.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from dataclasses import dataclass, field

import numpy as np

from .._errors import DecodeError
from ._images import EncodedImage, encode_image

__all__ = ["ConvertSummary", "Decode", "Unreadable", "check_fit", "human_bytes", "progress_bar", "reason_of", "skips_unannounced",
           "store_bytes"]


def human_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 kB'`` (powers of 1000, as disk sizes are sold).

    >>> human_bytes(999), human_bytes(1536), human_bytes(2.5e9)
    ('999 B', '1.5 kB', '2.5 GB')
    """
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


@dataclass
class ConvertSummary:
    """What `convert` did; ``str()`` is the summary the command prints."""

    source: str
    destination: str
    kind: str
    samples: int
    bytes: int
    seconds: float
    skipped: list = field(default_factory=list)  # [(path, reason)]
    classes: list | None = None
    outside_classes: list = field(default_factory=list)  # files beside the class folders, left out (no class)

    def __str__(self) -> str:
        per = self.bytes / self.samples if self.samples else 0
        lines = [
            f"feedline convert: {self.samples} {self.kind} samples from {self.source} -> {self.destination}",
            f"  {human_bytes(self.bytes)} on disk, {human_bytes(per)} per sample; {self.seconds:.1f} s, "
            f"{self.samples / max(self.seconds, 1e-9):.0f} samples/s",
        ]
        if self.classes:
            shown = ", ".join(self.classes[:10]) + (" ..." if len(self.classes) > 10 else "")
            lines.append(f"  {len(self.classes)} classes: {shown}")
        if self.outside_classes:
            lines.append(f"  left out {len(self.outside_classes)} files that lie directly in the source folder, outside the "
                         "class folders (they have no class; move them into a class folder to convert them):")
            for path in self.outside_classes[:20]:
                lines.append(f"    {path}")
            if len(self.outside_classes) > 20:
                lines.append(f"    ... and {len(self.outside_classes) - 20} more (all in the store's meta['outside_classes'])")
        if self.skipped:
            lines.append(f"  skipped {len(self.skipped)} files that could not be read:")
            for path, reason in self.skipped[:20]:
                lines.append(f"    {path}: {reason}")
            if len(self.skipped) > 20:
                lines.append(f"    ... and {len(self.skipped) - 20} more (all in the store's meta['skipped'])")
        else:
            lines.append("  skipped 0 files")
        return "\n".join(lines)


def check_fit(fit: str) -> None:
    """Refuse a ``fit`` other than the two ways an image is made a size, before any file is read."""
    if fit not in ("resize", "center-crop"):
        raise ValueError(f"fit must be 'resize' or 'center-crop', got {fit!r}")


def store_bytes(dst: str) -> int:
    """The bytes the finished store takes on disk, for the summary."""
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, names in os.walk(dst) for f in names)


@contextlib.contextmanager
def skips_unannounced():
    """Silence the pipeline's "feedline skipped" warnings: the summary lists every skipped file instead."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="feedline skipped", category=RuntimeWarning)
        yield


# ------------------------------------------------------------ decoding (in workers)
class Decode:
    """The per-file work of ``convert``: decode, fit to a size, encode; runs in the workers.

    A plain class (not a closure) so it pickles small and the same on every backend.
    """

    def __init__(self, kind: str, size, fit: str, image_encoding: str, audio_dtype: str, sample_rate, labelled: bool,
                 strict: bool = True):
        self.kind, self.size, self.fit, self.image_encoding = kind, size, fit, image_encoding
        self.audio_dtype, self.sample_rate, self.labelled, self.strict = audio_dtype, sample_rate, labelled, strict

    def __call__(self, sample):
        try:
            return self._convert(sample)
        except DecodeError as e:  # the summary names the file; say why, without a decoder's advice for Python code
            raise Unreadable(_why(e, self.kind)) from None

    def _convert(self, sample):
        path, label = sample if self.labelled else (sample, None)
        if self.kind == "audio":
            from ..audio import load_audio

            value = load_audio(path, dtype=self.audio_dtype, sample_rate=self.sample_rate)
            out = {"audio": value}
        else:
            value = self._image(path)
            if self.image_encoding in ("raw", "zstd", "lz4"):
                out = {"image": value}
            else:
                data = encode_image(value, self.image_encoding, "image")
                out = {"image": EncodedImage(data, value.shape, value.dtype, self.image_encoding)}
        if self.labelled:
            out["label"] = np.int64(label)  # as batch() would make it: reads give the same type either way
        return out

    def _image(self, path: str) -> np.ndarray:
        import feedline.vision as fv

        if self.size is None:
            return fv.decode(path, strict=self.strict)
        h, w = self.size
        if self.fit == "resize":
            return fv.resize(path, (h, w), strict=self.strict)
        height, width = fv.image_size(path)
        scale = max(h / height, w / width)  # the smallest resize that covers the crop
        covering = (max(h, round(height * scale)), max(w, round(width * scale)))
        return fv.center_crop(fv.resize(path, covering, strict=self.strict), (h, w))


class Unreadable(Exception):
    """A file ``convert`` skips: its message is the reason the summary prints after the file's name."""


def _why(error: DecodeError, kind: str) -> str:
    """A decoder's reason without its advice (which speaks of ``map(..., on_error=...)``)."""
    what = "audio" if kind == "audio" else getattr(error, "format", None) or "an image"
    return f"cannot decode as {({'jpeg': 'JPEG', 'png': 'PNG'}).get(what, what)}: {error.reason}"


def reason_of(text: str) -> str:
    """The reason of a skip as the pipeline records it (``"step: Type: message"``), for the summary."""
    text = text.split(": ", 1)[-1]
    return text.split(": ", 1)[1] if text.startswith(f"{Unreadable.__name__}: ") else text


# ------------------------------------------------------------ progress
class _NoBar:
    """The progress bar when none is shown."""

    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(total: int, show: bool):
    """A tqdm bar over ``total`` files, or one that shows nothing (``show=False``, or tqdm missing: with a warning)."""
    if not show:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        warnings.warn("no progress bar: tqdm is not installed (pip install 'feedline[store]')", RuntimeWarning, stacklevel=3)
        return _NoBar()
    return tqdm(total=total, unit="file", desc="feedline convert", dynamic_ncols=True)
