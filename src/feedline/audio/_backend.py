"""The decoding library, imported on first use: soundfile (libsndfile).

Why soundfile: one well-kept library (libsndfile, bundled in the wheels for
Linux, macOS and Windows) decodes WAV and FLAC, seeks to any frame in both
(sample-accurate, through FLAC's seek table), converts to float32 or int16
in C, and its calls go through cffi, which releases the GIL, so the thread
backend runs decodes in parallel. See docs/audio.md for the measurements.
(16-bit PCM WAV files given by path are read by `feedline.audio._wav`
instead, faster on short clips, and need no soundfile at all.)

Importing ``feedline.audio`` does not import soundfile: ``LogMel`` and
``random_crop`` work on arrays without it.
"""

from __future__ import annotations

from .._optional import require

__all__ = ["EXTRA_HINT", "soundfile", "supported_formats"]

EXTRA_HINT = 'install it with: pip install "feedline[audio]" (or pip install soundfile)'

_module = None


def soundfile():
    """The ``soundfile`` module, imported once; ImportError naming the extra if missing."""
    global _module
    if _module is None:
        # An OSError (soundfile is there but libsndfile is not) is left as is:
        # it says what is missing. Only an ImportError gets the extra's name.
        try:
            _module = require("soundfile", "audio", "feedline.audio (decoding audio files)")
        except ImportError as e:
            # docs/audio.md writes the command with double quotes, which also work in Windows' cmd
            raise ImportError(f"{e} (in Windows' cmd: pip install \"feedline[audio]\"; or pip install soundfile)") from e.__cause__
    return _module


def supported_formats() -> str:
    """One line naming the formats that can be read, for error messages."""
    sf = soundfile()
    others = sorted(set(sf.available_formats()) - {"WAV", "FLAC", "RAW"})
    return (
        f"feedline.audio reads WAV and FLAC (tested), and the other formats of libsndfile "
        f"{sf.__libsndfile_version__}: {', '.join(others)}"
    )
