"""feedline's benchmarks: the same workloads through feedline and its peers.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks run                  # everything (~40 minutes); writes benchmarks/RESULTS.md + results.png
    python -m benchmarks run --quick          # smoke test, under 3 minutes, written to a temporary file
    python -m benchmarks run --workload gil --loader feedline-hand --loader torch-fork
    python -m benchmarks list                 # workloads and loaders

Layout: `workloads` (the registry: data and the one per-sample function of
each workload; `vision` has jpeg and store, `story2` seg, `audio` audio),
`loaders` (one function per generic loader; workloads add native ones),
`runner` (the one alternating loop: timing, repetitions, memory, checks),
`report` (RESULTS.md, the targets, the chart). Scripts beside them:
`decoders` (image decoder micro-benchmark), `audio decoders`, `autotune`
(the automatic choice's first epoch against the best and worst hand setting,
paired, fresh interpreters), `accounting_overhead`, `remembered` (first runs
against runs on a remembered verdict).

Importing this package sets OMP/OPENBLAS/MKL/VECLIB/NUMEXPR thread counts
to 1 in the environment (unless already set), before NumPy, torch or
TensorFlow load, for the whole process tree: every worker of every loader,
fork or spawn, inherits it. feedline's process workers default to the same.

It also writes feedline's bytecode caches (``compileall``), as ``pip install``
does for an installed package and did for every peer: with the variable
``PYTHONDONTWRITEBYTECODE`` set and an editable install, every feedline
worker and fork server would otherwise compile feedline's sources at each
start (~0.05-0.1 s of CPU each), a cost no installed user pays.

Last full run (2026-11-22 06:05 UTC, 2-core AMD EPYC VM, quiet; 1100 s;
full tables, PSS memory, first batch, spreads and the reading in RESULTS.md,
chart in results.png). Samples/s, median of 3 one-epoch runs, start-up
included; best feedline row vs best peer row:

    workload  feedline (row)              best peer (row)          serial loop
    jpeg          861 (feedline-native)       815 (tf-native)             330
    seg           198 (feedline-native)        69 (keras-thread)           36
    gil           332 (feedline-hand)         338 (torch-fork)            198
    audio       4,337 (feedline-native)     3,977 (torch-fork)          2,683
    tiny    3,928,422 (feedline-auto)     282,081 (keras-thread)      372,116
    store         820 (feedline-hand)         839 (keras-thread)          586

First or tied-first everywhere; >= 90 % of the 2-core ideal on jpeg and seg
only (gil 0.84, audio 0.81, store 0.70: start-up inside 1-3 s epochs); first
batch behind the best peer on gil, audio, store by 0.03-0.11 s.
"""

import os

ENV_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
for _var in ENV_VARS:
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's start-up logs out of the tables
os.environ.setdefault("FEEDLINE_REMEMBER", "0")  # automatic rows measure a pipeline's first run; remembered rows say so


def _write_feedline_bytecode() -> None:
    """Once per benchmark run: its workers inherit the variable (a worker that imports a workload's module
    walked every feedline source again, ~10 ms at each start, which no user's module does)."""
    if os.environ.get("FEEDLINE_BENCHMARK_BYTECODE"):
        return
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("feedline")
    folders = list(spec.submodule_search_locations or []) if spec else []
    beside = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src", "feedline")
    if os.path.isdir(beside):  # the sources the harnesses' children import (PYTHONPATH=<this checkout>/src): in a
        folders.append(beside)  # second checkout (old against new code) not the installed one, whose bytecode was
    for folder in dict.fromkeys(folders):  # fresh while the other's edited modules compiled at every start (~0.1 s)
        compileall.compile_dir(folder, quiet=2)
    os.environ["FEEDLINE_BENCHMARK_BYTECODE"] = "1"


_write_feedline_bytecode()
