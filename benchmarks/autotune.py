"""Autotuned vs the best hand setting vs a deliberately bad one (issue 7), on the gil workload.

Run: `python benchmarks/autotune.py` (from the repository root). 640 samples of a GIL-holding
pure-Python augmentation, batch 32, three alternating rounds, one epoch per run, start-up included.
Last result (2026-11-22 03:04 UTC, 2-core AMD EPYC, load average ~1.2):
    auto: median 503 samples/s (272-534)
    best hand (process x2): median 561 samples/s (299-573)
    bad (process x1, depth 1): median 298 samples/s (284-298)
    auto / best hand = 0.90; auto / bad = 1.69
"""
import statistics
import time

import numpy as np

import feedline as fl


def aug(v):
    x = [float(i) for i in range(64)]
    for _ in range(1600):
        x = [a * 0.999 + 0.001 for a in x]
    return np.float32(sum(x)) + v
idx = np.arange(640)
def run(build):
    with build() as pipe:
        t = time.perf_counter()
        n = sum(len(b) for b in pipe)
        return n / (time.perf_counter() - t)
setups = {
    "auto": lambda: fl.from_arrays(idx).map(aug).batch(32),
    "best hand (process x2)": lambda: fl.from_arrays(idx).map(aug, backend="process", workers=2).batch(32),
    "bad (process x1, depth 1)": lambda: fl.from_arrays(idx).map(aug, backend="process", workers=1).batch(32).prefetch(1),
}
res = {k: [] for k in setups}
for _ in range(3):
    for k, b in setups.items():
        res[k].append(run(b))
for k, v in res.items():
    print(f"{k}: median {statistics.median(v):.0f} samples/s ({min(v):.0f}-{max(v):.0f})")
a, h, b = (statistics.median(res[k]) for k in setups)
print(f"auto / best hand = {a/h:.2f}; auto / bad = {a/b:.2f}")
