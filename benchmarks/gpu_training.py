"""Does the GPU ever wait? A ResNet-50 training step fed from JPEG files, against the same step on data already there.

Run (from the repository root; 1 NVIDIA GPU, 16 cores; CUDA builds of
torch, torchvision and jax, and nvidia-ml-py for the GPU's utilisation)::

    pip install -e '.[vision,gpu]' 'jax[cuda12]' nvidia-ml-py
    python -m benchmarks.gpu_training --repeat 3 --json /tmp/gpu_training.json   # ~5-8 minutes (estimate)
    python -m benchmarks.gpu_training --dry-run      # CPU, tiny sizes, ~15 s: the script end to end, no GPU

The first run writes ``--images`` JPEG files (1024, ~1 minute) under the
benchmark cache folder (`benchmarks.imagedata.jpeg_folder`); an epoch
cycles through them, every sample with its own crop.

What it measures. One training step: a ResNet-50 (torchvision's layout,
defined here; synthetic weights, 1000 classes, plain SGD), batch 256,
224x224, mixed precision (bfloat16 autocast in torch, bfloat16 compute
in JAX), channels-last, labels ``index % 1000``. Fed by:

- ``ceiling``: one batch already on the GPU, reused every step (the step
  time with a perfect loader).
- ``feedline``: JPEG files -> ``fv.random_resized_crop(224)`` + ``fv.flip``
  (the suite's ``jpeg`` workload's native per-sample function,
  `benchmarks.vision.native_sample`) in ``--workers`` process workers,
  batch 256, uint8 NHWC -> ``pipe.torch(device="cuda", pin_memory=True)``
  (pinned staging, side-stream copies two batches ahead) or ``pipe.jax()``
  (``device_put`` two batches ahead); normalisation on the GPU, in the step.
- ``feedline-gpu-decode`` (torch only): the workers only read the file and
  plan the crop (``fv.plan_random_resized_crop``); nvJPEG decodes and
  ``fv.DeviceJpegDecoder`` crops, resizes and flips on the GPU, one batch ahead.
- ``dataloader``: torch's ``DataLoader`` with ``--workers`` workers,
  ``pin_memory=True``, the same per-sample function (seeded per index),
  ``.to("cuda", non_blocking=True)`` in the loop (JAX: ``jax.device_put``).
- ``dataloader-pil`` (torch only): the same DataLoader running the suite's
  shared ``jpeg`` function (`benchmarks.vision.jpeg_sample`: PIL decode,
  RandomResizedCrop + flip + normalise to float32 CHW on the CPU), what a
  torchvision user typically runs.

Columns: ``step ms`` is wall time per step over ``--steps`` steps after
``--warmup`` (synchronised at both ends); ``x ceiling`` is the ceiling's
step time over this row's; ``host wait`` is the time per step the
training loop spent in ``next()`` (including the H2D copy a DataLoader loop
issues); ``GPU off-step`` is the GPU time per step outside the training
step's kernels, from CUDA events around each step (the GPU waiting for the
input, or running input work: copies, decode); ``GPU util`` is NVML's
utilisation sampled every 50 ms (pynvml, else ``nvidia-smi``); ``CPU
cores`` is the whole machine's busy cores (``/proc/stat``) and
``consumer`` the training process's own; ``input alone`` is the loader's
rate with no training (including the copy to the GPU): where it is below
the ceiling's rate, the cores cannot decode fast enough and no loader can
reach the ceiling. Target: ``feedline`` >= 0.95 x ceiling where ``input
alone`` allows it, and ahead of ``dataloader``.

Last measured: 2026-11-25 on one H100 80GB with 16 cores (torch
2.11.0+cu130, torchvision 0.26.0, jax 0.11.2; table in RESULTS.md, "GPU:
ResNet-50 fed from JPEG files"): torch ceiling 64.3 ms a step, feedline 1.000 of it (GPU
off-step 0.00 ms), feedline-gpu-decode 0.682, dataloader 0.988; JAX
ceiling 50.2 ms, feedline 1.006, dataloader 0.473. With the batched
device resample (2026-11-26, one H200, 16 cores, ``--row
feedline-gpu-decode --repeat 1``): ceiling 54.3 ms, feedline-gpu-decode
0.782 (input alone 6,465 images/s). The ``--dry-run``
numbers (CPU, tiny model) check that the script runs; they measure nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # torch and JAX share the GPU in one process

import numpy as np  # noqa: E402

from .imagedata import jpeg_folder  # noqa: E402
from .loaders import SampleDataset  # noqa: E402
from .runner import _machine_busy_seconds, cores  # noqa: E402
from .vision import MEAN, SIZE, STD, jpeg_sample, native_sample  # noqa: E402
from .workloads import SEED, Workload  # noqa: E402

CLASSES = 1000
ROWS = ("ceiling", "feedline", "feedline-gpu-decode", "dataloader", "dataloader-pil")
JAX_ROWS = ("ceiling", "feedline", "dataloader")
RESNET50 = {"layers": (3, 4, 6, 3), "width": 64}
TINY = {"layers": (1,), "width": 8}  # one stage of the same blocks, for --dry-run on a CPU (JAX compiles it in ~2 s)


# ------------------------------------------------------------ per-sample work
def seeded_native_sample(sample):
    """`native_sample` with a generator seeded from ``(SEED, index)``: what a DataLoader worker runs."""
    return native_sample(sample, np.random.default_rng([SEED, int(sample[1])]))


def plan_sample(sample, rng):
    """``(path, index) -> (EncodedCrop, index)``: the crop and flip of `native_sample`, drawn, not decoded."""
    import feedline.vision as fv

    path, index = sample
    return fv.plan_random_resized_crop(str(path), SIZE, rng), index


def numpy_collate(rows):
    """DataLoader collation to NumPy (for JAX): ``(stack(images), indices)``."""
    images, index = zip(*rows)
    return np.stack(images), np.asarray(index)


# -------------------------------------------------------------------- config
@dataclass
class Config:
    device: str
    batch: int
    steps: int
    warmup: int
    workers: int
    images: int
    image_hw: tuple[int, int]
    model: dict
    backend: str
    amp: bool
    dry_run: bool
    repeat: int

    @property
    def samples(self) -> int:
        return (self.warmup + self.steps + 4) * self.batch  # a few batches more than are taken: no epoch end in sight


@dataclass
class Result:
    framework: str
    row: str
    detail: str = ""
    step_ms: float | None = None
    images_per_s: float | None = None
    x_ceiling: float | None = None
    host_wait_ms: float | None = None
    gpu_off_step_ms: float | None = None
    gpu_util: float | None = None
    cpu_cores: float | None = None
    consumer_cores: float | None = None
    input_alone: float | None = None
    skipped: str = ""
    runs: list = field(default_factory=list)


# ------------------------------------------------------------ measurements
class GpuMonitor:
    """NVML utilisation of the GPU, sampled every ``interval`` s (pynvml, else ``nvidia-smi``); None without a GPU."""

    def __init__(self, enabled: bool, interval: float = 0.05):
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = None
        self._proc = None
        self.source = "none"
        if not enabled:
            return
        index = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
        index = int(index) if index.isdigit() else 0
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.source = "pynvml"

            def poll():
                while not self._stop.wait(interval):
                    self.samples.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))

            self._thread = threading.Thread(target=poll, daemon=True)
        except Exception:  # noqa: BLE001 (pynvml missing or failing: try nvidia-smi)
            if shutil.which("nvidia-smi"):
                self.source = "nvidia-smi"
                self._thread = threading.Thread(target=self._smi, args=(index, interval), daemon=True)

    def _smi(self, index: int, interval: float):
        cmd = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-i", str(index),
               "-lms", str(max(50, int(interval * 1000)))]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self._proc.stdout:
            if self._stop.is_set():
                break
            with contextlib.suppress(ValueError):
                self.samples.append(float(line.strip()))

    def __enter__(self):
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._proc is not None:
            self._proc.terminate()
        if self._thread is not None:
            self._thread.join(timeout=2)

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


class CpuMeter:
    """Busy cores of the whole machine (/proc/stat) and of this process (getrusage) over a window."""

    def __enter__(self):
        self.t0, self.m0, self.s0 = time.perf_counter(), _machine_busy_seconds(), _self_cpu()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        m1 = _machine_busy_seconds()
        self.machine = None if m1 is None or self.m0 is None else (m1 - self.m0) / wall
        self.consumer = (_self_cpu() - self.s0) / wall


@contextlib.contextmanager
def _dataloader_batches(dl, move):
    """Iterate a torch ``DataLoader``, ``move(x, i)`` applied to every batch; its workers are stopped on exit.

    ``move`` puts the batch on the device (``.to(...)`` or ``jax.device_put``),
    in the loop, as a DataLoader user does.
    """
    it = iter(dl)
    try:
        yield (move(x, i) for x, i in it)
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)  # only multi-process iterators have workers to stop
        if shutdown is not None:
            shutdown()


def _self_cpu() -> float:
    me = resource.getrusage(resource.RUSAGE_SELF)
    return me.ru_utime + me.ru_stime


# ==================================================================== torch
def torch_resnet(layers, width: int, classes: int = CLASSES):
    """ResNet with bottleneck blocks in torchvision's layout (v1.5: stride on the 3x3); ``(3, 4, 6, 3), 64`` is ResNet-50."""
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, mid: int, stride: int):
            super().__init__()
            cout = mid * 4
            self.conv1, self.bn1 = nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv2, self.bn2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False), nn.BatchNorm2d(mid)
            self.conv3, self.bn3 = nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.relu(self.bn2(self.conv2(y)))
            y = self.bn3(self.conv3(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    blocks, cin = [], width
    for stage, count in enumerate(layers):
        mid = width * 2**stage
        for k in range(count):
            blocks.append(Bottleneck(cin, mid, 2 if (k == 0 and stage > 0) else 1))
            cin = mid * 4
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1),
        *blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes),
    )


