"""JPEG batches decoded on the GPU: the crop is planned on the CPU, the pixels are made on the device.

Two halves, split where CUDA begins:

- **Plan** (in the workers; NumPy and the JPEG header only):
  `plan_random_resized_crop` reads a file's bytes and its header size,
  draws the crop box with the very function and random numbers
  `random_resized_crop` uses (`_geometry.random_resized_box`) and the flip
  as `flip(image, rng)` draws it (one number, flipped when ``< p``), and
  returns an `EncodedCrop`: the JPEG bytes and the plan. Nothing is
  decoded and nothing touches CUDA, so the workers stay spawn-safe while
  the training process holds a CUDA context.
- **Device** (in the consumer, after the batch arrived):
  `DeviceJpegDecoder` takes a batch's list of `EncodedCrop`, decodes the
  JPEGs on the GPU (nvJPEG through ``torchvision.io.decode_jpeg(...,
  device="cuda")``), then crops, resizes, flips and normalises there.

Only the decode call needs CUDA and torchvision; the crop, resize, flip
and normalisation are plain torch ops, the same on any device. So a
training loop can be tested on a CPU with ``DeviceJpegDecoder("cpu",
decode="cpu")`` (feedline's CPU decoder stands in for nvJPEG). The boxes
and flips are equal to the CPU path's for the same seeds (tested). The
resampling is OpenCV's filters written as weight matrices
(`resample_weights`, one function for NumPy and torch), within one grey
level of the CPU path decoded at full size (tested); nvJPEG itself
decodes a little differently from libjpeg-turbo.

Images nvJPEG is not given (PNGs, grey, CMYK and YCCK JPEGs) are cropped
on the CPU in the worker with the same box and flip, and only uploaded.
"""

from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass

import numpy as np

from .._helper_thread import OrderedHelper
from .._optional import require
from ._crop import RATIO, SCALE
from ._decode import decode, size_of
from ._errors import ImageDecodeError
from ._flip import flip as flip_image
from ._geometry import check_rng, pair, random_resized_box
from ._interpolate import check_interpolation
from ._jpeg import _header as jpeg_header
from ._region import read_region
from ._source import Encoded

__all__ = ["DeviceJpegDecoder", "EncodedCrop", "plan_random_resized_crop"]

# Colour spaces handed to nvJPEG. Grey, CMYK and YCCK JPEGs (a few per
# thousand in ImageNet) are cropped on the CPU in the worker instead:
# nvJPEG's RGB output of them has differed between versions.
DEVICE_COLOURSPACES = ("YCbCr",)
_DTYPES = ("float32", "float16", "bfloat16", "uint8")
_LAYOUTS = ("NCHW", "NHWC")
_EXTRA = "gpu"
_WHO = "feedline.vision.DeviceJpegDecoder"


