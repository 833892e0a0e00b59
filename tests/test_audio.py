"""feedline.audio: decoding WAV/FLAC, windowed reads, crops, log-mel, failures.

Every audio file is written by the test itself with soundfile, in tmp_path.
Numbers are checked against the data written and, for the spectrogram,
against librosa.
"""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import feedline as fl
from feedline import SampleError
from feedline.audio import (
    AudioDecodeError,
    LogMel,
    audio_info,
    load_audio,
    load_random_crop,
    random_crop,
)

sf = pytest.importorskip("soundfile")

RATE = 16000


def pcm16(frames: int, channels: int, seed: int = 0) -> np.ndarray:
    """``(frames, channels)`` int16 noise covering the whole range, soundfile's layout."""
    rng = np.random.default_rng(seed)
    data = rng.integers(-32768, 32768, size=(frames, channels), dtype=np.int16)
    data[:2] = [[-32768] * channels, [32767] * channels]  # the extremes are exact too
    return data


def write(path, data, rate=RATE, fmt="WAV", subtype="PCM_16") -> str:
    sf.write(str(path), data, rate, format=fmt, subtype=subtype)
    return str(path)


def truncate(path, keep: float) -> str:
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: int(len(data) * keep)])
    return str(path)


# ------------------------------------------------------------------ decoding
@pytest.mark.parametrize("fmt,ext", [("WAV", "wav"), ("FLAC", "flac")])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("rate", [8000, 16000, 44100])
def test_decodes_pcm16_as_channels_first_int16_and_float32(fmt, ext, channels, rate, tmp_path):
    data = pcm16(rate // 2 + 7, channels, seed=rate + channels)
    path = write(tmp_path / f"a.{ext}", data, rate, fmt)

    as_int = load_audio(path, dtype="int16")
    assert as_int.dtype == np.int16 and as_int.shape == (channels, len(data))
    assert as_int.flags.c_contiguous
    np.testing.assert_array_equal(as_int, data.T)

    as_float = load_audio(path)
    assert as_float.dtype == np.float32 and as_float.shape == (channels, len(data))
    np.testing.assert_array_equal(as_float, data.T.astype(np.float32) / 32768)
    assert as_float.min() == -1.0 and as_float.max() < 1.0

    info = audio_info(path)
    assert (info.frames, info.sample_rate, info.channels, info.format, info.subtype) == (len(data), rate, channels, fmt, "PCM_16")
    assert info.duration == pytest.approx(len(data) / rate)


def test_decodes_float_and_24_bit_files_exactly(tmp_path):
    rng = np.random.default_rng(1)
    floats = rng.uniform(-1, 1, size=(3000, 3)).astype(np.float32)
    path = write(tmp_path / "f.wav", floats, subtype="FLOAT")
    np.testing.assert_array_equal(load_audio(path), floats.T)
    pcm24 = (rng.integers(-(2**23), 2**23, size=(3000, 2)) * 256).astype(np.int32)
    path = write(tmp_path / "p24.flac", pcm24, fmt="FLAC", subtype="PCM_24")
    np.testing.assert_array_equal(load_audio(path), (pcm24.T / 2**31).astype(np.float32))


def test_decodes_bytes_and_file_objects_like_paths(tmp_path):
    path = write(tmp_path / "a.flac", pcm16(5000, 2), fmt="FLAC")
    blob = Path(path).read_bytes()
    with open(path, "rb") as f:
        from_object = load_audio(f, start=100, frames=300)
    np.testing.assert_array_equal(load_audio(blob, start=100, frames=300), load_audio(path, start=100, frames=300))
    np.testing.assert_array_equal(from_object, load_audio(path, start=100, frames=300))


@pytest.mark.parametrize("channels", [1, 2, 3])
def test_fast_pcm16_wav_reader_equals_libsndfile_bit_for_bit(channels, tmp_path):
    path = write(tmp_path / "a.wav", pcm16(5001, channels, seed=channels))
    blob = Path(path).read_bytes()  # bytes are decoded by libsndfile; paths of 16-bit PCM WAV by feedline
    for kwargs in [{}, {"start": 17, "frames": 1000}, {"start": 5000}, {"start": 5001}, {"mono": True}]:
        for dtype in ("float32", "int16"):
            np.testing.assert_array_equal(load_audio(path, dtype=dtype, **kwargs), load_audio(blob, dtype=dtype, **kwargs))
    assert audio_info(path) == audio_info(blob)


def test_wav_with_extra_chunks_before_the_samples(tmp_path):
    data = pcm16(3000, 2)
    path = write(tmp_path / "plain.wav", data)
    raw = Path(path).read_bytes()
    at = raw.index(b"data")
    extra = b"LIST" + struct.pack("<I", 5) + b"abcde" + b"\0" + b"junk" + struct.pack("<I", 4) + b"1234"  # odd size: padded
    body = raw[12:at] + extra + raw[at:]
    chunked = tmp_path / "chunked.wav"
    chunked.write_bytes(b"RIFF" + struct.pack("<I", 4 + len(body)) + b"WAVE" + body)
    np.testing.assert_array_equal(load_audio(str(chunked), dtype="int16"), data.T)
    np.testing.assert_array_equal(load_audio(str(chunked), start=100, frames=50), load_audio(chunked.read_bytes(), start=100, frames=50))


@pytest.mark.parametrize("subtype", ["PCM_U8", "PCM_24", "PCM_32", "DOUBLE"])
def test_other_wav_encodings_are_read_by_libsndfile(subtype, tmp_path):
    floats = np.random.default_rng(2).uniform(-0.9, 0.9, size=(2000, 2))
    path = write(tmp_path / f"{subtype}.wav", floats, subtype=subtype)
    expected, _ = sf.read(path, dtype="float32", always_2d=True)
    np.testing.assert_array_equal(load_audio(path), expected.T)
    np.testing.assert_array_equal(load_audio(path, start=10, frames=20), expected.T[:, 10:30])


def test_mono_averages_channels(tmp_path):
    data = pcm16(4000, 2)
    path = write(tmp_path / "s.wav", data)
    expected = (data.astype(np.float32) / 32768).mean(axis=1, dtype=np.float32)
    mono = load_audio(path, mono=True)
    assert mono.shape == (1, 4000)
    np.testing.assert_allclose(mono[0], expected, rtol=0, atol=1e-7)
    mono16 = load_audio(path, mono=True, dtype="int16")
    assert mono16.dtype == np.int16
    np.testing.assert_array_equal(mono16[0], np.rint(data.astype(np.float32).mean(axis=1)).astype(np.int16))
    one = write(tmp_path / "m.wav", data[:, :1])
    np.testing.assert_array_equal(load_audio(one, mono=True), load_audio(one))


# ------------------------------------------------------------ windowed reads
@pytest.mark.parametrize("ext,fmt", [("wav", "WAV"), ("flac", "FLAC")])
def test_windowed_reads_equal_slices_of_the_full_decode(ext, fmt, tmp_path):
    data = pcm16(2 * RATE, 2, seed=5)
    path = write(tmp_path / f"w.{ext}", data, fmt=fmt)
    full = load_audio(path)
    full16 = load_audio(path, dtype="int16")
    n = full.shape[1]
    for start, frames in [(0, 1), (0, RATE), (1, 999), (4095, 4097), (12345, RATE), (n - RATE, RATE), (n - 1, 1), (n - 10, 100), (n, 5)]:
        window = load_audio(path, start=start, frames=frames)
        np.testing.assert_array_equal(window, full[:, start : start + frames], err_msg=f"start={start} frames={frames}")
        assert window.flags.c_contiguous
        np.testing.assert_array_equal(load_audio(path, start=start, frames=frames, dtype="int16"), full16[:, start : start + frames])
    np.testing.assert_array_equal(load_audio(path, start=777), full[:, 777:])


@pytest.mark.parametrize("ext,fmt", [("wav", "WAV"), ("flac", "FLAC")])
def test_random_crop_at_decode_time_equals_random_crop_of_the_decoded_array(ext, fmt, tmp_path):
    path = write(tmp_path / f"c.{ext}", pcm16(2 * RATE, 1, seed=7), fmt=fmt)
    full = load_audio(path)
    starts = set()
    for seed in range(12):
        at_decode = load_random_crop(path, RATE, np.random.default_rng(seed))
        of_array = random_crop(full, RATE, np.random.default_rng(seed))
        assert at_decode.shape == (1, RATE)
        np.testing.assert_array_equal(at_decode, of_array)
        starts.add(int(np.flatnonzero(full[0] == at_decode[0, 0])[0]))
    assert len(starts) > 6, "crops of different seeds should start at different frames"


def test_crops_of_short_signals_are_zero_padded_at_the_end(tmp_path):
    data = pcm16(500, 2)
    path = write(tmp_path / "short.flac", data, fmt="FLAC")
    crop = load_random_crop(path, 800, np.random.default_rng(0), dtype="int16")
    assert crop.shape == (2, 800)
    np.testing.assert_array_equal(crop[:, :500], data.T)
    assert not crop[:, 500:].any()
    np.testing.assert_array_equal(random_crop(data.T, 800, np.random.default_rng(0)), crop)


def test_random_crop_is_a_view_on_the_last_axis_and_reproducible():
    x = np.arange(3 * 2 * 100, dtype=np.float32).reshape(3, 2, 100)
    a = random_crop(x, 30, np.random.default_rng(4))
    b = random_crop(x, 30, np.random.default_rng(4))
    assert a.shape == (3, 2, 30) and np.shares_memory(a, x)
    np.testing.assert_array_equal(a, b)
    start = int(a[0, 0, 0])
    np.testing.assert_array_equal(a, x[..., start : start + 30])
    assert random_crop(x, 100, np.random.default_rng(0)).shape == (3, 2, 100)
    with pytest.raises(ValueError, match="positive number of frames"):
        random_crop(x, 0, np.random.default_rng(0))


# --------------------------------------------------------------------- log-mel
LIBROSA_CASES = [
    {},
    {"n_mels": 128, "n_fft": 512, "hop_length": 128},
    {"htk": True, "norm": None, "f_min": 20.0, "f_max": 7600.0},
    {"win_length": 320, "power": 1.0, "top_db": None},
    {"pad_mode": "reflect", "n_fft": 401},
    {"sample_rate": 22050, "n_fft": 2048, "hop_length": 512, "n_mels": 128, "center": False},
]


@pytest.mark.parametrize("settings", LIBROSA_CASES, ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults")
def test_log_mel_matches_librosa(settings):
    librosa = pytest.importorskip("librosa")
    logmel = LogMel(**settings)
    rng = np.random.default_rng(3)
    t = np.arange(logmel.sample_rate) / logmel.sample_rate
    signal = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(len(t))).astype(np.float32)

    expected_fb = librosa.filters.mel(
        sr=logmel.sample_rate, n_fft=logmel.n_fft, n_mels=logmel.n_mels, fmin=logmel.f_min, fmax=logmel.f_max,
        htk=logmel.htk, norm=logmel.norm,
    )
    np.testing.assert_allclose(logmel.filterbank(), expected_fb, rtol=1e-5, atol=1e-8)

    mel = librosa.feature.melspectrogram(
        y=signal, sr=logmel.sample_rate, n_fft=logmel.n_fft, hop_length=logmel.hop_length, win_length=logmel.win_length,
        center=logmel.center, pad_mode=logmel.pad_mode, power=logmel.power, n_mels=logmel.n_mels,
        fmin=logmel.f_min, fmax=logmel.f_max, htk=logmel.htk, norm=logmel.norm,
    )
    expected = librosa.power_to_db(mel, ref=logmel.ref, amin=logmel.amin, top_db=logmel.top_db)
    got = logmel(signal)
    assert got.dtype == np.float32 and got.shape == expected.shape == (logmel.n_mels, logmel.num_frames(len(signal)))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-3)  # dB


