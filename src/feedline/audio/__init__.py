"""Audio for feedline pipelines: decode WAV/FLAC, crop, log-mel spectrograms.

Decoding uses soundfile (libsndfile), imported on first use; install it with
``pip install "feedline[audio]"``. Every decoder returns ``(channels,
frames)`` arrays, float32 in ``[-1, 1)`` or int16. `load_random_crop` seeks
and decodes only the window it returns. `LogMel` computes its filterbank and
window once per configuration and process, and pickles as its settings, so
it works on every backend.

A WAV pipeline (1 s random crop, 64-band log-mel, batches of 128), deterministic for any backend and worker count::

    import feedline as fl
    from feedline.audio import LogMel, load_random_crop

    logmel = LogMel(sample_rate=16000, n_mels=64)

    def features(path, rng):
        return logmel(load_random_crop(path, 16000, rng, sample_rate=16000))

    pipe = fl.from_files("clips/**/*.wav").shuffle(seed=0).map(features).batch(128)

See docs/audio.md for the choice of library, the measurements and the layout.
"""

from ._crop import random_crop
from ._decode import AudioInfo, audio_info, load_audio, load_random_crop
from ._errors import AudioDecodeError
from ._logmel import LogMel

__all__ = [
    "AudioDecodeError",
    "AudioInfo",
    "LogMel",
    "audio_info",
    "load_audio",
    "load_random_crop",
    "random_crop",
]