@dataclass(frozen=True, eq=False)
class EncodedCrop:
    """One sample for the device: the JPEG's bytes and where to crop it, or pixels already cropped.

    Made in a worker by `plan_random_resized_crop`; a batch of them (a
    ``list``, as feedline's default collation makes it) is turned into a
    tensor by `DeviceJpegDecoder`. It is a plain object, so the adapters
    (``pipe.torch(device=...)``, ``pipe.jax()``) leave it on the host.

    Attributes:
        data: the JPEG file's bytes (None when ``pixels`` is set).
        name: the file, for error messages.
        image_size: ``(height, width)`` read from the header.
        box: ``(top, left, height, width)`` in full-size pixels.
        flip: mirror left-right after resizing.
        size: ``(height, width)`` of the output.
        interpolation: ``"area"``, ``"linear"`` or ``"nearest"`` (as `random_resized_crop`).
        pixels: ``(height, width, 3)`` uint8, already cropped, resized and
            flipped on the CPU, for images nvJPEG is not given; else None.

    A JPEG keeps its bytes for the device; a PNG is cropped here and carries pixels:

    >>> import io
    >>> import numpy as np, feedline.vision as fv
    >>> from PIL import Image
    >>> def encoded(kind):
    ...     buf = io.BytesIO()
    ...     Image.new("RGB", (500, 375)).save(buf, kind)
    ...     return buf.getvalue()
    >>> jpeg = fv.plan_random_resized_crop(encoded("JPEG"), 224, np.random.default_rng(0))
    >>> jpeg.image_size, jpeg.size, jpeg.data is not None, jpeg.pixels is None
    ((375, 500), (224, 224), True, True)
    >>> png = fv.plan_random_resized_crop(encoded("PNG"), 224, np.random.default_rng(0))
    >>> png.data is None, png.pixels.shape
    (True, (224, 224, 3))
    >>> png.box == jpeg.box  # the same random numbers draw the same box
    True
    """

    data: bytes | None
    name: str
    image_size: tuple[int, int]
    box: tuple[int, int, int, int]
    flip: bool
    size: tuple[int, int]
    interpolation: str = "area"
    pixels: np.ndarray | None = None

    def __eq__(self, other):  # written out: ``pixels`` arrays compare elementwise (and make it unhashable)
        if not isinstance(other, EncodedCrop):
            return NotImplemented
        fields = ("data", "name", "image_size", "box", "flip", "size", "interpolation")
        if any(getattr(self, f) != getattr(other, f) for f in fields):
            return False
        if self.pixels is None or other.pixels is None:
            return self.pixels is other.pixels
        return bool(np.array_equal(self.pixels, other.pixels))

    def __repr__(self) -> str:
        what = f"{len(self.data)} JPEG bytes" if self.data is not None else f"pixels {self.pixels.shape}"
        return (f"EncodedCrop({self.name!r}, {what}, image_size={self.image_size}, box={self.box}, "
                f"flip={self.flip}, size={self.size})")


def plan_random_resized_crop(
    src,
    size,
    rng: np.random.Generator,
    *,
    scale: tuple[float, float] = SCALE,
    ratio: tuple[float, float] = RATIO,
    flip: float | None = 0.5,
    interpolation: str = "area",
    strict: bool = True,
) -> EncodedCrop:
    """Plan ``flip(random_resized_crop(src, size, rng), rng)`` for the GPU, without decoding.

    For ``map()``: it runs in the workers, reads the file and its header,
    and draws the same box and flip, from the same random numbers, as
    ``fv.flip(fv.random_resized_crop(src, size, rng, scale=scale,
    ratio=ratio), rng, p=flip)``, so the device path crops exactly where
    the CPU path would. `DeviceJpegDecoder` makes the pixels.

    Args:
        src: a JPEG (or PNG) file path or encoded bytes.
        size: output ``int`` (square) or ``(height, width)``.
        rng: the pipeline's generator (``map(fn)`` with ``fn(sample, rng)``).
        scale, ratio: as `random_resized_crop`.
        flip: the probability of a left-right flip (one number is drawn,
            as `flip` does); None draws nothing and never flips.
        interpolation: as `random_resized_crop` (``"area"``: averaging when
            shrinking, linear when enlarging).
        strict: as `decode`, for the images cropped here on the CPU. A JPEG
            for the device is not decoded here, so damage in its compressed
            data shows only when nvJPEG decodes it (`DeviceJpegDecoder`
            then raises an error naming the file).

    Returns:
        An `EncodedCrop`. A PNG, or a grey, CMYK or YCCK JPEG, is cropped
        here on the CPU (the same box and flip) and carries ``pixels``.

    Raises:
        ImageDecodeError: the header cannot be read, or the file is not a
            JPEG or PNG (``on_error=`` of ``map`` handles it).

    >>> import numpy as np, feedline.vision as fv
    >>> from PIL import Image; import io
    >>> buf = io.BytesIO(); Image.new("RGB", (500, 375)).save(buf, "JPEG")
    >>> crop = fv.plan_random_resized_crop(buf.getvalue(), 224, np.random.default_rng(0))
    >>> crop.image_size, crop.size, len(crop.box)
    ((375, 500), (224, 224), 4)
    """
    out = pair(size, "plan_random_resized_crop")
    check_rng(rng, "plan_random_resized_crop")
    check_interpolation(interpolation, "plan_random_resized_crop")
    if flip is not None and not 0.0 <= flip <= 1.0:
        raise ValueError(f"plan_random_resized_crop(flip={flip!r}): flip is a probability, between 0 and 1, or None")
    enc = Encoded(src)
    data = bytes(enc.data)
    if enc.format == "jpeg":
        height, width, colourspace, _ = jpeg_header(data, enc.name)
        on_device = colourspace in DEVICE_COLOURSPACES
    else:
        (height, width), on_device = size_of(enc), False
    # The CPU path's draws, in its order: the box (random_resized_crop), then one number (flip).
    box = random_resized_box(height, width, rng, scale, ratio)
    flipped = flip is not None and bool(rng.random() < flip)
    pixels = None
    if not on_device:
        pixels = read_region(data, lambda h, w: box, lambda b: out, mode="RGB", reduced_decode=True,
                             interpolation=interpolation, op="plan_random_resized_crop", strict=strict)
        if flipped:
            pixels = flip_image(pixels)
        pixels = np.ascontiguousarray(pixels)
    return EncodedCrop(None if pixels is not None else data, enc.name, (int(height), int(width)), tuple(int(v) for v in box),
                       flipped, out, interpolation, pixels)