def test_log_mel_of_a_batch_equals_its_samples_one_by_one():
    logmel = LogMel()
    batch = np.random.default_rng(0).standard_normal((5, 2, 8000)).astype(np.float32) * np.float32(0.1)
    batch[3] *= 100  # a louder sample must not change the others' top_db floor
    whole = logmel(batch)
    assert whole.shape == (5, 2, 64, 51)
    for i in range(5):
        for c in range(2):
            np.testing.assert_array_equal(whole[i, c], logmel(batch[i, c]))


def test_log_mel_results_are_not_overwritten_by_later_calls():
    logmel = LogMel()
    rng = np.random.default_rng(5)
    for length in (100, 16000):  # 100 samples: a single frame, whose transpose is already contiguous
        a_in, b_in = rng.standard_normal((2, length)).astype(np.float32)
        a = logmel(a_in)
        kept = a.copy()
        logmel(b_in)
        np.testing.assert_array_equal(a, kept)


def test_log_mel_constants_are_computed_once_per_configuration_and_read_only():
    a, b = LogMel(n_mels=40), LogMel(n_mels=40)
    assert a.filterbank() is b.filterbank() and a.window() is b.window()
    assert LogMel(n_mels=41).filterbank() is not a.filterbank()
    with pytest.raises(ValueError):
        a.filterbank()[0, 0] = 1.0


