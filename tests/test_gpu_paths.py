"""The GPU paths, as far as a CPU can check them.

- The device decode's plan (`fv.plan_random_resized_crop`) draws the same
  crop boxes and flips as the CPU path (`fv.random_resized_crop` +
  `fv.flip`) for the same seeds, consumes the same random numbers, and
  does so through real pipelines on every backend.
- Its resampling weights (pure NumPy here, torch on the device) are
  OpenCV's filters; `fv.DeviceJpegDecoder` run on the CPU (feedline's
  decoder standing in for nvJPEG) gives the CPU path's pixels within one
  grey level.
- On this machine the nvJPEG path fails with an error naming what is
  missing (torchvision, a CUDA device), and process workers never import
  torch.
- `python -m benchmarks.gpu_training --dry-run` runs end to end and prints
  its table.

Most of this needs no GPU; the tests marked `needs_gpu` ran on an H100
(2026-11-25, docs/adapters.md, "Status of the device paths").
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")
pytest.importorskip("cv2")
pytest.importorskip("simplejpeg")

import feedline as fl
import feedline.vision as fv
from feedline.vision._device import resample_weights

ROOT = Path(__file__).resolve().parents[1]


def photo(height: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = np.linspace(0, 1, height)[:, None, None]
    x = np.linspace(0, 1, width)[None, :, None]
    img = 128 + 60 * np.sin(2 * np.pi * (rng.uniform(1, 5) * x + rng.uniform(1, 5) * y) + rng.uniform(0, 6.3, (1, 1, 3)))
    img = img + 40 * ((x - 0.5) ** 2 + (y - 0.4) ** 2 < 0.05) + rng.normal(0, 6, (height, width, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def encoded(image: np.ndarray, fmt: str = "JPEG", mode: str | None = None) -> bytes:
    buf = io.BytesIO()
    im = Image.fromarray(image)
    (im.convert(mode) if mode else im).save(buf, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buf.getvalue()


@pytest.fixture(scope="module")
def jpeg_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("jpegs")
    paths = []
    for i in range(12):
        h, w = [(375, 500), (500, 375), (90, 120), (240, 240)][i % 4]
        path = folder / f"{i:02d}.jpg"
        path.write_bytes(encoded(photo(h, w, i)))
        paths.append(str(path))
    return paths


def cpu_pixels(src, size, rng, **kw):
    """The CPU path at full size: what the device path computes (decoded at full size, not reduced)."""
    return fv.flip(fv.random_resized_crop(src, size, rng, reduced_decode=False, **kw), rng)


def resize_array(image: np.ndarray, height: int, width: int, interpolation: str) -> np.ndarray:
    """The CPU path's resize of a decoded array to exactly ``height`` x ``width``."""
    return fv.resize(image, (height, width), interpolation=interpolation)


def replay(crop: fv.EncodedCrop) -> np.ndarray:
    """A plan carried out on the CPU with the CPU path's own ops: decode, crop the box, resize, flip."""
    top, left, h, w = crop.box
    out = resize_array(fv.decode(crop.data)[top : top + h, left : left + w], *crop.size, crop.interpolation)
    return fv.flip(out) if crop.flip else out


# ------------------------------------------------------------- the plan
@pytest.mark.parametrize("size", [224, (160, 96), 32])
def test_plan_draws_the_cpu_paths_box_and_flip(jpeg_files, size):
    for seed in range(40):
        path = jpeg_files[seed % len(jpeg_files)]
        cpu_rng, plan_rng = np.random.default_rng(seed), np.random.default_rng(seed)
        expected = cpu_pixels(path, size, cpu_rng)
        crop = fv.plan_random_resized_crop(path, size, plan_rng)
        assert crop.pixels is None and crop.data == Path(path).read_bytes()
        assert crop.size == ((size, size) if isinstance(size, int) else size)
        assert crop.image_size == fv.image_size(path)
        np.testing.assert_array_equal(replay(crop), expected)  # same box, same flip: the same pixels, bit for bit
        assert plan_rng.random() == cpu_rng.random(), "the plan consumed a different count of random numbers"