class DeviceJpegDecoder:
    """Turn a batch of `EncodedCrop` into one image tensor on a device: decode, crop, resize, flip, normalise.

    It runs in the training process, after the batch arrived, never in a
    worker (see docs/vision.md, "Decoding on the GPU"):

    >>> import feedline as fl, feedline.vision as fv
    >>> def plan(path, rng):
    ...     return fv.plan_random_resized_crop(path, 224, rng)
    >>> pipe = fl.from_files("photos/*.jpg").map(plan).batch(256)       # doctest: +SKIP
    >>> decoder = fv.DeviceJpegDecoder("cuda", mean=fv.IMAGENET_MEAN, std=fv.IMAGENET_STD)  # doctest: +SKIP
    >>> for x in decoder.ahead(pipe.torch(device="cuda")):   # x: (256, 3, 224, 224) float32 on the GPU  # doctest: +SKIP
    ...     ...

    Args:
        device: a torch device (``"cuda"``, ``"cuda:1"``, ``"cpu"``).
        mean, std: per-channel values on the 0-1 scale, as `normalize`;
            None: mean 0, std 1. Not allowed with ``dtype="uint8"``.
        dtype: ``"float32"`` (default), ``"float16"``, ``"bfloat16"``
            (``(x / 255 - mean) / std``), or ``"uint8"`` (the resized
            pixels, rounded, for a model that normalises itself).
        layout: ``"NCHW"`` (default) or ``"NHWC"``.
        decode: ``"nvjpeg"`` (default: ``torchvision.io.decode_jpeg`` on
            the device, ``pip install 'feedline[gpu]'``), ``"cpu"``
            (feedline's CPU decoder, then a copy to ``device``: for testing
            a loop without a GPU, not for speed), or a function
            ``(list of bytes, torch.device) -> list of (3, H, W) uint8
            tensors on the device`` (nvImageCodec, torchcodec, ...).

    Raises:
        ImportError: torch, or torchvision for ``decode="nvjpeg"``, cannot
            be imported; the message names every missing piece and the extra.
        RuntimeError: a CUDA device was asked for and this PyTorch has none.
    """

    def __init__(self, device="cuda", *, mean=None, std=None, dtype: str = "float32", layout: str = "NCHW", decode="nvjpeg"):
        if dtype not in _DTYPES:
            raise ValueError(f"DeviceJpegDecoder(dtype={dtype!r}): use one of {', '.join(map(repr, _DTYPES))}")
        if layout not in _LAYOUTS:
            raise ValueError(f"DeviceJpegDecoder(layout={layout!r}): use 'NCHW' or 'NHWC'")
        if dtype == "uint8" and (mean is not None or std is not None):
            raise ValueError("DeviceJpegDecoder(dtype='uint8') returns pixels, not normalised values: leave mean and std None")
        if not (decode in ("nvjpeg", "cpu") or callable(decode)):
            raise ValueError(f"DeviceJpegDecoder(decode={decode!r}): use 'nvjpeg', 'cpu' or a function (list of bytes, device) -> list of tensors")
        torch = require("torch", _EXTRA, _WHO)
        self.device = torch.device(device)
        self._decode = _check_device_decode(torch, self.device, decode)
        self.dtype, self.layout = dtype, layout
        self._scale, self._shift = _affine(mean, std)
        self._affine_on_device = None

    # -------------------------------------------------------------- batches
    def __call__(self, crops) -> "torch.Tensor":  # noqa: F821 (torch is imported lazily)
        """The images of ``crops`` (a sequence of `EncodedCrop`, one batch) as one tensor on the device.

        No host synchronisation: the small per-batch tables go to the
        device from pinned memory, asynchronously, and every kernel runs on
        the current stream (the nvJPEG decode on torchvision's own stream,
        which the current stream waits for).
        """
        torch = sys.modules["torch"]
        crops = check_batch(crops)
        n, (out_h, out_w) = len(crops), crops[0].size
        jpegs = [i for i, c in enumerate(crops) if c.pixels is None]
        images = dict(zip(jpegs, self._decode_jpegs([crops[i] for i in jpegs]))) if jpegs else {}
        # Rows as (out_h, 3, out_w): one GEMM per axis per image, written in place (see `resample_weights`).
        out = torch.empty((n, out_h, 3, out_w), dtype=torch.float32, device=self.device)
        for start in range(0, n, WEIGHT_CHUNK):
            chunk = range(start, min(n, start + WEIGHT_CHUNK))
            todo = [i for i in chunk if crops[i].pixels is None]
            if todo:
                self._resample(torch, [crops[i] for i in todo], [images[i] for i in todo], out, todo)
            for i in chunk:
                if crops[i].pixels is not None:  # rare: cropped on the CPU already (PNG, grey, CMYK)
                    out[i] = self._upload(torch, crops[i].pixels).permute(0, 2, 1)
        return self._finish(torch, out)

    def _decode_jpegs(self, crops) -> list:
        """The decoded images (C, H, W uint8 on the device); a failure names the file that caused it."""
        try:
            return list(self._decode([c.data for c in crops], self.device))
        except Exception as exc:  # noqa: BLE001 (a batch decoder names no file: find it, one at a time)
            for c in crops:
                try:
                    self._decode([c.data], self.device)
                except Exception as one:  # noqa: BLE001
                    raise ImageDecodeError(c.name, "jpeg", f"decoding on {self.device} failed ({type(one).__name__}: {one})") from one
            raise exc

    def _upload(self, torch, array: np.ndarray):
        """A small host array on the device without a host synchronisation (pinned, non-blocking on CUDA)."""
        tensor = torch.from_numpy(np.array(array, copy=True))
        if self.device.type == "cuda":
            return tensor.pin_memory().to(self.device, non_blocking=True)
        return tensor.to(self.device)

    def _resample(self, torch, crops, images, out, rows):
        """Crop, resize and flip ``images`` into ``out[rows]`` with separable weight matrices."""
        out_h, out_w = crops[0].size
        mode = crops[0].interpolation
        boxes = np.array([c.box for c in crops], np.float32)
        heights, widths = boxes[:, 2], boxes[:, 3]
        params = np.stack([heights, widths, [c.flip for c in crops], heights >= out_h], axis=1).astype(np.float32)
        params[:, 3] *= widths >= out_w  # INTER_AREA only when both sides shrink, as `resize_array`
        if mode != "area":
            params[:, 3] = 0
        p = self._upload(torch, params)[:, :, None, None]
        grid_h = torch.arange(int(heights.max()), dtype=torch.float32, device=self.device)[None, None, :]
        grid_w = torch.arange(int(widths.max()), dtype=torch.float32, device=self.device)[None, None, :]
        k_h = torch.arange(out_h, dtype=torch.float32, device=self.device)[None, :, None]
        k_w = torch.arange(out_w, dtype=torch.float32, device=self.device)[None, :, None]
        area, nearest = p[:, 3] > 0, mode == "nearest"
        rows_w = resample_weights(torch, k_h, grid_h, p[:, 0], area, None, nearest)  # (n, out_h, max h)
        cols_w = resample_weights(torch, k_w, grid_w, p[:, 1], area, p[:, 2] > 0, nearest)  # (n, out_w, max w)
        # Each crop into one zero-padded (chunk, max h, 3, max w) float block: one copy kernel per image. Then
        # rows and columns are one batched GEMM each for the whole chunk (the padding meets zero weights).
        # Per image, two GEMMs and the crop's own copies launched from Python cost a kernel launch each, per image.
        block = torch.zeros((len(crops), grid_h.shape[-1], 3, grid_w.shape[-1]), dtype=torch.float32, device=self.device)
        for k, (c, image) in enumerate(zip(crops, images)):
            got = (int(image.shape[-2]), int(image.shape[-1]))
            if got != c.image_size:
                raise RuntimeError(f"DeviceJpegDecoder: {c.name} decoded to {got[0]}x{got[1]} but its header says "
                                   f"{c.image_size[0]}x{c.image_size[1]}; the crop was planned for the header's size")
            if image.shape[0] == 1:
                image = image.expand(3, -1, -1)
            top, left, h, w = c.box
            block[k, :h, :, :w].copy_(image[:3, top : top + h, left : left + w].permute(1, 0, 2))
        n, max_h, _, max_w = block.shape
        tall = torch.bmm(rows_w, block.view(n, max_h, 3 * max_w)).view(n, out_h * 3, max_w)
        if rows == list(range(rows[0], rows[0] + n)):  # the usual case: written in place
            torch.bmm(tall, cols_w.transpose(1, 2), out=out[rows[0] : rows[0] + n].view(n, out_h * 3, out_w))
        else:  # some rows of the chunk were cropped on the CPU (PNG, grey, CMYK)
            out[torch.as_tensor(rows, device=self.device)] = torch.bmm(tall, cols_w.transpose(1, 2)).view(n, out_h, 3, out_w)

    def _finish(self, torch, out):
        """``(n, out_h, 3, out_w)`` float32 -> the asked dtype and layout."""
        out = out.permute(0, 2, 1, 3) if self.layout == "NCHW" else out.permute(0, 1, 3, 2)
        if self.dtype == "uint8":
            return out.round_().clamp_(0, 255).to(torch.uint8).contiguous()
        if self._affine_on_device is None:
            shape = (1, 3, 1, 1) if self.layout == "NCHW" else (1, 1, 1, 3)
            self._affine_on_device = tuple(self._upload(torch, np.asarray(v, np.float32)).view(shape) for v in (self._scale, self._shift))
        scale, shift = self._affine_on_device
        return torch.addcmul(shift, out, scale).to(getattr(torch, self.dtype)).contiguous()

    def decode_batch(self, batch):
        """``batch`` with every list of `EncodedCrop` in it replaced by its tensor (other leaves as they are)."""
        if isinstance(batch, list) and batch and all(isinstance(c, EncodedCrop) for c in batch):
            return self(batch)
        if isinstance(batch, tuple):
            items = [self.decode_batch(v) for v in batch]
            return type(batch)(*items) if hasattr(batch, "_fields") else tuple(items)
        if isinstance(batch, list):
            return [self.decode_batch(v) for v in batch]
        if isinstance(batch, dict):
            return {k: self.decode_batch(v) for k, v in batch.items()}
        return batch

    def ahead(self, batches, depth: int = 1):
        """Iterate ``batches`` (e.g. ``pipe.torch(device="cuda")``) with their crops decoded, ``depth`` batches ahead.

        The decode of the next batch is issued before the current one is
        handed out, so the host's part of it (nvJPEG's Huffman decoding,
        the launches) overlaps the step the GPU is running. Closing the
        generator closes ``batches``' iterator.
        """
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
            raise ValueError(f"DeviceJpegDecoder.ahead(depth=...) must be an integer >= 0, got {depth!r}")
        torch = sys.modules["torch"]
        iterator = iter(batches)
        # On CUDA the decode runs on a helper thread, on the stream that is current here, so the loop's thread
        # keeps launching the step while nvJPEG's host part (Huffman decoding, GIL released) runs.
        threaded = self.device.type == "cuda"
        stream = torch.cuda.current_stream(self.device) if threaded else None

        def decode(batch):
            if stream is None:
                return self.decode_batch(batch)
            with torch.cuda.stream(stream):
                return self.decode_batch(batch)

        try:
            with OrderedHelper(decode, threaded=threaded, name="feedline-device-decode") as helper:
                yield from helper.ahead(iterator, depth)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        return f"DeviceJpegDecoder(device={str(self.device)!r}, dtype={self.dtype!r}, layout={self.layout!r})"


