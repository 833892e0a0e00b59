"""feedline.vision: decoders against Pillow, ops, determinism through real pipelines, bad files.

Every image is written by the tests (Pillow or OpenCV) into a temporary
folder; nothing is downloaded.
"""

from __future__ import annotations

import doctest
import importlib
import io
import os
import pickle
import pkgutil
import re
import runpy
import subprocess
import sys

import numpy as np
import pytest

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")  # albumentations would check PyPI on import

Image = pytest.importorskip("PIL.Image")
cv2 = pytest.importorskip("cv2")
pytest.importorskip("simplejpeg")

import feedline as fl
import feedline.vision as fv


# ------------------------------------------------------------------ images
def photo(height: int, width: int, seed: int) -> np.ndarray:
    """A uint8 RGB image with smooth colour, edges and noise (compresses like a photo)."""
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height)[:, None, None]
    x = np.linspace(0, 1, width)[None, :, None]
    phase = rng.uniform(0, 6.3, (1, 1, 3))
    img = 128 + 60 * np.sin(2 * np.pi * (rng.uniform(1, 5) * x + rng.uniform(1, 5) * y) + phase)
    img = img + 40 * ((x - 0.5) ** 2 + (y - 0.4) ** 2 < 0.05) + rng.normal(0, 6, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def save(folder, name: str, image, fmt: str | None = None, **options) -> str:
    path = os.path.join(folder, name)
    im = image if isinstance(image, Image.Image) else Image.fromarray(image)
    im.save(path, fmt, **options)
    return path


def pil_rgb(path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """JPEGs and PNGs of several sizes and modes, and the arrays they were made from."""
    d = str(tmp_path_factory.mktemp("images"))
    rgb = photo(375, 500, 1)
    f = {"rgb": rgb}
    f["jpeg"] = save(d, "photo.jpg", rgb, quality=90)
    f["jpeg_portrait"] = save(d, "portrait.jpg", photo(500, 375, 2), quality=90)
    f["jpeg_progressive"] = save(d, "progressive.jpg", rgb, quality=90, progressive=True)
    f["jpeg_444"] = save(d, "full_chroma.jpg", rgb, quality=90, subsampling=0)
    f["jpeg_grey"] = save(d, "grey.jpg", Image.fromarray(rgb).convert("L"))
    f["jpeg_cmyk"] = save(d, "cmyk.jpg", Image.fromarray(rgb).convert("CMYK"), quality=95)
    f["jpeg_large"] = save(d, "large.jpg", photo(768, 1024, 3), quality=90)
    small = photo(96, 128, 4)
    f["small"] = small
    f["png_rgb"] = save(d, "rgb.png", small)
    f["png_grey"] = save(d, "grey.png", Image.fromarray(small).convert("L"))
    f["png_palette"] = save(d, "palette.png", Image.fromarray(small).quantize(16))
    rgba = np.dstack([small, small[..., 1]])
    f["png_rgba"] = save(d, "rgba.png", Image.fromarray(rgba, "RGBA"))
    f["png_grey_alpha"] = save(d, "grey_alpha.png", Image.fromarray(rgba, "RGBA").convert("LA"))
    f["png_1bit"] = save(d, "bits.png", Image.fromarray(small[..., 0] > 128))
    wide = np.random.default_rng(5).integers(0, 65536, (96, 128, 3), dtype=np.uint16)
    f["wide"] = wide
    f["png_rgb16"] = os.path.join(d, "rgb16.png")
    cv2.imwrite(f["png_rgb16"], np.ascontiguousarray(wide[..., ::-1]))  # OpenCV writes BGR
    f["png_grey16"] = os.path.join(d, "grey16.png")
    cv2.imwrite(f["png_grey16"], wide[..., 0])
    f["png_named_jpg"] = save(d, "really_a_png.jpg", small, "PNG")
    return f


# ------------------------------------------------------------ public surface
def test_public_names_are_sorted_and_exist():
    # Sorted as ruff (RUF022) sorts: CONSTANTS, then Classes, then functions.
    assert fv.__all__ == sorted(fv.__all__, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
    assert all(hasattr(fv, name) for name in fv.__all__)


def test_docstring_examples_run():
    modules = [fv] + [importlib.import_module(f"feedline.vision.{m.name}") for m in pkgutil.iter_modules(fv.__path__)]
    attempted = 0
    for module in modules:
        result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
        assert result.failed == 0, f"doctest failed in {module.__name__}"
        attempted += result.attempted
    assert attempted >= 20


def test_missing_decoder_library_error_names_the_extra(files):
    code = (
        "import sys; sys.modules['simplejpeg'] = None\n"  # what Python does when a package is absent
        "import feedline.vision as fv\n"
        f"fv.decode({files['jpeg']!r})\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "pip install 'feedline[vision]'" in proc.stderr and "simplejpeg" in proc.stderr


# ------------------------------------------------------------------ decoders
@pytest.mark.parametrize("key", ["jpeg", "jpeg_portrait", "jpeg_progressive", "jpeg_444", "jpeg_grey", "jpeg_cmyk"])
def test_jpeg_decodes_like_pillow(files, key):
    ours = fv.decode(files[key])
    ref = pil_rgb(files[key])
    assert ours.dtype == np.uint8 and ours.shape == ref.shape and ours.flags.c_contiguous
    diff = np.abs(ours.astype(int) - ref)
    # Both are libjpeg-turbo; versions may round differently, and CMYK to RGB is
    # rounded differently by libjpeg-turbo and Pillow (off by one everywhere).
    assert diff.mean() <= (1.0 if key == "jpeg_cmyk" else 0.5) and diff.max() <= 8


def test_jpeg_grey_modes(files):
    grey = fv.decode(files["jpeg_grey"], mode="unchanged")
    assert grey.shape == (375, 500, 1)
    with Image.open(files["jpeg_grey"]) as im:
        assert np.abs(grey[..., 0].astype(int) - np.asarray(im)).max() <= 2
    assert fv.decode(files["jpeg"], mode="unchanged").shape == (375, 500, 3)
    luma = fv.decode(files["jpeg"], mode="L")
    with Image.open(files["jpeg"]) as im:
        assert np.abs(luma[..., 0].astype(int) - np.asarray(im.convert("L"))).mean() < 1.0


def _expected_png(files, key, mode):
    """What the docs say decode() returns, computed with Pillow and NumPy."""
    path = files[key]
    wide = files["wide"]
    if key == "png_rgb16":
        return {"RGB": (wide >> 8).astype(np.uint8), "unchanged": wide}.get(mode)
    if key == "png_grey16":
        high = (wide[..., :1] >> 8).astype(np.uint8)
        return {"RGB": np.repeat(high, 3, axis=2), "L": high, "unchanged": wide[..., :1]}[mode]
    with Image.open(path) as im:
        if mode == "RGB":
            return np.asarray(im.convert("RGB"))
        if mode == "L" and im.mode in ("L", "1"):
            return np.asarray(im.convert("L"))[..., None]
        if mode == "unchanged":
            arr = np.asarray(im.convert("L") if im.mode == "1" else im)
            return arr[..., None] if arr.ndim == 2 else arr
    return None


@pytest.mark.parametrize("mode", ["RGB", "L", "unchanged"])
@pytest.mark.parametrize("key", ["png_rgb", "png_grey", "png_palette", "png_rgba", "png_grey_alpha", "png_1bit", "png_rgb16", "png_grey16"])
def test_png_layouts_match_the_documentation(files, key, mode):
    out = fv.decode(files[key], mode=mode)
    assert out.ndim == 3 and out.flags.c_contiguous and out.shape[:2] == (96, 128)
    expected = _expected_png(files, key, mode)
    if mode == "RGB":
        assert out.shape[2] == 3 and out.dtype == np.uint8
    if mode == "L":
        assert out.shape[2] == 1 and out.dtype == np.uint8
        if expected is None:  # colour to grey: BT.601 luma
            rgb = fv.decode(files[key], mode="RGB").astype(float)
            luma = rgb @ [0.299, 0.587, 0.114]
            assert np.abs(out[..., 0] - luma).max() <= 2
            return
    assert out.dtype == expected.dtype and out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def test_unchanged_palette_gives_indices_and_16_bit_stays_16_bit(files):
    indices = fv.decode(files["png_palette"], mode="unchanged")
    assert indices.shape == (96, 128, 1) and indices.max() < 16
    assert fv.decode(files["png_rgb16"], mode="unchanged").dtype == np.uint16
    assert fv.decode(files["png_grey_alpha"], mode="unchanged").shape == (96, 128, 2)


def test_format_is_read_from_the_bytes_not_the_name(files):
    np.testing.assert_array_equal(fv.decode(files["png_named_jpg"]), files["small"])
    with open(files["png_rgb"], "rb") as f:
        data = f.read()
    with open(files["jpeg"], "rb") as f:
        jpeg = f.read()
    for buffer in (data, bytearray(data), memoryview(data)):
        np.testing.assert_array_equal(fv.decode(buffer), files["small"])
    for buffer in (jpeg, bytearray(jpeg), memoryview(jpeg)):
        np.testing.assert_array_equal(fv.decode(buffer), fv.decode(files["jpeg"]))


def test_image_size_reads_only_the_header(files):
    assert fv.image_size(files["jpeg"]) == (375, 500)
    assert fv.image_size(files["png_rgb"]) == (96, 128)
    with open(files["jpeg_large"], "rb") as f:
        head = f.read(2000)  # the header alone: the pixels are not needed
    assert fv.image_size(head) == (768, 1024)


@pytest.mark.parametrize("reduce", [2, 4, 8])
def test_reduced_decode_is_the_image_at_a_smaller_scale(files, reduce):
    small = fv.decode(files["jpeg"], reduce=reduce)
    assert small.shape == (-(-375 // reduce), -(-500 // reduce), 3)
    with Image.open(files["jpeg"]) as im:
        im.draft("RGB", (500 // reduce, 375 // reduce))  # Pillow's own DCT scaling
        ref = np.asarray(im.convert("RGB"))
    assert ref.shape == small.shape
    assert np.abs(small.astype(int) - ref).mean() < 0.5
    # Each pixel at 1/f is (about) the mean of an f x f block of the full image.
    h, w = 375 // reduce, 500 // reduce
    blocks = fv.decode(files["jpeg"])[: h * reduce, : w * reduce].reshape(h, reduce, w, reduce, 3).mean(axis=(1, 3))
    assert np.abs(small[:h, :w] - blocks).mean() < 2.0
    png = fv.decode(files["png_rgb"], reduce=reduce)
    assert png.shape == (-(-96 // reduce), -(-128 // reduce), 3)


def test_unsupported_mode_and_reduce_list_what_is_supported(files):
    with pytest.raises(ValueError, match="supported modes are 'RGB', 'L', 'unchanged'"):
        fv.decode(files["jpeg"], mode="HSV")
    with pytest.raises(ValueError, match="one of 1, 2, 4, 8"):
        fv.decode(files["jpeg"], reduce=3)
    with pytest.raises(ValueError, match="supported modes"):
        fv.random_resized_crop(files["jpeg"], 32, np.random.default_rng(0), mode="CMYK")


# --------------------------------------------------------------- bad input
def _write(tmp_path, name, data: bytes) -> str:
    path = str(tmp_path / name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def _truncated(path, tmp_path, keep=0.5) -> str:
    with open(path, "rb") as f:
        data = f.read()
    return _write(tmp_path, "cut_" + os.path.basename(path), data[: int(len(data) * keep)])


def test_truncated_jpeg_names_the_file_and_the_reason(files, tmp_path):
    bad = _truncated(files["jpeg"], tmp_path)
    with pytest.raises(fv.ImageDecodeError, match="truncated") as info:
        fv.decode(bad)
    assert bad in str(info.value) and "JPEG" in str(info.value) and "on_error='skip'" in str(info.value)
    assert info.value.name == bad and info.value.format == "jpeg"
    with pytest.raises(fv.ImageDecodeError, match="truncated"):
        fv.random_resized_crop(bad, 64, np.random.default_rng(0))


def test_truncated_png_names_the_chunk_it_ends_in(files, tmp_path):
    bad = _truncated(files["png_rgb"], tmp_path)
    with pytest.raises(fv.ImageDecodeError, match=r"truncated: the file ends inside the IDAT chunk") as info:
        fv.decode(bad)
    assert bad in str(info.value)


def test_damaged_png_data_is_reported_with_its_chunk(files, tmp_path):
    with open(files["png_rgb"], "rb") as f:
        data = bytearray(f.read())
    start = data.index(b"IDAT") + 40
    data[start : start + 64] = bytes(64)  # zero out compressed bytes: CRC no longer matches
    bad = _write(tmp_path, "damaged.png", bytes(data))
    with pytest.raises(fv.ImageDecodeError, match="CRC mismatch in the IDAT chunk"):
        fv.decode(bad)


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "the file is empty"),
        (b"name,label\ncat.jpg,3\n", "unrecognised bytes"),
        (b"GIF89a" + bytes(40), "a GIF file"),
    ],
)
def test_a_file_that_is_not_jpeg_or_png_says_what_it_is(tmp_path, content, reason):
    path = _write(tmp_path, "sample.jpg", content)
    with pytest.raises(fv.ImageDecodeError, match=reason) as info:
        fv.decode(path)
    assert path in str(info.value)
    assert content == b"" or "decodes JPEG and PNG" in str(info.value)


def test_decode_error_survives_pickling():
    err = fv.ImageDecodeError("/data/x.jpg", "jpeg", "truncated")
    back = pickle.loads(pickle.dumps(err))
    assert (back.name, back.format, back.reason, str(back)) == (err.name, err.format, err.reason, str(err))
    assert isinstance(back, ValueError) and isinstance(back, fl.FeedlineError)


def _load_crop(path, rng):
    return fv.random_resized_crop(path, 32, rng)


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_bad_files_follow_on_error_in_a_pipeline(files, tmp_path, backend, no_leaks):
    bad = _truncated(files["jpeg"], tmp_path)
    paths = [files["jpeg"], bad, files["jpeg_portrait"], files["png_rgb"]]
    with fl.from_files(paths).map(_load_crop, backend=backend, workers=2, on_error="skip").batch(2) as pipe:
        with pytest.warns(RuntimeWarning, match="skipped 1 samples"):
            batches = list(pipe)
        assert sum(len(b) for b in batches) == 3
        stats = pipe.stats()
        assert [index for index, _ in stats.skipped] == [1]
    with fl.from_files(paths).map(_load_crop, backend=backend, workers=2).batch(2) as pipe:
        with pytest.raises(fl.SampleError) as info:
            list(pipe)
        assert info.value.index == 1 and bad in str(info.value) and "truncated" in str(info.value)


# ----------------------------------------------------------------------- ops
def _blank_jpeg(height: int, width: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.zeros((height, width, 3), np.uint8)).save(out, "JPEG")
    return out.getvalue()


def _box(image: bytes, rng, scale, ratio) -> tuple:
    """The crop box `random_resized_crop` draws: the planned crop draws the same one from the same numbers."""
    return fv.plan_random_resized_crop(image, 8, rng, scale=scale, ratio=ratio, flip=None).box


def test_random_resized_crop_box_follows_torchvision_rules():
    rng = np.random.default_rng(0)
    areas, ratios = [], []
    image = _blank_jpeg(375, 500)
    for _ in range(300):
        top, left, h, w = _box(image, rng, (0.08, 1.0), (3 / 4, 4 / 3))
        assert 0 <= top and top + h <= 375 and 0 <= left and left + w <= 500 and h > 0 and w > 0
        areas.append(h * w / (375 * 500))
        ratios.append(w / h)
    assert 0.07 <= min(areas) and max(areas) <= 1.0
    assert 0.74 <= min(ratios) and max(ratios) <= 1.35
    # Impossible aspect ratios fall back to the largest centred crop of an allowed ratio.
    assert _box(_blank_jpeg(100, 1000), rng, (0.9, 1.0), (1.0, 1.0)) == (0, 450, 100, 100)


def test_random_resized_crop_is_the_same_for_a_file_and_its_decoded_array(files):
    image = fv.decode(files["jpeg"])
    for seed in range(5):
        from_file = fv.random_resized_crop(files["jpeg"], 64, np.random.default_rng(seed), reduced_decode=False)
        from_array = fv.random_resized_crop(image, 64, np.random.default_rng(seed))
        np.testing.assert_array_equal(from_file, from_array)


def test_reduced_decode_gives_nearly_the_same_crop_as_full_decode(files):
    reduced_seen = set()
    for seed in range(12):
        for size in (64, 128):
            full = fv.random_resized_crop(files["jpeg_large"], size, np.random.default_rng(seed), reduced_decode=False)
            fast = fv.random_resized_crop(files["jpeg_large"], size, np.random.default_rng(seed))
            assert fast.shape == full.shape == (size, size, 3)
            assert np.abs(fast.astype(int) - full).mean() < 4.0
            reduced_seen.add(_reduction(_box(files["jpeg_large"], np.random.default_rng(seed), (0.08, 1.0), (3 / 4, 4 / 3)), size))
    assert reduced_seen >= {2, 4}  # the test did exercise DCT-domain reduction


def _reduction(box, size: int) -> int:
    """The decode scale the crop uses: the largest of 8, 4, 2, 1 that keeps the box at least ``size`` each way."""
    return next(f for f in (8, 4, 2, 1) if box[2] // f >= size and box[3] // f >= size)


def test_reduced_decode_really_decodes_at_the_smaller_scale(files):
    """The crop equals: decode at 1/f, cut the scaled box, resize; so the full image was never decoded."""
    seed, size = 3, 96
    box = _box(files["jpeg_large"], np.random.default_rng(seed), (0.08, 1.0), (3 / 4, 4 / 3))
    f = _reduction(box, size)
    assert f > 1
    small = fv.decode(files["jpeg_large"], reduce=f)
    top, left = round(box[0] / f), round(box[1] / f)  # the box at 1/f, rounded to pixels
    h, w = round((box[0] + box[2]) / f) - top, round((box[1] + box[3]) / f) - left
    by_hand = cv2.resize(small[top : top + h, left : left + w], (size, size), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(fv.random_resized_crop(files["jpeg_large"], size, np.random.default_rng(seed)), by_hand)


def test_resize_shorter_side_and_exact(files):
    assert fv.resize(files["jpeg"], 256).shape == (256, 341, 3)
    assert fv.resize(files["jpeg_portrait"], 256).shape == (341, 256, 3)
    assert fv.resize(files["small"], (50, 70)).shape == (50, 70, 3)
    assert fv.resize(files["small"][..., :1], (50, 70)).shape == (50, 70, 1)
    assert fv.resize(files["small"][..., 0], 48).shape == (48, 64)
    fast = fv.resize(files["jpeg_large"], 160)
    full = fv.resize(files["jpeg_large"], 160, reduced_decode=False)
    assert fast.shape == full.shape == (160, 213, 3) and np.abs(fast.astype(int) - full).mean() < 3.0
    linear = fv.resize(files["jpeg"], 100, interpolation="linear")
    assert linear.shape == (100, 133, 3)
    with pytest.raises(ValueError, match="interpolation"):
        fv.resize(files["jpeg"], 100, interpolation="cubic")


def test_center_crop_cuts_the_middle_and_pads_small_images(files):
    image = files["small"]
    np.testing.assert_array_equal(fv.center_crop(image, (32, 48)), image[32:64, 40:88])
    np.testing.assert_array_equal(fv.center_crop(files["png_rgb"], 32), image[32:64, 48:80])
    padded = fv.center_crop(image, (100, 128))
    assert padded.shape == (100, 128, 3)
    np.testing.assert_array_equal(padded[2:98], image)
    assert not padded[:2].any() and not padded[98:].any()


def test_flip_with_and_without_rng():
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    np.testing.assert_array_equal(fv.flip(image), image[:, ::-1])
    np.testing.assert_array_equal(fv.flip(image, direction="vertical"), image[::-1])
    assert fv.flip(image).flags.c_contiguous
    assert fv.flip(image[..., :1]).shape == (2, 3, 1)
    assert fv.flip(image, np.random.default_rng(0), p=0.0) is image
    np.testing.assert_array_equal(fv.flip(image, np.random.default_rng(0), p=1.0), image[:, ::-1])
    flips = [fv.flip(image, np.random.default_rng(s)) is not image for s in range(200)]
    assert 60 < sum(flips) < 140
    with pytest.raises(TypeError, match="pipeline's rng"):
        fv.flip(image, 7)


def test_normalize_matches_the_formula_in_both_layouts():
    x = np.random.default_rng(0).integers(0, 256, (3, 20, 30, 3), dtype=np.uint8)
    mean, std = np.array(fv.IMAGENET_MEAN), np.array(fv.IMAGENET_STD)
    expected = (x / 255.0 - mean) / std
    nhwc = fv.normalize(x, fv.IMAGENET_MEAN, fv.IMAGENET_STD)
    nchw = fv.normalize(x, fv.IMAGENET_MEAN, fv.IMAGENET_STD, layout="NCHW")
    assert nhwc.dtype == nchw.dtype == np.float32 and nhwc.flags.c_contiguous and nchw.flags.c_contiguous
    np.testing.assert_allclose(nhwc, expected, atol=1e-5)
    np.testing.assert_allclose(nchw, expected.transpose(0, 3, 1, 2), atol=1e-5)
    np.testing.assert_allclose(fv.normalize(x[0], layout="CHW"), x[0].transpose(2, 0, 1) / 255.0, atol=1e-6)
    np.testing.assert_allclose(fv.normalize(x[..., :1], 0.5, 0.25), (x[..., :1] / 255.0 - 0.5) / 0.25, atol=1e-5)
    out = np.empty((3, 3, 20, 30), np.float32)
    assert fv.normalize(x, layout="NCHW", out=out) is out
    with pytest.raises(TypeError, match="uint8"):
        fv.normalize(x.astype(np.float32))
    with pytest.raises(ValueError, match="3 channels"):
        fv.normalize(x, mean=(0.5, 0.5))


def test_colour_mask_to_index_and_one_hot():
    palette = [(0, 0, 0), (128, 0, 0), (0, 128, 0), (255, 255, 255)]
    truth = np.random.default_rng(0).integers(0, 4, (2, 40, 50))
    masks = np.array(palette, np.uint8)[truth]
    index = fv.colour_mask_to_index(masks, palette)
    assert index.dtype == np.uint8
    np.testing.assert_array_equal(index, truth)
    as_dict = fv.colour_mask_to_index(masks[0], {(0, 0, 0): 0, (128, 0, 0): 7, (0, 128, 0): 2, (255, 255, 255): 300})
    np.testing.assert_array_equal(as_dict, np.array([0, 7, 2, 300])[truth[0]])
    assert as_dict.dtype == np.int32
    masks[0, 5, 6] = (1, 2, 3)
    with pytest.raises(ValueError, match=r"colour \(1, 2, 3\) \(1 pixels, first at \(0, 5, 6\)\) is not in the palette"):
        fv.colour_mask_to_index(masks, palette)
    ignored = fv.colour_mask_to_index(masks, palette, unknown=255)
    assert ignored[0, 5, 6] == 255
    hot = fv.one_hot(ignored, 4, ignore_index=255)
    assert hot.shape == (2, 40, 50, 4) and hot.dtype == np.float32
    assert hot[0, 5, 6].sum() == 0
    np.testing.assert_array_equal(hot[1].argmax(-1), truth[1])
    assert np.all(hot.sum(-1)[1] == 1)
    with pytest.raises(ValueError, match="class index 255 is outside 0..3"):
        fv.one_hot(ignored, 4)


# ------------------------------------------------- determinism in a pipeline
def _augment(path, rng):
    return fv.flip(fv.random_resized_crop(path, 48, rng), rng)


def _normalise_nchw(batch):
    return fv.normalize(batch, fv.IMAGENET_MEAN, fv.IMAGENET_STD, layout="NCHW")


def _epochs(paths, backend, workers, epochs=2):
    pipe = fl.from_files(paths).shuffle(seed=7).map(_augment, backend=backend, workers=workers).batch(4).map_batch(_normalise_nchw)
    with pipe:
        return [np.concatenate([b.copy() for b in pipe]) for _ in range(epochs)]


def test_augmentation_is_identical_on_every_backend(files, no_leaks):
    paths = [files[k] for k in ("jpeg", "jpeg_portrait", "jpeg_large", "jpeg_progressive", "png_rgb", "jpeg_444", "jpeg_grey", "jpeg_cmyk")]
    reference = _epochs(paths, "serial", None)
    assert reference[0].shape == (8, 3, 48, 48) and reference[0].dtype == np.float32
    assert not np.array_equal(reference[0], reference[1])  # a new epoch, new crops
    for backend in ("thread", "process"):
        for got, want in zip(_epochs(paths, backend, 2), reference):
            np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------- albumentations
def _albumentations_pipeline():
    A = pytest.importorskip("albumentations")
    return A.Compose([A.RandomResizedCrop(size=(40, 40), scale=(0.3, 1.0)), A.HorizontalFlip(p=0.5), A.RandomBrightnessContrast(p=0.5)])


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_an_existing_albumentations_pipeline_drops_into_map(files, backend, no_leaks):
    aug = _albumentations_pipeline()
    paths = [files["jpeg"], files["jpeg_portrait"], files["png_rgb"], files["jpeg_large"]] * 2
    pipe = fl.from_files(paths).map(fv.decode).map(lambda image: aug(image=image)["image"], backend=backend, workers=2).batch(4)
    with pipe:
        shapes = [b.shape for b in pipe]
    assert shapes == [(4, 40, 40, 3), (4, 40, 40, 3)]


def test_from_albumentations_is_reproducible_on_every_backend(files, no_leaks):
    aug = fv.from_albumentations(_albumentations_pipeline())
    paths = [files["jpeg"], files["jpeg_portrait"], files["png_rgb"], files["jpeg_large"]] * 2
    results = {}
    for backend in ("serial", "thread", "process"):
        pipe = fl.from_files(paths).shuffle(seed=3).map(fv.decode).map(aug, backend=backend, workers=None if backend == "serial" else 2)
        with pipe.batch(4) as pipe:
            results[backend] = np.concatenate([b.copy() for b in pipe])
    assert results["serial"].shape == (8, 40, 40, 3)
    np.testing.assert_array_equal(results["thread"], results["serial"])
    np.testing.assert_array_equal(results["process"], results["serial"])


def test_from_albumentations_takes_dicts_and_rejects_other_samples(files):
    A = pytest.importorskip("albumentations")
    op = fv.from_albumentations(A.Compose([A.HorizontalFlip(p=1.0)]))
    image = files["small"]
    mask = image[..., 0].copy()
    out = op({"image": image, "mask": mask}, np.random.default_rng(0))
    np.testing.assert_array_equal(out["image"], image[:, ::-1])
    np.testing.assert_array_equal(out["mask"], mask[:, ::-1])
    with pytest.raises(TypeError, match="image array or a dict"):
        op((image, 1), np.random.default_rng(0))
    with pytest.raises(TypeError, match="albumentations transform"):
        fv.from_albumentations(lambda image: image)


# ---------------------------------------------------------------- the docs
def test_the_examples_in_docs_vision_md_run(tmp_path, monkeypatch, no_leaks):
    pytest.importorskip("albumentations")
    doc = os.path.join(os.path.dirname(__file__), os.pardir, "docs", "vision.md")
    with open(doc, encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.DOTALL)
    assert len(blocks) >= 5
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks, 1):
        script = tmp_path / f"vision_md_block_{number}.py"
        script.write_text(block, encoding="utf-8")
        try:
            namespace = runpy.run_path(str(script), init_globals=namespace)
        except Exception as exc:
            raise AssertionError(f"docs/vision.md python block {number} failed: {exc!r}\n{block}") from exc