@pytest.mark.parametrize("p", [0.0, 0.3, 1.0, None])
def test_plan_flip_probability_as_flip(jpeg_files, p):
    flips = []
    for seed in range(30):
        cpu_rng, plan_rng = np.random.default_rng(seed), np.random.default_rng(seed)
        image = fv.random_resized_crop(jpeg_files[0], 16, cpu_rng)
        if p is not None:
            fv.flip(image, cpu_rng, p=p)
        crop = fv.plan_random_resized_crop(jpeg_files[0], 16, plan_rng, flip=p)
        flips.append(crop.flip)
        assert plan_rng.random() == cpu_rng.random()
    if p in (0.0, None):
        assert not any(flips)
    elif p == 1.0:
        assert all(flips)
    else:
        assert 0 < sum(flips) < len(flips)


def test_plan_through_pipelines_equals_the_cpu_pipeline_on_every_backend(jpeg_files, backend, no_leaks):
    """The rng feedline gives a map is the same for the plan and the CPU ops: same crops, any backend and worker count."""
    def cpu(path, rng):
        return fv.flip(fv.random_resized_crop(path, 48, rng, reduced_decode=False), rng)

    def plan(path, rng):
        return fv.plan_random_resized_crop(path, 48, rng)

    with fl.from_files(jpeg_files).shuffle(seed=7).map(cpu, backend="serial").batch(4) as reference:
        expected = [b for _epoch in range(2) for b in reference]
    with fl.from_files(jpeg_files).shuffle(seed=7).map(plan, backend=backend, workers=2).batch(4) as planned:
        got = [b for _epoch in range(2) for b in planned]
    assert len(got) == len(expected) == 6
    for crops, images in zip(got, expected):
        assert isinstance(crops, list) and all(isinstance(c, fv.EncodedCrop) for c in crops)
        np.testing.assert_array_equal(np.stack([replay(c) for c in crops]), images)


def test_process_workers_never_import_torch(jpeg_files, no_leaks):
    def plan(path, rng):
        return fv.plan_random_resized_crop(path, 32, rng), "torch" in sys.modules

    with fl.from_files(jpeg_files[:4]).map(plan, backend="process", workers=2).batch(4) as pipe:
        crops, torch_loaded = next(iter(pipe))
    assert len(crops) == 4 and not any(torch_loaded)


def test_images_nvjpeg_is_not_given_are_cropped_on_the_cpu_in_the_worker():
    image = photo(120, 160, 3)
    for src in (encoded(image, "PNG"), encoded(image, mode="L"), encoded(image, mode="CMYK")):
        for seed in range(5):
            cpu_rng, plan_rng = np.random.default_rng(seed), np.random.default_rng(seed)
            expected = fv.flip(fv.random_resized_crop(src, 40, cpu_rng), cpu_rng)  # the CPU path's defaults
            crop = fv.plan_random_resized_crop(src, 40, plan_rng)
            assert crop.data is None and crop.pixels.shape == (40, 40, 3)
            np.testing.assert_array_equal(crop.pixels, expected)
            assert plan_rng.random() == cpu_rng.random()


def test_encoded_crop_pickles_compares_and_prints_short(jpeg_files):
    crop = fv.plan_random_resized_crop(jpeg_files[0], 32, np.random.default_rng(0))
    assert pickle.loads(pickle.dumps(crop)) == crop
    assert "JPEG bytes" in repr(crop) and len(repr(crop)) < 300
    fallback = fv.plan_random_resized_crop(encoded(photo(50, 60, 1), "PNG"), 32, np.random.default_rng(0))
    assert pickle.loads(pickle.dumps(fallback)) == fallback != crop
    with pytest.raises(TypeError):
        hash(crop)


def test_plan_errors():
    with pytest.raises(TypeError, match="rng"):
        fv.plan_random_resized_crop(encoded(photo(20, 20, 0)), 8, None)
    with pytest.raises(ValueError, match="probability"):
        fv.plan_random_resized_crop(encoded(photo(20, 20, 0)), 8, np.random.default_rng(0), flip=2)
    with pytest.raises(ValueError, match="interpolation"):
        fv.plan_random_resized_crop(encoded(photo(20, 20, 0)), 8, np.random.default_rng(0), interpolation="cubic")
    with pytest.raises(fv.ImageDecodeError, match="unrecognised"):
        fv.plan_random_resized_crop(b"not an image at all", 8, np.random.default_rng(0))