# ------------------------------------------------------------------ kernels
WEIGHT_CHUNK = 32  # images whose weight tables are built together: bounds their memory (32 x 224 x longest side floats)


def resample_weights(xp, k, j, length, area, flip, nearest: bool = False):
    """Weights ``W[b, k, j]``: output pixel ``k`` of sample ``b`` is ``sum_j W[b, k, j] * input[j]`` along one axis.

    One function for NumPy (tests, on the CPU) and torch (the device):
    ``xp`` is the module, and the arguments broadcast as
    ``k (1, out, 1)``, ``j (1, 1, longest)``, ``length (b, 1, 1)`` (the
    box's extent), ``area`` and ``flip`` ``(b, 1, 1)`` booleans (``flip``
    None: never). The filters are OpenCV's, as the CPU path uses them
    (`resize_array`): ``area`` is ``INTER_AREA`` (each output pixel
    averages the input it covers, fractions weighted; chosen when both
    sides shrink), otherwise ``INTER_LINEAR`` (half-pixel centres,
    clamped at the border). ``nearest`` takes the input pixel under each
    output pixel's centre (OpenCV's ``INTER_NEAREST_EXACT`` rounds its
    fixed-point position and picks the neighbour in a few places where
    a centre falls exactly on a pixel boundary). Weights past ``length``
    are 0, so samples of different sizes share one table. A flip mirrors
    the outputs.

    >>> import numpy as np
    >>> k, j = np.arange(2.0)[None, :, None], np.arange(4.0)[None, None, :]
    >>> resample_weights(np, k, j, np.array([[[4.0]]]), np.array([[[True]]]), None)[0]
    array([[0.5, 0.5, 0. , 0. ],
           [0. , 0. , 0.5, 0.5]])
    """
    n = k.shape[1]
    if flip is not None:
        k = xp.where(flip, (n - 1) - k, k)
    # Positions as integer numerators over n or 2n (exact in float32), so that
    # a pixel boundary is never missed by a rounding error.
    if nearest:
        return xp.where(j == xp.minimum(xp.floor((2 * k + 1) * length / (2 * n)), length - 1), 1.0, 0.0)
    centre = xp.minimum(xp.clip(((2 * k + 1) * length - n) / (2 * n), 0, None), length - 1)
    linear = xp.clip(1 - xp.abs(j - centre), 0, None)
    box = xp.clip(xp.minimum((k + 1) * length, (j + 1) * n) - xp.maximum(k * length, j * n), 0, None) / length
    return xp.where(area, box, linear)


