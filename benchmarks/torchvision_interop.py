"""torchvision.transforms.v2 inside feedline's ``map`` vs torch's DataLoader, same transform.

Run (torchvision needs a torch it was built for; CI's torch 2.13 CPU build
has none on PyPI, so this runs in its own venv)::

    python -m venv /tmp/tv-venv
    /tmp/tv-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 -e ".[vision]"
    /tmp/tv-venv/bin/python -m benchmarks.torchvision_interop [--images 512] [--reps 3]

Workload: ImageNet-style JPEGs (500x375, `benchmarks.imagedata`), decoded by
`feedline.vision.decode`, then torchvision v2 ``RandomResizedCrop(224) +
RandomHorizontalFlip + ToDtype(float32) + Normalize``, batch 64, one epoch
per repetition, repetitions alternate between loaders, start-up included.

Last run: see the "torchvision interop" table in docs/vision.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # the same for every loader: one native thread per worker

import torch  # noqa: E402
from torchvision.transforms import v2  # noqa: E402

import feedline as fl  # noqa: E402
import feedline.vision as fv  # noqa: E402

from .imagedata import jpeg_folder  # noqa: E402
from .tables import markdown_table  # noqa: E402

BATCH = 64
torch.set_num_threads(1)


def transform():
    return v2.Compose([
        v2.RandomResizedCrop(224, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(list(fv.IMAGENET_MEAN), list(fv.IMAGENET_STD)),
    ])


class _Dataset(torch.utils.data.Dataset):
    def __init__(self, paths):
        self.paths, self.t = paths, transform()

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return self.t(torch.from_numpy(fv.decode(self.paths[i])).permute(2, 0, 1))


def serial(paths):
    t = transform()
    for start in range(0, len(paths), BATCH):
        torch.stack([t(torch.from_numpy(fv.decode(p)).permute(2, 0, 1)) for p in paths[start : start + BATCH]])


def dataloader(context):
    def run(paths):
        loader = torch.utils.data.DataLoader(_Dataset(paths), batch_size=BATCH, num_workers=2, multiprocessing_context=context)
        for _ in loader:
            pass

    return run


def feedline(backend, reproducible, steady=False):
    """One epoch of a new pipeline (start-up included), or with ``steady`` the second epoch of one."""

    def run(paths):
        t = transform()
        op = fv.from_torchvision(t, reproducible=True) if reproducible else (lambda img: t(torch.from_numpy(img).permute(2, 0, 1)))
        with fl.from_files(paths).map(fv.decode).map(op, backend=backend, workers=2).batch(BATCH) as pipe:
            if steady:
                for _ in pipe:
                    pass
            start = time.perf_counter()
            for _ in pipe:
                pass
            return time.perf_counter() - start

    return run


LOADERS = {
    "serial loop": serial,
    "DataLoader fork x2": dataloader("fork"),
    "DataLoader spawn x2": dataloader("spawn"),
    "feedline thread, as is": feedline("thread", False),
    "feedline thread, from_torchvision": feedline("thread", True),
    "feedline process, as is": feedline("process", False),
    "feedline process, from_torchvision": feedline("process", True),
    "feedline process, from_torchvision, 2nd epoch": feedline("process", True, steady=True),
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=512)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args(argv)
    paths = jpeg_folder(args.images)
    times: dict[str, list[float]] = {name: [] for name in LOADERS}
    for run in LOADERS.values():  # warm-up: page cache, imports
        run(paths[:BATCH])
    for _ in range(args.reps):
        for name, run in LOADERS.items():
            start = time.perf_counter()
            counted = run(paths)  # a loader may time its own part (the second epoch)
            times[name].append(counted if counted is not None else time.perf_counter() - start)
    base = statistics.median(times["serial loop"])
    dl = statistics.median(times["DataLoader fork x2"])
    print(f"{args.images} JPEGs 500x375 -> torchvision v2 RRC224+flip+float+normalise, batch {BATCH}, {os.cpu_count()} cores, torch {torch.__version__}")
    rows = []
    for name, values in times.items():
        med = statistics.median(values)
        rows.append([name, f"{args.images / med:.0f}", f"{min(values):.2f}-{max(values):.2f} s", f"{base / med:.2f}", f"{dl / med:.2f}"])
    print(markdown_table(["loader", "images/s (median)", "spread", "x serial", "x DataLoader"], rows, "lrrrr"))


if __name__ == "__main__":
    main()
