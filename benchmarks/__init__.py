"""feedline's benchmarks: the same workloads through feedline and its peers.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks run                  # everything; writes benchmarks/RESULTS.md
    python -m benchmarks run --quick          # smoke test, about a minute
    python -m benchmarks run --workload gil --loader feedline-process --loader torch-fork

Layout: `workloads` (data and the one per-sample function of each
workload), `loaders` (one function per loader), `runner` (timing,
repetitions, exactly-once checks), `report` (RESULTS.md and the targets).

Host and last results: see RESULTS.md (table filled in below after a run).
"""