class TorchStep:
    """One training step on a batch ``(images, index)``; uint8 NHWC images are normalised here, on the device."""

    def __init__(self, cfg: Config):
        import torch

        self.torch = torch
        self.device = torch.device(cfg.device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            torch.backends.cudnn.benchmark = True
        self.model = torch_resnet(**cfg.model).to(self.device, memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.amp = cfg.amp
        self.scale = (1.0 / (255.0 * torch.tensor(STD))).view(1, 3, 1, 1).to(self.device)
        self.shift = (-torch.tensor(MEAN) / torch.tensor(STD)).view(1, 3, 1, 1).to(self.device)

    def __call__(self, batch):
        torch = self.torch
        x, index = batch
        if x.dtype == torch.uint8:  # (N, H, W, C) uint8 -> normalised (N, C, H, W), channels-last in memory
            x = torch.addcmul(self.shift, x.permute(0, 3, 1, 2).float(), self.scale)
        x = x.contiguous(memory_format=torch.channels_last)
        y = index.to(self.device, non_blocking=True).long() % CLASSES
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.amp):
            loss = torch.nn.functional.cross_entropy(self.model(x), y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize(self.device)


def torch_loaders(cfg: Config, paths: np.ndarray, index: np.ndarray) -> dict:
    """Row name -> a function returning a context manager of ``(iterable of (images, index) on the device, detail)``."""
    import torch

    device = torch.device(cfg.device)
    cuda = device.type == "cuda"

    @contextlib.contextmanager
    def ceiling():
        x = torch.randint(0, 256, (cfg.batch, SIZE, SIZE, 3), dtype=torch.uint8, device=device)
        i = torch.arange(cfg.batch, device=device)
        yield itertools.repeat((x, i)), "one uint8 batch on the device, reused"

    @contextlib.contextmanager
    def feedline():
        import feedline as fl

        pipe = fl.from_arrays(paths, index).map(native_sample, backend=cfg.backend, workers=cfg.workers).batch(cfg.batch)
        with pipe:
            loader = pipe.torch(device=device, pin_memory=cuda)
            yield loader, f"{cfg.backend} x{cfg.workers}, pipe.torch(device={str(device)!r}, pin_memory={cuda})"

    @contextlib.contextmanager
    def feedline_gpu_decode():
        import feedline as fl
        import feedline.vision as fv

        decode, note = "nvjpeg", "nvJPEG"
        if not cuda:
            decode, note = "cpu", "CPU stand-in decode (dry run)"
        decoder = fv.DeviceJpegDecoder(device, dtype="uint8", layout="NHWC", decode=decode)
        pipe = fl.from_arrays(paths, index).map(plan_sample, backend=cfg.backend, workers=cfg.workers).batch(cfg.batch)
        with pipe:
            batches = decoder.ahead(pipe.torch(device=device, pin_memory=cuda))
            try:
                yield batches, f"{cfg.backend} x{cfg.workers}, plan on CPU, {note} + crop/resize/flip on the device"
            finally:
                batches.close()

    def dataloader(fn, what):
        @contextlib.contextmanager
        def make():
            from torch.utils.data import DataLoader

            w = Workload(name="gpu-training", data=paths, batch_size=cfg.batch, fn=fn, description=what)
            dl = DataLoader(SampleDataset(w), batch_size=cfg.batch, shuffle=False, num_workers=cfg.workers, pin_memory=cuda)
            with _dataloader_batches(dl, lambda x, i: (x.to(device, non_blocking=cuda), i.to(device, non_blocking=cuda))) as batches:
                yield batches, f"fork x{cfg.workers}, pin_memory={cuda}, {what}"

        return make

    return {
        "ceiling": ceiling,
        "feedline": feedline,
        "feedline-gpu-decode": feedline_gpu_decode,
        "dataloader": dataloader(seeded_native_sample, "the same per-sample function"),
        "dataloader-pil": dataloader(jpeg_sample, "the suite's PIL function (float32 CHW, normalised on the CPU)"),
    }


def _warmed_up(batches, step, cfg: Config, train: bool):
    """An iterator over ``batches`` after ``cfg.warmup`` untimed steps (compilation, caches, workers)."""
    it = iter(batches)
    for _ in range(cfg.warmup):
        batch = next(it)
        if train:
            step(batch)
    step.sync()
    return it


def _timed_steps(it, steps: int, act, finish) -> tuple[list[float], float]:
    """Time ``steps`` steps: ``act(next(it))`` each, then ``finish(last batch)`` (a device sync).

    Returns the seconds each ``next(it)`` waited, and the wall time of the
    whole loop, ``finish`` included.
    """
    waits = []
    start = time.perf_counter()
    batch = None
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = next(it)
        waits.append(time.perf_counter() - t0)
        act(batch)
    finish(batch)
    return waits, time.perf_counter() - start


def _close(it) -> None:
    """Close the batch iterator where it can be closed (a generator, feedline's iterators), so its workers stop now."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


def run_torch_row(cfg: Config, step: TorchStep, make, train: bool = True) -> dict:
    """Warm up, then time ``cfg.steps`` steps (or, without ``train``, the loader alone)."""
    torch = step.torch
    with make() as (batches, detail):
        it = _warmed_up(batches, step, cfg, train)
        events = []

        def act(batch):
            if not train:
                return
            if step.cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                step(batch)
                end.record()
                events.append((begin, end))
            else:
                step(batch)

        with GpuMonitor(step.cuda and train) as gpu, CpuMeter() as cpu:
            # finish: the whole device, so the last side-stream copy has landed too
            waits, wall = _timed_steps(it, cfg.steps, act, finish=lambda batch: step.sync())
        _close(it)
    off = None
    if events:
        off = statistics.fmean(events[k - 1][1].elapsed_time(events[k][0]) for k in range(1, len(events))) if len(events) > 1 else 0.0
    return {"detail": detail, "wall": wall, "wait": statistics.fmean(waits), "off": off, "gpu": gpu.mean(),
            "cpu": cpu.machine, "consumer": cpu.consumer}


# ====================================================================== JAX
def jax_resnet(layers, width: int, classes: int = CLASSES):
    """The same ResNet in plain JAX (NHWC, bfloat16 compute, batch-statistics BatchNorm): ``(params, apply)``."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    rng = np.random.default_rng(0)  # NumPy: JAX's eager random ops compile once per shape (seconds on a CPU)

    def conv_w(kh, kw, cin, cout):
        return jnp.asarray(rng.normal(0.0, np.sqrt(2.0 / (kh * kw * cin)), (kh, kw, cin, cout)).astype(np.float32))

    def bn_p(c):
        return {"g": jnp.ones((c,), jnp.float32), "b": jnp.zeros((c,), jnp.float32)}

    params = {"stem": {"w": conv_w(7, 7, 3, width), "bn": bn_p(width)}, "blocks": []}
    plan, cin = [], width
    for stage, count in enumerate(layers):
        mid = width * 2**stage
        for k in range(count):
            stride = 2 if (k == 0 and stage > 0) else 1
            cout = mid * 4
            block = {"w1": conv_w(1, 1, cin, mid), "bn1": bn_p(mid), "w2": conv_w(3, 3, mid, mid), "bn2": bn_p(mid),
                     "w3": conv_w(1, 1, mid, cout), "bn3": bn_p(cout)}
            down = stride != 1 or cin != cout
            if down:
                block["wd"], block["bnd"] = conv_w(1, 1, cin, cout), bn_p(cout)
            params["blocks"].append(block)
            plan.append((stride, down))
            cin = cout
    params["fc"] = {"w": jnp.asarray(rng.normal(0.0, 0.01, (cin, classes)).astype(np.float32)), "b": jnp.zeros((classes,), jnp.float32)}

    def conv(x, w, stride, pad):
        return lax.conv_general_dilated(x, w.astype(x.dtype), (stride, stride), [(pad, pad), (pad, pad)],
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def bn(x, p):
        xf = x.astype(jnp.float32)
        mean = xf.mean((0, 1, 2))
        var = xf.var((0, 1, 2))
        return ((xf - mean) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]).astype(x.dtype)

    def apply(p, x):
        x = jax.nn.relu(bn(conv(x, p["stem"]["w"], 2, 3), p["stem"]["bn"]))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), [(0, 0), (1, 1), (1, 1), (0, 0)])
        for (stride, down), b in zip(plan, p["blocks"]):
            y = jax.nn.relu(bn(conv(x, b["w1"], 1, 0), b["bn1"]))
            y = jax.nn.relu(bn(conv(y, b["w2"], stride, 1), b["bn2"]))
            y = bn(conv(y, b["w3"], 1, 0), b["bn3"])
            x = jax.nn.relu(y + (bn(conv(x, b["wd"], stride, 0), b["bnd"]) if down else x))
        x = x.astype(jnp.float32).mean((1, 2))
        return x @ p["fc"]["w"] + p["fc"]["b"]

    return params, apply