def check_batch(crops) -> list:
    """``crops`` as a list of `EncodedCrop` with one output size and one interpolation, or a clear error."""
    crops = list(crops)
    if not crops:
        raise ValueError("DeviceJpegDecoder: an empty batch")
    for c in crops:
        if not isinstance(c, EncodedCrop):
            raise TypeError(f"DeviceJpegDecoder takes EncodedCrop samples (from plan_random_resized_crop), got {type(c).__name__}")
    first = crops[0]
    for c in crops:
        if c.size != first.size or c.interpolation != first.interpolation:
            raise ValueError(f"DeviceJpegDecoder: one batch must have one output size and interpolation; {c.name} has "
                             f"{c.size}, {c.interpolation!r}, {first.name} has {first.size}, {first.interpolation!r}")
    return crops


def _affine(mean, std) -> tuple[list[float], list[float]]:
    """``x * a + b`` equal to ``(x / 255 - mean) / std``, per channel."""
    m = np.zeros(3) if mean is None else np.broadcast_to(np.asarray(mean, np.float64).reshape(-1), (3,))
    s = np.ones(3) if std is None else np.broadcast_to(np.asarray(std, np.float64).reshape(-1), (3,))
    if np.any(s == 0):
        raise ValueError(f"DeviceJpegDecoder: std must not be 0, got {std!r}")
    return list(1.0 / (255.0 * s)), list(-m / s)