def test_log_mel_pickles_as_its_settings():
    logmel = LogMel(n_mels=80, f_max=7000.0)
    logmel(np.zeros(4000, np.float32))  # constants exist now; they must not travel
    blob = pickle.dumps(logmel)
    assert len(blob) < 1000, f"a pickled LogMel should hold its settings only, got {len(blob)} bytes"
    clone = pickle.loads(blob)
    assert clone == logmel and hash(clone) == hash(logmel) and repr(clone) == repr(logmel)
    x = np.random.default_rng(0).standard_normal(4000).astype(np.float32)
    np.testing.assert_array_equal(clone(x), logmel(x))


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"n_mels": 0}, "n_mels"),
        ({"win_length": 500}, "win_length"),
        ({"f_max": 9000.0}, "f_max"),
        ({"power": 3.0}, "power"),
        ({"pad_mode": "edge"}, "pad_mode"),
        ({"norm": "peak"}, "norm"),
        ({"top_db": -1.0}, "top_db"),
    ],
)
def test_log_mel_rejects_invalid_settings_when_built(settings, message):
    with pytest.raises(ValueError, match=message):
        LogMel(**settings)


def test_log_mel_rejects_signals_too_short_for_its_frames():
    with pytest.raises(ValueError, match="n_fft"):
        LogMel(center=False)(np.zeros(100, np.float32))
    with pytest.raises(ValueError, match="reflect"):
        LogMel(pad_mode="reflect")(np.zeros(100, np.float32))
    assert LogMel()(np.zeros(100, np.float32)).shape == (64, 1)