class JaxStep:
    """The JAX training step (jitted, parameters donated); uint8 NHWC in, normalised on the device."""

    def __init__(self, cfg: Config):
        import jax
        import jax.numpy as jnp

        self.jax = jax
        params, apply = jax_resnet(**cfg.model)
        compute = jnp.bfloat16 if cfg.amp else jnp.float32
        scale = jnp.asarray(1.0 / (255.0 * STD), jnp.float32)
        shift = jnp.asarray(-MEAN / STD, jnp.float32)

        def loss_fn(p, x, index):
            xf = (x.astype(jnp.float32) * scale + shift).astype(compute)
            logp = jax.nn.log_softmax(apply(p, xf))
            y = (index % CLASSES).astype(jnp.int32)
            return -jnp.take_along_axis(logp, y[:, None], axis=1).mean()

        def train(p, x, index):
            loss, grads = jax.value_and_grad(loss_fn)(p, x, index)
            return jax.tree_util.tree_map(lambda a, g: a - 0.01 * g, p, grads), loss

        self._train = jax.jit(train, donate_argnums=(0,))
        self.params = params
        self.cuda = jax.default_backend() == "gpu"

    def __call__(self, batch):
        x, index = batch
        self.params, loss = self._train(self.params, x, index)
        return loss

    def sync(self):
        self.jax.block_until_ready(self.params)