# ------------------------------------------------------ the resampling weights
def _resample_numpy(region: np.ndarray, out_h: int, out_w: int, interpolation: str, flip: bool) -> np.ndarray:
    h, w = region.shape[:2]
    area = np.array([[[interpolation == "area" and out_h <= h and out_w <= w]]])
    nearest = interpolation == "nearest"
    rows = resample_weights(np, np.arange(out_h, dtype=float)[None, :, None], np.arange(h, dtype=float)[None, None, :],
                            np.array([[[float(h)]]]), area, None, nearest)[0]
    cols = resample_weights(np, np.arange(out_w, dtype=float)[None, :, None], np.arange(w, dtype=float)[None, None, :],
                            np.array([[[float(w)]]]), area, np.array([[[flip]]]), nearest)[0]
    tall = np.tensordot(rows, region.astype(float), axes=(1, 0))  # (out_h, w, c)
    return np.tensordot(tall, cols, axes=(1, 1)).transpose(0, 2, 1)  # (out_h, out_w, c)


@pytest.mark.parametrize("interpolation", ["area", "linear", "nearest"])
@pytest.mark.parametrize("shape", [(375, 500), (100, 90), (224, 224), (31, 200)])
def test_resample_weights_are_opencvs_filters(interpolation, shape):
    image = photo(*shape, seed=1)
    for (out_h, out_w), flip in [((224, 224), False), ((64, 48), True), ((300, 120), False)]:
        got = np.clip(np.round(_resample_numpy(image, out_h, out_w, interpolation, flip)), 0, 255).astype(np.uint8)
        expected = resize_array(image, out_h, out_w, interpolation)
        if flip:
            expected = expected[:, ::-1]
        diff = np.abs(got.astype(int) - expected.astype(int))
        if interpolation == "nearest":  # a centre exactly on a pixel boundary: OpenCV's fixed point may take the other side
            assert (diff > 0).mean() < 0.25
        else:
            assert diff.max() <= 1, (interpolation, shape, out_h, out_w, diff.max())  # OpenCV rounds its fixed point
            assert diff.mean() < 0.2


def test_resample_weights_rows_sum_to_one():
    k, j = np.arange(7.0)[None, :, None], np.arange(40.0)[None, None, :]
    lengths = np.array([3.0, 7.0, 19.0, 40.0])[:, None, None]
    for area in (True, False):
        for nearest in (False, True):
            w = resample_weights(np, k, j, lengths, np.full((4, 1, 1), area), np.array([True, False, True, False])[:, None, None], nearest)
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-12)
            assert not np.any(w[0, :, 3:]) and not np.any(w[2, :, 19:])  # nothing read past a sample's own length


# ----------------------------------------------------- the device half, on the CPU
@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def test_device_decoder_on_the_cpu_matches_the_cpu_path(jpeg_files, torch):
    decoder = fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="uint8", layout="NHWC")
    for interpolation in ("area", "linear"):
        crops, expected = [], []
        for seed in range(16):
            path = jpeg_files[seed % len(jpeg_files)]
            crops.append(fv.plan_random_resized_crop(path, (96, 80), np.random.default_rng(seed), interpolation=interpolation))
            expected.append(cpu_pixels(path, (96, 80), np.random.default_rng(seed), interpolation=interpolation))
        got = decoder(crops)
        assert got.dtype == torch.uint8 and tuple(got.shape) == (16, 96, 80, 3)
        diff = np.abs(got.numpy().astype(int) - np.stack(expected).astype(int))
        assert diff.max() <= 1 and diff.mean() < 0.2, (interpolation, diff.max(), diff.mean())


def test_device_decoder_layouts_dtypes_and_normalisation(jpeg_files, torch):
    crops = [fv.plan_random_resized_crop(p, 32, np.random.default_rng(i)) for i, p in enumerate(jpeg_files[:6])]
    crops.append(fv.plan_random_resized_crop(encoded(photo(60, 50, 9), "PNG"), 32, np.random.default_rng(9)))  # pixels, mixed in
    pixels = fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="uint8", layout="NHWC")(crops).numpy()
    np.testing.assert_array_equal(pixels[-1], crops[-1].pixels)
    nchw = fv.DeviceJpegDecoder("cpu", decode="cpu", mean=fv.IMAGENET_MEAN, std=fv.IMAGENET_STD)(crops)
    assert nchw.dtype == torch.float32 and tuple(nchw.shape) == (7, 3, 32, 32) and nchw.is_contiguous()
    reference = fv.normalize(pixels, fv.IMAGENET_MEAN, fv.IMAGENET_STD, layout="NCHW")
    np.testing.assert_allclose(nchw.numpy(), reference, atol=0.01)  # rounding to uint8 is the difference
    nhwc = fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="bfloat16", layout="NHWC")(crops)
    assert nhwc.dtype == torch.bfloat16 and tuple(nhwc.shape) == (7, 32, 32, 3)
    np.testing.assert_allclose(nhwc.float().numpy(), pixels / 255.0, atol=0.01)