# ------------------------------------------------------------ in a pipeline
LENGTH = RATE // 2
LOGMEL = LogMel(sample_rate=RATE, n_mels=64)


def features(sample, rng):
    path, label = sample
    clip = load_random_crop(path, LENGTH, rng, sample_rate=RATE)
    return LOGMEL(clip), label


def _clips(tmp_path, count=10, bad=()):
    paths = []
    for k in range(count):
        fmt, ext = ("FLAC", "flac") if k % 2 else ("WAV", "wav")
        frames = RATE + 1000 * k if k != 4 else LENGTH // 2  # clip 4 is shorter than a crop
        paths.append(write(tmp_path / f"clip_{k:02d}.{ext}", pcm16(frames, 1, seed=k), fmt=fmt))
    for k in bad:
        truncate(paths[k], 0.3)
    return paths


def _epoch(pipe):
    return [(np.array(x), np.array(y)) for x, y in pipe]


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_story4_pipeline_is_identical_on_every_backend_and_differs_between_epochs(backend, tmp_path, no_leaks):
    paths = _clips(tmp_path)
    labels = np.arange(len(paths), dtype=np.int64)

    def build(name):
        return fl.from_files(paths, labels=labels).shuffle(seed=11).map(features, backend=name, workers=2).batch(4)

    with build("serial") as pipe:
        expected = [_epoch(pipe), _epoch(pipe)]
    with build(backend) as pipe:
        got = [_epoch(pipe), _epoch(pipe)]
    for epoch in range(2):
        assert len(got[epoch]) == 3
        assert [x.shape for x, _ in got[epoch]] == [(4, 1, 64, 51), (4, 1, 64, 51), (2, 1, 64, 51)]
        for (gx, gy), (ex, ey) in zip(got[epoch], expected[epoch], strict=True):
            np.testing.assert_array_equal(gy, ey)
            np.testing.assert_array_equal(gx, ex)
    first = {int(i): x for xs, ys in got[0] for x, i in zip(xs, ys, strict=True)}
    second = {int(i): x for xs, ys in got[1] for x, i in zip(xs, ys, strict=True)}
    assert sorted(first) == list(range(len(paths)))
    assert any(not np.array_equal(first[i], second[i]) for i in first), "the random crop must change between epochs"