# ------------------------------------------------------------------ decoders
def _check_device_decode(torch, device, decode):
    """The decode function for ``decode`` on ``device``, or an error naming everything missing."""
    missing = []
    torchvision_error = None
    if decode == "nvjpeg":
        try:
            tv_io = require("torchvision.io", _EXTRA, f"{_WHO} (decode='nvjpeg': nvJPEG through torchvision.io.decode_jpeg)",
                            package="torchvision")
        except ImportError as e:
            torchvision_error = e
            missing.append(str(e))
    if device.type == "cuda" and not torch.cuda.is_available():
        missing.append(f"a CUDA device: this PyTorch has none (torch {torch.__version__}, torch.cuda.is_available() is False); "
                       "install a CUDA build of torch on a machine with an NVIDIA GPU")
    elif decode == "nvjpeg" and device.type != "cuda":
        missing.append(f"a CUDA device: decode='nvjpeg' decodes on the GPU, and device={str(device)!r} is not one; "
                       "pass decode='cpu' to run the same crops on the CPU")
    if missing:
        message = f"{_WHO}(device={str(device)!r}, decode={decode!r}) cannot run here. Missing: " + "; ".join(missing)
        if torchvision_error is not None:
            raise ImportError(message) from torchvision_error
        raise RuntimeError(message)
    if decode == "nvjpeg":
        return _nvjpeg(tv_io)
    if decode == "cpu":
        return _cpu_decode
    return decode


def _nvjpeg(tv_io):
    """``(datas, device) -> list of (3, H, W) uint8`` with torchvision's batched nvJPEG decode."""
    torch = sys.modules["torch"]
    batched = _version(sys.modules["torchvision"].__version__) >= (0, 19)  # 0.19: decode_jpeg takes a list

    def run(datas, device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch.frombuffer: "the given buffer is not writable" (it is only read)
            inputs = [torch.frombuffer(d, dtype=torch.uint8) for d in datas]
        mode = tv_io.ImageReadMode.RGB
        if batched:
            return list(tv_io.decode_jpeg(inputs, mode=mode, device=device))
        return [tv_io.decode_jpeg(t, mode=mode, device=device) for t in inputs]

    return run


def _cpu_decode(datas, device):
    """feedline's CPU decoder, then a copy to ``device``: a stand-in for nvJPEG when testing without a GPU."""
    torch = sys.modules["torch"]
    return [torch.from_numpy(decode(d, mode="RGB")).permute(2, 0, 1).to(device) for d in datas]


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)

