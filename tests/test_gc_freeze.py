"""In-process workers keep the cyclic GC off the objects that existed before them, and give the collector back as it was.

Why: see `feedline._gc_freeze` (story 1's items ran 2.5x slower on a thread
in a Keras process, the collector walking its 275k objects). Each check
runs in a fresh interpreter: the freeze is process-wide, and a pipeline
another test left open would hold it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import gc, json, sys
    import numpy as np, feedline as fl

    def freeze_count_while_iterating(backend):
        pipe = fl.from_arrays(np.arange(64)).map(lambda v: v + 1, backend=backend, workers=2).batch(8)
        with pipe:
            it = iter(pipe)
            next(it)
            during = gc.get_freeze_count()
            rest = [b.tolist() for b in it]
        assert rest[-1] == list(range(57, 65))
        return during

    case, backend = sys.argv[1], (None if sys.argv[2] == "auto" else sys.argv[2])
    if case == "own":
        gc.freeze()
    if case == "disabled":
        gc.disable()
    before = gc.get_freeze_count()
    during = freeze_count_while_iterating(backend)
    print(json.dumps({"before": before, "during": during, "after": gc.get_freeze_count()}))
    """
)


def _run(case: str, backend: str, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, case, backend], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["thread", "serial", "auto"])
def test_objects_are_frozen_while_in_process_workers_run_and_unfrozen_at_close(backend):
    got = _run("plain", backend)
    assert got["before"] == 0 and got["during"] > 1000 and got["after"] == 0, got


def test_the_programs_own_freeze_is_left_alone():
    got = _run("own", "thread")
    # neither added to (the objects made since would count) nor undone; a few frozen objects may die meanwhile
    assert got["before"] > 1000 and got["before"] * 0.99 <= got["after"] <= got["during"] <= got["before"], got


def test_nothing_is_frozen_with_the_collector_disabled():
    assert _run("disabled", "thread") == {"before": 0, "during": 0, "after": 0}


def test_nothing_is_frozen_when_switched_off_in_the_environment():
    assert _run("plain", "thread", FEEDLINE_GC_FREEZE="0") == {"before": 0, "during": 0, "after": 0}