def test_device_decoder_puts_each_image_in_its_own_row_when_cpu_cropped_ones_sit_between(jpeg_files, torch):
    jpegs = [fv.plan_random_resized_crop(p, 32, np.random.default_rng(i)) for i, p in enumerate(jpeg_files[:6])]
    png = fv.plan_random_resized_crop(encoded(photo(60, 50, 9), "PNG"), 32, np.random.default_rng(9))
    decoder = fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="uint8", layout="NHWC")
    mixed = decoder(jpegs[:3] + [png] + jpegs[3:]).numpy()
    alone = decoder(jpegs).numpy()
    np.testing.assert_array_equal(mixed[3], png.pixels)
    np.testing.assert_array_equal(np.delete(mixed, 3, axis=0), alone)


def test_device_decoder_ahead_decodes_crops_inside_batches(jpeg_files, torch, no_leaks):
    def plan(path, rng):
        return fv.plan_random_resized_crop(path, 40, rng)

    decoder = fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="uint8")
    pipe = fl.from_arrays(np.array(jpeg_files), np.arange(len(jpeg_files))).map(lambda s, rng: (plan(str(s[0]), rng), s[1]), backend="thread")
    with pipe.batch(4) as batched:
        batches = list(decoder.ahead(batched.torch(), depth=2))
    assert [tuple(x.shape) for x, _ in batches] == [(4, 3, 40, 40)] * 3
    assert [i.tolist() for _, i in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    assert decoder.decode_batch({"a": 1, "b": [2, 3]}) == {"a": 1, "b": [2, 3]}


def test_device_decoder_errors_name_what_is_missing_here(torch):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the nvJPEG path can run")
    try:
        import torchvision  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError) as info:
            fv.DeviceJpegDecoder("cuda")
        message = str(info.value)
        assert "torchvision" in message and "feedline[gpu]" in message and "CUDA" in message
    else:
        with pytest.raises(RuntimeError, match="CUDA"):
            fv.DeviceJpegDecoder("cuda")
    with pytest.raises(RuntimeError, match="no(ne)?.*CUDA|CUDA.*none"):
        fv.DeviceJpegDecoder("cuda", decode="cpu")
    with pytest.raises((ImportError, RuntimeError), match="decode='cpu'"):
        fv.DeviceJpegDecoder("cpu")  # nvJPEG needs a CUDA device: the message says how to run on the CPU
    with pytest.raises(ValueError, match="uint8"):
        fv.DeviceJpegDecoder("cpu", decode="cpu", dtype="uint8", mean=0.5)
    decoder = fv.DeviceJpegDecoder("cpu", decode="cpu")
    with pytest.raises(TypeError, match="EncodedCrop"):
        decoder([np.zeros((4, 4, 3), np.uint8)])
    mixed = [fv.plan_random_resized_crop(encoded(photo(30, 30, 0)), s, np.random.default_rng(0)) for s in (8, 9)]
    with pytest.raises(ValueError, match="one output size"):
        decoder(mixed)


def test_a_jpeg_the_device_cannot_decode_is_named(tmp_path, torch):
    path = tmp_path / "cut.jpg"
    path.write_bytes(encoded(photo(200, 300, 4))[:3000])  # the header survives, the data does not
    crops = [fv.plan_random_resized_crop(str(path), 32, np.random.default_rng(0))]  # planning reads the header only
    crops.insert(0, fv.plan_random_resized_crop(encoded(photo(60, 80, 5)), 32, np.random.default_rng(1)))
    with pytest.raises(fv.ImageDecodeError, match="cut.jpg"):
        fv.DeviceJpegDecoder("cpu", decode="cpu")(crops)