def test_log_mel_as_a_batch_step_on_process_workers(tmp_path, no_leaks):
    paths = _clips(tmp_path, count=8)

    def crop(path, rng):
        return load_random_crop(path, LENGTH, rng)

    per_sample = fl.from_files(paths).map(lambda p, rng: LOGMEL(crop(p, rng)), backend="serial").batch(4)
    batched = fl.from_files(paths).map(crop, backend="process", workers=2).batch(4).map_batch(LOGMEL)
    with per_sample, batched:
        for a, b in zip(_epoch_single(per_sample), _epoch_single(batched), strict=True):
            np.testing.assert_array_equal(a, b)


def _epoch_single(pipe):
    return [np.array(x) for x in pipe]


# ------------------------------------------------------------------ failures
def test_truncated_wav_raises_naming_the_file(tmp_path):
    path = truncate(write(tmp_path / "cut.wav", pcm16(RATE, 2)), 0.5)
    calls = (lambda: load_audio(path), lambda: load_audio(path, frames=10), lambda: load_random_crop(path, 100, np.random.default_rng(0)))
    for call in calls:
        with pytest.raises(AudioDecodeError) as info:
            call()
        assert info.value.path == path and path in str(info.value) and "truncated" in str(info.value)
    with open(path, "rb") as f, pytest.raises(AudioDecodeError, match="truncated"):
        load_audio(f)  # a file object goes to libsndfile, which must be caught out too


def test_truncated_flac_raises_naming_the_file(tmp_path):
    path = truncate(write(tmp_path / "cut.flac", pcm16(RATE, 2), fmt="FLAC"), 0.5)
    with pytest.raises(AudioDecodeError) as info:
        load_audio(path)
    assert info.value.path == path and path in str(info.value)
    assert "truncated" in str(info.value) or "lost sync" in str(info.value)


@pytest.mark.parametrize("content", [b"", b"this is not audio at all" * 20, b"\x89PNG\r\n\x1a\n" + bytes(200)])
def test_non_audio_file_raises_naming_the_file_and_the_supported_formats(content, tmp_path):
    path = tmp_path / "noise.wav"
    path.write_bytes(content)
    with pytest.raises(AudioDecodeError) as info:
        load_audio(str(path))
    message = str(info.value)
    assert str(path) in message and "not recognised" in message.lower()
    assert "WAV and FLAC" in message and "OGG" in message


def test_missing_file_raises_file_not_found_naming_it(tmp_path):
    path = str(tmp_path / "nowhere.wav")
    with pytest.raises(FileNotFoundError, match="nowhere.wav"):
        load_audio(path)


def test_wrong_sample_rate_is_an_error_naming_both_rates(tmp_path):
    path = write(tmp_path / "hi.wav", pcm16(1000, 1), rate=44100)
    with pytest.raises(AudioDecodeError, match="44100 Hz, expected 16000 Hz"):
        load_audio(path, sample_rate=16000)
    assert load_audio(path, sample_rate=44100).shape == (1, 1000)