def jax_loaders(cfg: Config, paths: np.ndarray, index: np.ndarray) -> dict:
    import jax
    import jax.numpy as jnp

    @contextlib.contextmanager
    def ceiling():
        x = jax.device_put(np.random.default_rng(0).integers(0, 256, (cfg.batch, SIZE, SIZE, 3), dtype=np.uint8))
        i = jnp.arange(cfg.batch, dtype=jnp.int32)
        yield itertools.repeat((x, i)), "one uint8 batch on the device, reused"

    @contextlib.contextmanager
    def feedline():
        import feedline as fl

        pipe = fl.from_arrays(paths, index.astype(np.int32)).map(native_sample, backend=cfg.backend, workers=cfg.workers).batch(cfg.batch)
        with pipe:
            yield pipe.jax(), f"{cfg.backend} x{cfg.workers}, pipe.jax()"

    @contextlib.contextmanager
    def dataloader():
        from torch.utils.data import DataLoader

        w = Workload(name="gpu-training", data=paths, batch_size=cfg.batch, fn=seeded_native_sample, description="")
        # forkserver: JAX is multithreaded, and forking it can deadlock (JAX warns); the workers need no JAX.
        dl = DataLoader(SampleDataset(w), batch_size=cfg.batch, shuffle=False, num_workers=cfg.workers,
                        collate_fn=numpy_collate, multiprocessing_context="forkserver")
        with _dataloader_batches(dl, lambda x, i: jax.device_put((x, i.astype(np.int32)))) as batches:
            yield batches, f"forkserver x{cfg.workers}, NumPy collate, jax.device_put in the loop"

    return {"ceiling": ceiling, "feedline": feedline, "dataloader": dataloader}