# ------------------------------------------ on a GPU (skipped without CUDA)
def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


needs_gpu = pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA device (run on a GPU machine; see docs/adapters.md)")


@needs_gpu
def test_nvjpeg_decoder_on_the_gpu_matches_the_cpu_path_without_a_host_sync(jpeg_files, torch):
    pytest.importorskip("torchvision")
    nvjpeg = fv.DeviceJpegDecoder("cuda")._decode

    def decode_unchecked(datas, device):  # torchvision waits for its own decode stream, by design: not ours to check
        mode = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode(0)
        try:
            return nvjpeg(datas, device)
        finally:
            torch.cuda.set_sync_debug_mode(mode)

    decoder = fv.DeviceJpegDecoder("cuda", dtype="uint8", layout="NHWC", decode=decode_unchecked)
    crops = [fv.plan_random_resized_crop(p, 224, np.random.default_rng(i)) for i, p in enumerate(jpeg_files * 4)]
    expected = np.stack([cpu_pixels(p, 224, np.random.default_rng(i)) for i, p in enumerate(jpeg_files * 4)])
    decoder(crops)  # warm-up: nvJPEG's handles, pinned blocks
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # any host synchronisation in our code raises
    try:
        got = decoder(crops)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert got.is_cuda and tuple(got.shape) == (len(crops), 224, 224, 3)
    diff = np.abs(got.cpu().numpy().astype(int) - expected.astype(int))
    # nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's: close, not equal.
    assert diff.mean() < 3 and np.percentile(diff, 99) <= 16, (diff.mean(), np.percentile(diff, 99), diff.max())


@needs_gpu
def test_torch_adapter_cuda_path_delivers_the_cpu_batches_without_a_host_sync(torch, no_leaks):
    data = np.random.default_rng(0).integers(0, 255, (64, 32, 32, 3), dtype=np.uint8)
    with fl.from_arrays(data).batch(8) as pipe:
        loader = pipe.torch(device="cuda")
        first = list(loader)[0]  # a warm-up epoch: the side stream, pinned blocks
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            batches = list(loader)
        finally:
            torch.cuda.set_sync_debug_mode(0)
        got = np.concatenate([b.cpu().numpy() for b in batches])
    assert first.is_cuda and all(b.is_cuda for b in batches)
    np.testing.assert_array_equal(got, data)


@needs_gpu
def test_jax_adapter_puts_batches_on_the_gpu(no_leaks):
    jax = pytest.importorskip("jax")
    if jax.default_backend() != "gpu":
        pytest.skip("this JAX has no GPU backend")
    data = np.arange(64 * 12, dtype=np.float32).reshape(64, 12)
    with fl.from_arrays(data).batch(16) as pipe:
        batches = list(pipe.jax())
    assert all(b.devices() == {jax.devices()[0]} for b in batches)
    np.testing.assert_array_equal(np.concatenate([np.asarray(b) for b in batches]), data)


# ------------------------------------------------------------- the benchmark
def test_gpu_training_dry_run_prints_its_table(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("jax")
    out = tmp_path / "gpu_training.json"
    env = dict(os.environ, FEEDLINE_BENCH_CACHE=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_training", "--dry-run", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=110, env=env, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("DRY RUN")
    header = next(line for line in lines if line.startswith("| framework | row |"))
    for column in ("step ms", "x ceiling", "host wait", "GPU off-step", "GPU util", "CPU cores", "input alone"):
        assert column in header
    rows = {tuple(cell.strip() for cell in line.split("|")[1:3]): line for line in lines if line.startswith(("| torch", "| jax"))}
    expected = [("torch", r) for r in ("ceiling", "feedline", "feedline-gpu-decode", "dataloader", "dataloader-pil")]
    expected += [("jax", r) for r in ("ceiling", "feedline", "dataloader")]
    assert sorted(rows) == sorted(expected)
    for line in rows.values():
        assert "skipped" not in line, line
    assert any("torch: feedline at" in line for line in lines) and any("jax: feedline at" in line for line in lines)
    results = json.loads(out.read_text())["results"]
    assert {(r["framework"], r["row"]) for r in results} == set(expected)
    assert all(r["step_ms"] > 0 for r in results)
