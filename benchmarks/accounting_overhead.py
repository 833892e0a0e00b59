"""Cost of the always-on stage accounting on the tiny workload (issue 7 target: < 2 %).

Run: `python benchmarks/accounting_overhead.py`. Best of 15 epochs of 100k 3x32x32 uint8 samples,
batch 256, bulk path, with the per-task accounting on and patched out.
Last result (2026-11-22 03:04 UTC, 2-core AMD EPYC): 114.0 vs 113.0 us per batch: 0.9 %.
"""
import time

import numpy as np

import feedline as fl
from feedline import _stats

x = np.random.default_rng(0).integers(0, 255, (100_000, 3, 32, 32), dtype=np.uint8)
def run():
    pipe = fl.from_arrays(x).shuffle(seed=0).batch(256)
    best = 1e9
    for _ in range(15):
        t = time.perf_counter()
        n = sum(1 for b in pipe)
        best = min(best, time.perf_counter() - t)
    return best / n * 1e6
a = run()
_stats.Stats.add_result = lambda self, r: None
_stats.Stats.add_span = lambda self, r, n: None
b = run()
print(f"tiny us/batch with accounting {a:.1f}, without per-task accounting {b:.1f}: overhead {100*(a-b)/b:.1f} %")
