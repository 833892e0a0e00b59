"""Thread workers beside NumPy's BLAS pool (or torch's intra-op pool): feedline's default against the process-wide opt-in.

Run (from the repository root)::

    python -m benchmarks.blas_threads            # ~1 minute on 2 cores
    python -m benchmarks.blas_threads --reps 5
    python -m benchmarks.blas_threads --workload torch   # torch ops per sample; the automatic choice too
    python -m benchmarks.blas_threads --workload tf      # TensorFlow ops per sample on process workers
    python -m benchmarks.blas_threads --base ../other-checkout/src   # another version's thread workers too

The suite's ``audio`` workload (WAV decode, then a log-mel filter bank: one
small matrix product per sample) on ``backend="thread"`` with one worker
per core, and on ``backend="process"`` for reference. Every run is a fresh
interpreter with no BLAS thread variable set (what users have; the peer
suite sets them to 1, so its tables never show this), four epochs, the
first with start-up; the settings alternate. ``thread``: feedline's
default (each worker thread one OpenMP thread, `feedline._worker_threads`;
NumPy's pool as is); ``opt-in``: ``FEEDLINE_TUNE_PROCESS=1`` (the
process's BLAS pools limited to one thread, `feedline._process_tuning`).

``--workload torch``: three tensor ops per sample (an antialiased resize of
a 3x320x320 tensor to 224, a 5x5 blur, a normalisation; `torch_augment`),
512 samples, with torch imported before feedline, and the automatic
choice (``auto``, nothing remembered) with and without the opt-in.

``--workload tf``: TensorFlow image ops per sample (`tf_augment`: an
antialiased resize of a 320x320x3 image to 224, a contrast change, a
standardisation), 1,024 samples, on process workers: ``limited`` is
feedline's default (each worker's ``TF_NUM_INTRAOP_THREADS`` is 1 unless
set), ``pool as is`` sets it to 0 (TensorFlow's own choice: a thread per
core in every worker). The first epoch holds each worker's TensorFlow
import.

Last measured (2026-11-26, 2 cores, Python 3.11, ``--reps 4``), when the
process-wide limit was the default: thread workers 4,805 samples/s limited
(now ``opt-in``), 3,406 with the pool as is (now ``thread``; 0.71), process
workers 8,807 (benchmarks/history/2026-11-26-blas-threads-beside-thread-workers.md).
``--workload torch``: benchmarks/history/2026-11-26-seventeenth-session-16-cores-again-and-sixteen.md;
``--workload tf``: benchmarks/history/2026-11-28-thirty-first-session-the-suite-at-2a22738.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from .tables import markdown_table

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEEDLINE_SRC = os.path.join(ROOT, "src")
OPT_IN = {"FEEDLINE_TUNE_PROCESS": "1"}
SETTINGS = {  # label -> (backend, extra environment)
    "thread": ("thread", {}),
    "thread, opt-in": ("thread", OPT_IN),
    "process": ("process", {}),
}
TORCH_SETTINGS = {  # the automatic choice too: a pool beside the workers can make them look held back by the GIL
    "auto": ("auto", {"FEEDLINE_REMEMBER": "0"}),
    "auto, opt-in": ("auto", {"FEEDLINE_REMEMBER": "0"} | OPT_IN),
    **SETTINGS,
}
TORCH_SAMPLES = 512
TF_SETTINGS = {  # process workers only: thread workers share the process's pool, which feedline leaves alone
    "process, limited": ("process", {}),
    "process, pool as is": ("process", {"TF_NUM_INTRAOP_THREADS": "0"}),  # 0: TensorFlow picks (a thread per core)
}
TF_SAMPLES = 1024


def torch_augment(i):
    """Three tensor ops on a 3x320x320 tensor drawn from ``i``: an antialiased resize to 224, a 5x5 blur, a normalisation."""
    import torch
    import torch.nn.functional as F

    image = torch.rand(3, 320, 320, generator=torch.Generator().manual_seed(int(i)))
    image = F.interpolate(image[None], size=(224, 224), mode="bilinear", antialias=True)
    image = F.conv2d(image, torch.full((3, 1, 5, 5), 1 / 25), padding=2, groups=3)[0]
    return ((image - image.mean((1, 2), keepdim=True)) / (image.std((1, 2), keepdim=True) + 1e-6)).numpy()


def tf_augment(i):
    """TensorFlow image ops on a 320x320x3 image drawn from ``i``: an antialiased resize to 224, a contrast change,
    a standardisation."""
    import numpy as np
    import tensorflow as tf

    image = tf.constant(np.random.default_rng(int(i)).random((320, 320, 3), dtype=np.float32))
    image = tf.image.resize(image, (224, 224), antialias=True)
    image = tf.image.adjust_contrast(image, 1.2)
    return tf.image.per_image_standardization(image).numpy()


_RUN = (
    "import json, os, sys, time\n"
    "import numpy\n"  # first, as a training script does: its BLAS reads the environment as it loads
    "WORKLOAD = sys.argv[2]\n"  # (the functions below travel to worker processes, whose argv differs)
    "if WORKLOAD == 'torch':\n"
    "    import torch\n"  # imported before feedline, as a training script does
    "import feedline as fl\n"
    "from benchmarks import ENV_VARS, workloads\n"
    "from benchmarks.blas_threads import TF_SAMPLES, TORCH_SAMPLES, tf_augment, torch_augment\n"
    "for var in ENV_VARS:\n"
    "    os.environ.pop(var, None)  # the benchmarks package sets them to 1 for the peer suite: not here\n"
    "from threadpoolctl import threadpool_info\n"
    "def blas_threads():\n"
    "    if WORKLOAD == 'torch':\n"
    "        return torch.get_num_threads()\n"
    "    return max([i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'] or [0])\n"
    "seen = []\n"
    "if WORKLOAD == 'torch':\n"
    "    def features(i):\n"
    "        if not seen:\n"
    "            seen.append(blas_threads())\n"
    "        return torch_augment(i)\n"
    "    pipe = fl.from_arrays(numpy.arange(TORCH_SAMPLES))\n"
    "elif WORKLOAD == 'tf':\n"
    "    features = tf_augment\n"  # runs in worker processes only: the consumer never imports TensorFlow
    "    pipe = fl.from_arrays(numpy.arange(TF_SAMPLES))\n"
    "else:\n"
    "    w = workloads.build('audio')\n"
    "    def features(sample):\n"
    "        if not seen:\n"
    "            seen.append(blas_threads())\n"
    "        return w.fn(sample)\n"
    "    pipe = fl.from_arrays(w.data, w.index)\n"
    "backend = None if sys.argv[1] == 'auto' else sys.argv[1]\n"
    "pipe = pipe.map(features, backend=backend).batch(w.batch_size if WORKLOAD == 'audio' else 32)\n"
    "rates = []\n"
    "with pipe:\n"
    "    for _ in range(4):\n"
    "        start, rows = time.perf_counter(), 0\n"
    "        for batch in pipe:\n"
    "            rows += len(batch[-1] if WORKLOAD == 'audio' else batch)\n"
    "        rates.append(rows / (time.perf_counter() - start))\n"
    "print(json.dumps({'rates': rates, 'blas_threads': seen[0] if seen else None, 'ran': pipe.stats().backend}))\n"
)


def one_run(backend: str, env: dict, workload: str = "audio", src: str = FEEDLINE_SRC) -> dict:
    """Samples/s of four epochs in a fresh interpreter, no BLAS thread variable set; the pool's threads a sample saw."""
    from feedline._blas_limit import USER_BLAS_VARS

    base = {k: v for k, v in os.environ.items()
            if k not in USER_BLAS_VARS and k not in ("FEEDLINE_BLAS_LIMIT", "FEEDLINE_TUNE_PROCESS", "TF_NUM_INTRAOP_THREADS")}
    base.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up notices, in every worker
    base["PYTHONPATH"] = os.pathsep.join([src, ROOT])
    done = subprocess.run([sys.executable, "-c", _RUN, backend, workload], cwd=ROOT, env=base | env, capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"benchmarks.blas_threads: {backend} {env} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.blas_threads", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="fresh interpreters per setting, alternating")
    parser.add_argument("--workload", choices=("audio", "torch", "tf"), default="audio")
    parser.add_argument("--base", help="another feedline's src folder: its thread workers (and automatic choice) too")
    args = parser.parse_args(argv)
    settings = {label: (backend, env, FEEDLINE_SRC) for label, (backend, env) in
                {"torch": TORCH_SETTINGS, "tf": TF_SETTINGS}.get(args.workload, SETTINGS).items()}
    if args.base:
        settings["thread, base"] = ("thread", {}, args.base)
        if args.workload == "torch":
            settings["auto, base"] = ("auto", {"FEEDLINE_REMEMBER": "0"}, args.base)
    runs: dict[str, list[list[float]]] = {label: [] for label in settings}
    for rep in range(args.reps):
        for label, (backend, env, src) in settings.items():
            run = one_run(backend, env, args.workload, src)
            rates = run["rates"]
            runs[label].append(rates)
            seen = run["blas_threads"]  # (None: the samples ran in worker processes, one thread each)
            print(f"  rep {rep} {label:20s} " + " ".join(f"{r:7.0f}" for r in rates) + f"  ran on {run['ran']}"
                  + ("" if seen is None else f"   (pool threads in the first sample: {seen})"), flush=True)
    rows = []
    reference = "process, limited" if args.workload == "tf" else "thread"
    limited = statistics.median(r for rates in runs[reference] for r in rates[1:])
    for label, reps in runs.items():
        first = statistics.median(rates[0] for rates in reps)
        later = statistics.median(r for rates in reps for r in rates[1:])
        rows.append([label, f"{first:,.0f}", f"{later:,.0f}", f"{later / limited:.2f}"])
    print(f"\n{os.cpu_count()} CPUs; {args.workload} workload, one worker per core; medians of {args.reps} interpreters\n")
    print(markdown_table(["setting", "epoch 1 samples/s", "epochs 2-4 samples/s", f"vs {reference}"], rows, "lrrr"))


if __name__ == "__main__":
    main()
