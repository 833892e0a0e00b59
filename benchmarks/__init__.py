"""feedline's benchmarks: the same workloads through feedline and its peers.

Run (from the repository root, in the project's virtualenv):

    python -m benchmarks run                  # everything; writes benchmarks/RESULTS.md
    python -m benchmarks run --quick          # smoke test, about a minute
    python -m benchmarks run --workload gil --loader feedline-process --loader torch-fork

Layout: `workloads` (data and the one per-sample function of each
workload), `loaders` (one function per loader), `runner` (timing,
repetitions, exactly-once checks), `report` (RESULTS.md and the targets).

Host: 2-core AMD EPYC VM (KVM), Linux 6.18, Python 3.11.7, numpy 2.4.6,
torch 2.13.0+cpu; OMP/OPENBLAS/MKL thread variables set to 1 for the tree.
Last full run (2026-11-22, feedline at commit 2ebddb1, machine quiet;
full tables, spreads and the command in RESULTS.md). Samples/s are per
epoch with loader start-up included; "steady" is the second half of the
epoch:

    workload  loader            samples/s   x serial  steady x  first batch
    gil       serial-loop             205       1.00      1.00     0.16 s
    gil       feedline-process        363       1.77      1.94     0.30 s
    gil       feedline-auto           347       1.70      1.97     0.40 s
    gil       torch-fork              391       1.91      2.07     0.29 s
    gil       torch-spawn             170       0.83      2.05     2.34 s
    tiny      serial-loop       1,074,195       1.00      1.00     0.00 s
    tiny      feedline-auto     4,790,391       4.46      4.61     0.00 s
    tiny      feedline-process    178,752       0.17      0.35     0.30 s
    tiny      torch-fork          113,588       0.11      0.11     0.03 s
    tiny      torch-spawn          20,613       0.02      0.11     3.90 s

Issue-2 targets: tiny >= 3x DataLoader met (42x fork); first batch with
the process backend < 1.5 s met (0.30 s); gil process >= 1.8x serial
missed narrowly (1.77x; 1.94x in steady state) and 0.93x DataLoader fork
(fork workers start without importing anything).
"""
