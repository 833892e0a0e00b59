"""Process workers in a container's small /dev/shm: feedline's memory files and spill folder against room, threads and DataLoader.

Run (from the repository root, in the project's virtualenv with torch; as
root on Linux, since each small-/dev/shm run is a child in a private mount
namespace, ``unshare -m``, with a tmpfs of ``--shm`` mounted on /dev/shm):

    python -m benchmarks.shm_spill              # ~1 minute on 2 cores
    python -m benchmarks.shm_spill --reps 5 --shm 4m

Docker and Kubernetes give a container 64 MB of /dev/shm unless told
otherwise; batches of images outgrow it quickly. Workload: ``--samples``
images of 512x512x3 uint8, each made by ~1 ms of pure Python (it holds the
GIL, so processes are what help), batches of 8 (6 MiB), two workers,
``--epochs`` epochs in one fresh interpreter per run; the first epoch
(start-up included) and the median of the others, samples/s. Settings:

- ``feedline process, room``: ``backend="process"``, /dev/shm as the host has it;
- ``feedline process, small /dev/shm``: the same in ``--shm`` of /dev/shm: the
  slots are memory files (memfd, `feedline.transport._shm`);
- ``..., spill folder``: memory files off (``FEEDLINE_MEMFD=0``, as on macOS):
  the slots go to files in the spill folder;
- ``..., nowhere``: ``FEEDLINE_MEMFD=0 FEEDLINE_SPILL_DIR=0``:
  `SharedMemoryFull` (the run reports the error);
- ``feedline thread``: threads, what the automatic choice fell back to before;
- ``torch fork, room`` / ``torch fork, small /dev/shm``: ``DataLoader(num_workers=2)``
  over the same function (its workers hand batches over in shared memory too).

Runs alternate, ``--reps`` rounds, medians. Last run:
benchmarks/history/2026-11-26-sixteenth-session-memory-files-no-descriptor-per.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SETTINGS = {  # name -> (loader, small /dev/shm, extra environment)
    "feedline process, room": ("process", False, {}),
    "feedline process, small /dev/shm": ("process", True, {}),
    "feedline process, small /dev/shm, spill folder": ("process", True, {"FEEDLINE_MEMFD": "0"}),
    "feedline process, small /dev/shm, nowhere": ("process", True, {"FEEDLINE_MEMFD": "0", "FEEDLINE_SPILL_DIR": "0"}),
    "feedline thread": ("thread", False, {}),
    "torch fork, room": ("torch", False, {}),
    "torch fork, small /dev/shm": ("torch", True, {}),
}


def image(v: int):
    """A 512x512x3 uint8 image after ~1 ms of pure Python (holds the GIL)."""
    import numpy as np

    total = 0
    for k in range(20000):
        total += k % 3
    return np.full((512, 512, 3), (v + total) % 251, np.uint8)


def run_one(loader: str, samples: int, epochs: int) -> dict:
    """In a fresh interpreter: ``epochs`` epochs of ``loader``; samples/s of each, or the error that ended the run."""
    import warnings

    import numpy as np

    rates, warned = [], []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if loader == "torch":
                import torch.utils.data as tud

                class Images(tud.Dataset):
                    def __len__(self):
                        return samples

                    def __getitem__(self, i):
                        return image(i)

                loader_ = tud.DataLoader(Images(), batch_size=8, num_workers=2, persistent_workers=True,
                                         multiprocessing_context="fork")
                for _ in range(epochs):
                    start = time.perf_counter()
                    rows = sum(len(b) for b in loader_)
                    rates.append(rows / (time.perf_counter() - start))
                del loader_
            else:
                import feedline as fl

                pipe = fl.from_arrays(np.arange(samples)).map(image, backend=loader, workers=2).batch(8)
                with pipe:
                    for epoch in range(epochs):
                        start = time.perf_counter()
                        rows = sum(len(b) for b in pipe.epoch(epoch))
                        rates.append(rows / (time.perf_counter() - start))
            warned = [str(w.message)[:120] for w in caught if "feedline" in str(w.message)]
    except BaseException as e:  # noqa: BLE001 - the table reports what ended the run
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]  # torch: its worker's traceback, cause last
        return {"rates": rates, "error": f"{type(e).__name__}: {lines[-1][:160] if lines else ''}", "warned": warned}
    return {"rates": rates, "error": "", "warned": warned}


def _child(name: str, args, spill: str) -> dict:
    loader, small, extra = SETTINGS[name]
    command = [sys.executable, "-m", "benchmarks.shm_spill", "--one", loader, str(args.samples), str(args.epochs)]
    if small:
        command = ["unshare", "-m", "sh", "-c", f'mount -t tmpfs -o size={args.shm} tmpfs /dev/shm && exec "$0" "$@"', *command]
    env = {**os.environ, "FEEDLINE_SPILL_DIR": spill, "FEEDLINE_REMEMBER": "0", "OMP_NUM_THREADS": "1", **extra}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"rates": [], "error": f"exit {done.returncode}: {done.stderr.strip()[-200:]}", "warned": []}
    return json.loads(lines[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.shm_spill", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--samples", type=int, default=480)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--shm", default="4m", help="size of the small /dev/shm (tmpfs size=)")
    args = parser.parse_args(argv)
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        raise SystemExit("benchmarks.shm_spill needs `unshare -m` (root on Linux) to give runs a small /dev/shm")
    results: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory(prefix="feedline-spill-bench-") as spill:
        for rep in range(args.reps):
            names = list(SETTINGS)
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                results[name].append(_child(name, args, spill))
        left = os.listdir(spill)
    print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())}; {os.cpu_count()} CPUs; small /dev/shm "
          f"{args.shm}; {args.samples} images of 512x512x3, batches of 8 (6 MiB), 2 workers, {args.epochs} epochs, "
          f"{args.reps} runs each; files left in the spill folder: {len(left)}\n")
    print("| setting | first epoch samples/s | later epochs samples/s | runs that failed |")
    print("|---|---:|---:|---|")
    for name, runs in results.items():
        ok = [r for r in runs if not r["error"] and len(r["rates"]) == args.epochs]
        first = f"{statistics.median(r['rates'][0] for r in ok):,.0f}" if ok else "-"
        later = f"{statistics.median(statistics.median(r['rates'][1:]) for r in ok):,.0f}" if ok else "-"
        failed = [r["error"] for r in runs if r["error"]]
        print(f"| {name} | {first} | {later} | {len(failed)} of {len(runs)}{': ' + failed[0][:110] if failed else ''} |")
    warned = sorted({w for runs in results.values() for r in runs for w in r["warned"]})
    if warned:
        print(f"\nwarnings: {warned[0]}...")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(run_one(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))))
    else:
        main()