def run_jax_row(cfg: Config, step: JaxStep, make, train: bool = True) -> dict:
    jax = step.jax
    with make() as (batches, detail):
        it = _warmed_up(batches, step, cfg, train)

        def finish(batch):
            jax.block_until_ready(batch)
            step.sync()

        with GpuMonitor(step.cuda and train) as gpu, CpuMeter() as cpu:
            waits, wall = _timed_steps(it, cfg.steps, step if train else (lambda batch: None), finish)
        _close(it)
    return {"detail": detail, "wall": wall, "wait": statistics.fmean(waits), "off": None, "gpu": gpu.mean(),
            "cpu": cpu.machine, "consumer": cpu.consumer}


# ===================================================================== main
def measure(framework: str, cfg: Config, rows: list[str], paths: np.ndarray, log) -> list[Result]:
    index = np.arange(len(paths), dtype=np.int64)
    if framework == "torch":
        step, loaders, run = TorchStep(cfg), torch_loaders(cfg, paths, index), run_torch_row
    else:
        step, loaders, run = JaxStep(cfg), jax_loaders(cfg, paths, index), run_jax_row
    results = {name: Result(framework, name) for name in rows if name in loaders}
    for name, res in results.items():  # the loader alone: can the cores keep up at all?
        if name == "ceiling":
            continue
        log(f"  {framework} {name}: the loader alone")
        try:
            alone = run(cfg, step, loaders[name], train=False)
            res.input_alone = cfg.steps * cfg.batch / alone["wall"]
        except Exception as exc:  # noqa: BLE001 (a missing library skips the row, with the reason)
            res.skipped = f"{type(exc).__name__}: {exc}"
            log(f"  {framework} {name}: skipped ({res.skipped[:300]})")
    for rep in range(cfg.repeat):
        for name, res in results.items():
            if res.skipped:
                continue
            log(f"  {framework} {name} (repetition {rep + 1}/{cfg.repeat})")
            try:
                res.runs.append(run(cfg, step, loaders[name]))
            except Exception as exc:  # noqa: BLE001 (reported in the table; the other rows still run)
                res.skipped, res.runs = f"failed: {type(exc).__name__}: {exc}", []
                log(f"  {framework} {name}: {res.skipped[:300]}")
    for res in results.values():
        if not res.runs:
            continue
        best = sorted(res.runs, key=lambda r: r["wall"])[len(res.runs) // 2]  # the median run
        res.detail = best["detail"]
        res.step_ms = 1e3 * best["wall"] / cfg.steps
        res.images_per_s = cfg.batch * cfg.steps / best["wall"]
        res.host_wait_ms = 1e3 * best["wait"]
        res.gpu_off_step_ms = best["off"]
        res.gpu_util, res.cpu_cores, res.consumer_cores = best["gpu"], best["cpu"], best["consumer"]
    ceiling = results.get("ceiling")
    for res in results.values():
        if ceiling is not None and ceiling.step_ms and res.step_ms:
            res.x_ceiling = ceiling.step_ms / res.step_ms
    if framework == "torch":
        del step
        with contextlib.suppress(Exception):
            import torch

            torch.cuda.empty_cache()
    return list(results.values())


def _fmt(v, spec: str) -> str:
    return "n/a" if v is None else format(v, spec)


def table(results: list[Result], cfg: Config) -> str:
    lines = ["| framework | row | step ms | images/s | x ceiling | host wait ms/step | GPU off-step ms/step | GPU util % "
             "| CPU cores (machine) | consumer cores | input alone images/s | what |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        if r.skipped:
            lines.append(f"| {r.framework} | {r.row} | skipped | | | | | | | | | {r.skipped[:200]} |")
            continue
        lines.append(f"| {r.framework} | {r.row} | {_fmt(r.step_ms, '.1f')} | {_fmt(r.images_per_s, ',.0f')} | {_fmt(r.x_ceiling, '.3f')} "
                     f"| {_fmt(r.host_wait_ms, '.2f')} | {_fmt(r.gpu_off_step_ms, '.2f')} | {_fmt(r.gpu_util, '.0f')} "
                     f"| {_fmt(r.cpu_cores, '.1f')} | {_fmt(r.consumer_cores, '.2f')} | {_fmt(r.input_alone, ',.0f')} | {r.detail} |")
    return "\n".join(lines)


def verdicts(results: list[Result]) -> list[str]:
    out = []
    for framework in ("torch", "jax"):
        rows = {r.row: r for r in results if r.framework == framework and not r.skipped}
        fl_row, ceiling, dl = rows.get("feedline"), rows.get("ceiling"), rows.get("dataloader")
        if not (fl_row and ceiling and fl_row.x_ceiling):
            continue
        can = fl_row.input_alone is not None and ceiling.images_per_s and fl_row.input_alone >= ceiling.images_per_s
        line = (f"{framework}: feedline at {fl_row.x_ceiling:.3f} of the ceiling (target >= 0.95; "
                f"{'met' if fl_row.x_ceiling >= 0.95 else 'missed'}; the cores {'can' if can else 'cannot'} decode "
                f"at the ceiling's rate: input alone {_fmt(fl_row.input_alone, ',.0f')} vs {_fmt(ceiling.images_per_s, ',.0f')} images/s)")
        if dl and dl.step_ms:
            line += f"; vs DataLoader {dl.step_ms / fl_row.step_ms:.2f}x ({'ahead' if dl.step_ms > fl_row.step_ms else 'not ahead'})"
        out.append(line)
    return out


def environment(cfg: Config) -> str:
    parts = [f"{cores()} cores", f"Python {sys.version.split()[0]}"]
    with contextlib.suppress(Exception):
        import torch

        parts.append(f"torch {torch.__version__}")
        if torch.cuda.is_available():
            parts.append(f"GPU {torch.cuda.get_device_name()}")
    for module in ("torchvision", "jax"):
        mod = sys.modules.get(module)
        if mod is not None:
            parts.append(f"{module} {mod.__version__}")
    return ", ".join(parts)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_training", description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny sizes, a few steps: the script end to end without a GPU")
    p.add_argument("--framework", action="append", choices=("torch", "jax"), help="repeatable; default: both")
    p.add_argument("--row", action="append", choices=ROWS, help="repeatable; default: all (ceiling always)")
    p.add_argument("--device", default=None, help="torch device (default cuda; dry run: cpu)")
    p.add_argument("--batch", type=int, default=None, help="default 256 (dry run: 4)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per row (default 50; dry run: 3)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 10; dry run: 1)")
    p.add_argument("--workers", type=int, default=None, help="loader workers (default: the cores, up to 16; dry run: 2)")
    p.add_argument("--images", type=int, default=None, help="distinct JPEG files, reused cyclically (default 1024; dry run: 16)")
    p.add_argument("--backend", default="process", help="feedline map backend (default process)")
    p.add_argument("--model", choices=("resnet50", "tiny"), default=None, help="default resnet50 (dry run: tiny)")
    p.add_argument("--no-amp", action="store_true", help="float32 instead of bfloat16 autocast")
    p.add_argument("--repeat", type=int, default=1, help="timed repetitions of every row; the median is reported")
    p.add_argument("--json", default=None, help="also write the results as JSON here")
    return p


def config(args) -> Config:
    dry = args.dry_run

    def pick(value, real, small):
        return value if value is not None else (small if dry else real)

    return Config(
        device=pick(args.device, "cuda", "cpu"),
        batch=pick(args.batch, 256, 4),
        steps=pick(args.steps, 50, 3),
        warmup=pick(args.warmup, 10, 1),
        workers=pick(args.workers, min(16, cores()), 2),
        images=pick(args.images, 1024, 16),
        image_hw=(75, 100) if dry else (375, 500),
        model=TINY if pick(args.model, "resnet50", "tiny") == "tiny" else RESNET50,
        backend=args.backend,
        amp=not args.no_amp,
        dry_run=dry,
        repeat=args.repeat,
    )


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    cfg = config(args)
    frameworks = args.framework or ["torch", "jax"]
    rows = ["ceiling"] + [r for r in (args.row or ROWS) if r != "ceiling"]

    start = time.perf_counter()

    def log(msg):
        print(f"[{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr, flush=True)

    files = jpeg_folder(cfg.images, height=cfg.image_hw[0], width=cfg.image_hw[1])
    paths = np.resize(np.array(files), cfg.samples)  # cycled: sample i reads file i % images, with its own crop
    log(f"{len(files)} JPEGs {cfg.image_hw[1]}x{cfg.image_hw[0]} ready; "
        f"{cfg.samples} samples per epoch")
    results = []
    for framework in frameworks:
        results += measure(framework, cfg, rows if framework == "torch" else [r for r in rows if r in JAX_ROWS], paths, log)
    model = "ResNet-50" if cfg.model == RESNET50 else f"tiny ResNet {cfg.model}"
    title = (f"{model}, batch {cfg.batch}, {SIZE}x{SIZE}, {'bfloat16 AMP' if cfg.amp else 'float32'}, {cfg.steps} steps after "
             f"{cfg.warmup} warm-up, device {cfg.device}, {cfg.workers} workers, {cfg.images} JPEGs "
             f"{cfg.image_hw[1]}x{cfg.image_hw[0]}; {environment(cfg)}")
    if cfg.dry_run:
        title = "DRY RUN (CPU, tiny sizes: checks the script, measures nothing): " + title
    print(title)
    print()
    print(table(results, cfg))
    print()
    for line in verdicts(results):
        print(("(dry run: not a measurement) " if cfg.dry_run else "") + line)
    print(f"total {time.perf_counter() - start:.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"title": title, "config": asdict(cfg), "results": [asdict(r) for r in results]}, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
