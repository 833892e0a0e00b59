"""Strict JPEG decoding: a JPEG damaged inside its compressed data raises, at every entry point.

The JPEG is written by the test (Pillow) and damaged after its SOS marker
(0xFFDA: the start of the compressed data). Before the fix, feedline
decoded it anyway (libjpeg-turbo's strict mode reported the damage, then
feedline retried without it) and returned grey, smeared pixels.
"""

from __future__ import annotations

import io
import os

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("cv2")
simplejpeg = pytest.importorskip("simplejpeg")
from conftest import damage_after_sos  # noqa: E402

import feedline as fl
import feedline.vision as fv


def photo(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height)[:, None, None]
    x = np.linspace(0, 1, width)[None, :, None]
    img = 128 + 60 * np.sin(2 * np.pi * (3 * x + 2 * y) + rng.uniform(0, 6.3, (1, 1, 3))) + rng.normal(0, 6, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("strict")
    image = photo(240, 320, 1)
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, "JPEG", quality=90)
    good = buf.getvalue()
    bad = damage_after_sos(good)
    paths = {}
    for name, data in (("good.jpg", good), ("damaged.jpg", bad)):
        paths[name] = str(folder / name)
        with open(paths[name], "wb") as f:
            f.write(data)
    return {"good": paths["good.jpg"], "bad": paths["damaged.jpg"], "bad_bytes": bad, "image": image}


def test_the_damage_is_real_lenient_decoding_returns_garbage(jpegs):
    clean = fv.decode(jpegs["good"])
    lenient = fv.decode(jpegs["bad"], strict=False)
    assert lenient.shape == clean.shape
    assert np.abs(lenient.astype(int) - clean).mean() > 3, "the damaged file decodes close to the original"


ENTRY_POINTS = {
    "decode(path)": lambda src, **kw: fv.decode(src, **kw),
    "decode(bytes)": None,  # filled below: the same with the file's bytes
    "decode(reduce=2)": lambda src, **kw: fv.decode(src, reduce=2, **kw),
    "decode(reduce=8)": lambda src, **kw: fv.decode(src, reduce=8, **kw),
    "decode(mode=L)": lambda src, **kw: fv.decode(src, mode="L", **kw),
    "decode(mode=unchanged)": lambda src, **kw: fv.decode(src, mode="unchanged", **kw),
    "resize": lambda src, **kw: fv.resize(src, 64, **kw),
    "resize(full decode)": lambda src, **kw: fv.resize(src, (200, 300), reduced_decode=False, **kw),
    "center_crop": lambda src, **kw: fv.center_crop(src, 100, **kw),
    "random_resized_crop": lambda src, **kw: fv.random_resized_crop(src, 32, np.random.default_rng(0), **kw),
    "random_resized_crop(nearest)": lambda src, **kw: fv.random_resized_crop(
        src, 64, np.random.default_rng(0), interpolation="nearest", **kw),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_jpeg_entry_point_refuses_a_damaged_file_and_accepts_strict_false(jpegs, entry):
    src = jpegs["bad_bytes"] if entry == "decode(bytes)" else jpegs["bad"]
    call = ENTRY_POINTS[entry] or ENTRY_POINTS["decode(path)"]
    with pytest.raises(fl.DecodeError) as info:
        call(src)
    message = str(info.value)
    assert isinstance(info.value, fv.ImageDecodeError) and info.value.format == "jpeg"
    if entry != "decode(bytes)":
        assert jpegs["bad"] in message and info.value.path == jpegs["bad"]
    else:
        assert f"<{len(src)} bytes>" in message
    assert "damaged (libjpeg-turbo:" in message and "strict=False" in message
    assert isinstance(call(src, strict=False), np.ndarray)  # the documented opt-in
    good = jpegs["good"]
    np.testing.assert_array_equal(call(good), call(good, strict=False))  # a sound file: the same either way


def test_truncation_is_an_error_even_when_lenient(jpegs, tmp_path):
    with open(jpegs["good"], "rb") as f:
        data = f.read()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    for strict in (True, False):
        with pytest.raises(fv.ImageDecodeError, match="truncated"):
            fv.decode(str(cut), strict=strict)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_damaged_jpeg_in_a_pipeline_follows_on_error(jpegs, backend, no_leaks):
    paths = [jpegs["good"], jpegs["bad"], jpegs["good"]]
    with fl.from_files(paths).map(fv.decode, backend=backend, workers=2) as pipe:
        with pytest.raises(fl.SampleError) as info:
            list(pipe)
    assert info.value.index == 1 and jpegs["bad"] in str(info.value)
    assert isinstance(info.value.__cause__, fl.DecodeError)
    with fl.from_files(paths).map(fv.decode, backend=backend, workers=2, on_error="skip") as pipe:
        with pytest.warns(RuntimeWarning, match="skipped 1 samples"):
            assert len(list(pipe)) == 2
        [(index, reason)] = pipe.stats().skipped
        assert index == 1 and "damaged" in reason


def test_a_damaged_jpeg_field_of_a_store_is_reported(jpegs, tmp_path):
    pytest.importorskip("pyarrow")
    from feedline.store import StoreError, StoreWriter, open_store

    image = jpegs["image"]
    path = str(tmp_path / "s")
    with StoreWriter(path, encodings={"image": "jpeg:90"}) as w:
        w.write_rows([{"image": image}, {"image": image}])
    assert np.abs(open_store(path)[1]["image"].astype(int) - image).mean() < 8  # JPEG is close
    # Damage the second JPEG inside the Arrow file (same size, so the store's size check passes).
    data_files = [os.path.join(root, n) for root, _, names in os.walk(path) for n in names if n.endswith(".arrow")]
    [data_file] = data_files
    raw = bytearray(open(data_file, "rb").read())
    second = raw.index(b"\xff\xd8\xff", raw.index(b"\xff\xd8\xff") + 1)
    end = raw.index(b"\xff\xd9", second) + 2
    raw[second:end] = damage_after_sos(bytes(raw[second:end]))
    with open(data_file, "wb") as f:
        f.write(raw)
    store = open_store(path)
    assert store[0]["image"].shape == image.shape
    with pytest.raises(StoreError, match="cannot be decoded.*damaged"):
        store[1]