def test_streamed_wav_with_unknown_length_is_not_called_truncated(tmp_path):
    data = pcm16(3000, 1)
    path = write(tmp_path / "stream.wav", data)
    raw = bytearray(Path(path).read_bytes())
    at = raw.index(b"data") + 4
    raw[at : at + 4] = struct.pack("<I", 0xFFFFFFFF)  # what a writer that does not know the length writes
    Path(path).write_bytes(raw)
    np.testing.assert_array_equal(load_audio(path, dtype="int16"), data.T)


def test_dtype_may_be_a_numpy_type(tmp_path):
    for fmt, ext in (("WAV", "wav"), ("FLAC", "flac")):
        path = write(tmp_path / f"d.{ext}", pcm16(100, 1), fmt=fmt)
        assert load_audio(path, dtype=np.int16).dtype == np.int16
        assert load_audio(path, dtype=np.dtype("float32")).dtype == np.float32


def test_invalid_arguments_are_value_errors():
    with pytest.raises(ValueError, match="dtype"):
        load_audio(b"", dtype="float64")
    with pytest.raises(ValueError, match="start"):
        load_audio(b"", start=-1)
    with pytest.raises(ValueError, match="frames"):
        load_audio(b"", frames=0)
    with pytest.raises(ValueError, match="length"):
        load_random_crop(b"", 0, np.random.default_rng(0))


def test_decode_error_survives_pickling():
    error = pickle.loads(pickle.dumps(AudioDecodeError("a/b.wav", "truncated: reason")))
    assert isinstance(error, AudioDecodeError) and error.path == "a/b.wav" and error.reason == "truncated: reason"
    assert str(error) == "cannot decode audio file 'a/b.wav': truncated: reason"


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_truncated_files_in_a_process_pipeline_follow_on_error(on_error, tmp_path, no_leaks):
    paths = _clips(tmp_path, bad=(3, 6))
    labels = np.arange(len(paths), dtype=np.int64)
    pipe = fl.from_files(paths, labels=labels).map(features, backend="process", workers=2, on_error=on_error).batch(4)
    with pipe:
        if on_error == "raise":
            with pytest.raises(SampleError) as info:
                list(pipe)
            assert info.value.index == 3 and info.value.where == paths[3]
            assert paths[3] in str(info.value) and "AudioDecodeError" in str(info.value)
            assert isinstance(info.value.__cause__, AudioDecodeError) and info.value.__cause__.path == paths[3]
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            it = iter(pipe)
            got = [int(v) for _, y in it for v in y]
        assert got == [k for k in range(len(paths)) if k not in (3, 6)]
        skipped = dict(it.stats().skipped)
        assert sorted(skipped) == [3, 6] and all(paths[k] in skipped[k] for k in (3, 6))


# --------------------------------------------------------------- packaging
def test_importing_feedline_audio_does_not_import_soundfile():
    code = "import sys, feedline.audio; print('soundfile' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_without_soundfile_pcm16_wav_still_loads_and_other_files_name_the_extra(tmp_path):
    wav = write(tmp_path / "a.wav", pcm16(800, 2))
    flac = write(tmp_path / "a.flac", pcm16(800, 2), fmt="FLAC")
    code = (
        "import sys; sys.modules['soundfile'] = None\n"  # makes `import soundfile` fail, as when it is not installed
        "from feedline.audio import load_audio, LogMel\n"
        "import numpy as np; LogMel()(np.zeros(1000, np.float32))\n"  # arrays need no soundfile
        f"print(load_audio({wav!r}).shape)\n"  # 16-bit PCM WAV is read by feedline itself
        f"try:\n    load_audio({flac!r})\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[0] == "(2, 800)"
    assert 'pip install "feedline[audio]"' in out


def test_public_names_are_sorted_and_exported():
    from feedline import audio

    assert audio.__all__ == sorted(audio.__all__)
    assert all(hasattr(audio, name) for name in audio.__all__)
