"""The epoch's report times this process's full garbage collections while in-process workers run, and says what to do.

Each case runs in a fresh interpreter: the test process has frozen most
of its objects already (tests/conftest.py), which is what the advice asks
a user to do.
"""

import json
import os
import subprocess
import sys

_CONSUMER = r"""
import gc, json, sys
import numpy as np
import feedline as fl

held = [[i] for i in range(1_500_000)]  # a framework's objects: every full collection walks them
if sys.argv[1] == "frozen":
    gc.freeze()  # what the advice asks for, once the model is built

def allocating(x):  # per-sample Python that makes many containers: it triggers full collections
    rows = [[x, k, k * 2] for k in range(60_000)]
    return np.int64(len(rows) + x)

before = list(gc.callbacks)
backend = None if sys.argv[2] == "auto" else sys.argv[2]
pipe = fl.from_arrays(np.arange(48)).map(allocating, backend=backend, workers=2).batch(8)
with pipe:
    out = [int(v) for b in pipe for v in b]
    watched = len(gc.callbacks) - len(before)
    stats = pipe.stats()
print(json.dumps({"out": out, "watched": watched, "after": len(gc.callbacks) - len(before),
                  "seconds": stats.collector_seconds, "count": stats.full_collections, "wall": stats.wall_seconds,
                  "dict": stats.as_dict()["full_collections"], "text": str(stats)}))
"""


def _run(frozen: str, backend: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _CONSUMER, frozen, backend], capture_output=True, text=True,
                          env=dict(os.environ, FEEDLINE_REMEMBER="0"), timeout=300)  # timeout: a hang guard only
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_full_collections_beside_thread_workers_are_timed_and_the_report_says_to_freeze():
    seen = _run("as-is", "thread")
    assert seen["out"] == [60_000 + i for i in range(48)]
    assert seen["watched"] == 1 and seen["after"] == 0, "one callback while the workers live, none after close"
    assert seen["count"] >= 1 and seen["seconds"] > 0 and seen["dict"] == seen["count"], seen
    assert f"full garbage collections: {seen['count']}," in seen["text"]
    advised = "call gc.freeze() once your model is built" in seen["text"]
    assert advised == (seen["seconds"] >= 0.1 * seen["wall"]), seen["text"]  # the advice's share (`ReportPolicy.collector`)


def test_after_a_freeze_the_same_epoch_spends_less_in_full_collections():
    loose, frozen = _run("as-is", "serial"), _run("frozen", "serial")
    assert loose["count"] >= 1 and frozen["count"] >= 1, (loose, frozen)  # collections still run ...
    assert frozen["seconds"] / frozen["count"] < 0.5 * loose["seconds"] / loose["count"], (loose, frozen)  # ... walking less
    assert "call gc.freeze()" not in frozen["text"], "frozen already: the advice, if any, is about the samples' own"


def test_the_automatic_choice_whose_trial_threads_paid_for_full_collections_is_told_so_too():
    seen = _run("as-is", "auto")
    assert seen["out"] == [60_000 + i for i in range(48)] and seen["after"] == 0
    assert seen["count"] >= 1, seen  # the trial's threads ran the map here first
    advised = "call gc.freeze() once your model is built" in seen["text"]
    assert advised == (seen["seconds"] >= 0.1 * seen["wall"]), seen["text"]


def test_process_workers_leave_the_collector_unwatched():
    seen = _run("as-is", "process")
    assert seen["out"] == [60_000 + i for i in range(48)]
    assert seen["watched"] == 0 and seen["count"] == 0 and "full garbage collections" not in seen["text"], seen
