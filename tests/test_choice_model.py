"""The automatic choice's model and controller, fed observations: the verdict on each machine size is specified here.

Each row is a moment of a trial on some machine (2 to 96 cores, or a cgroup
quota of fewer cores than the box has) running one kind of work; the row
says what `decide` must answer and why. No clocks, no executors: these are
the rules docs/automatic_choice.md states, checked on their own.
"""

from __future__ import annotations

import dataclasses

import pytest

import feedline as fl
from feedline import testing
from feedline.engine.choice import DEFAULT_POLICY, Action, Measured, Observations, Phase, Policy, Remembering, Stretch, WinnerWatch, decide, first_threads, predict

P = DEFAULT_POLICY


def judging(cores, threads, kept, span=0.06, pool=None, begun=16, beside_start=False, warm=True, runnable=0.0, **more):
    """Threads side by side for ``span`` seconds, keeping ``kept`` cores busy (past their first samples if ``warm``)."""
    pool = pool or threads
    usable = min(threads, cores, pool)
    stretch = Stretch(span, kept, usable, begun, 0.0, runnable)
    return Observations(Phase.JUDGING_THREADS, cores=cores, pool=pool, threads=threads, whole=stretch,
                        warm=stretch if warm else None, beside_start=beside_start, **more)


def measuring(cores, pool, kept, judged, processes=0.0, first=0.0, first_tasks=0, cpu_rate=100.0, **more):
    """Processes measured alone, after ``judged`` threads kept ``kept`` cores busy; the threads' CPU rate ``cpu_rate``."""
    return Observations(Phase.MEASURING_PROCESSES, cores=cores, pool=pool, threads=pool, thread_rows=cpu_rate,
                        thread_cpu=1.0, cores_kept=kept, judged=judged,
                        processes=Measured(pool, pool * P.evidence_span, processes, 0.0, processes > 0),
                        first_tasks=Measured(first_tasks, first_tasks * P.evidence_span, first, 0.0, False), **more)


ROWS = [
    # (what, observations, verdict, why it says)
    ("2 cores, GIL-bound Python: two threads keep one core busy", judging(2, 2, 1.0, span=0.03),
     Action.START_PROCESSES, "the GIL holds them"),
    ("2 cores, a decoder that releases the GIL keeps both cores busy", judging(2, 2, 1.95),
     Action.THREADS, "releases the GIL"),
    ("2 cores, many small NumPy calls: 1.5 of 2, the GIL holds them part of the time", judging(2, 2, 1.5),
     Action.START_PROCESSES, "the GIL holds them"),
    ("2 cores, just under keeping the cores: a close call waits for a longer stretch", judging(2, 2, 1.75),
     Action.WAIT, ""),
    ("2 cores, the same close call over three measurements' span", judging(2, 2, 1.75, span=P.close_call_span + 0.01),
     Action.START_PROCESSES, "the GIL holds them"),
    ("2 cores, plainly held but too few samples begun for the early verdict", judging(2, 2, 1.0, span=0.03, begun=2),
     Action.WAIT, ""),
    ("2 cores, I/O: tasks use 5 % of a core each", judging(2, 2, 0.1, thread_tasks=4, thread_span=0.2, thread_wanted=0.01),
     Action.THREADS, "wait on I/O"),
    ("2 cores, 16 GIL-bound threads: each uses 1/16 of a core, together a core: not I/O",
     judging(2, 16, 1.0, span=0.03, thread_tasks=16, thread_span=1.6, thread_wanted=0.1),
     Action.START_PROCESSES, "the GIL holds them"),
    ("a cgroup quota of 2 cores on a 96-CPU box: judged as 2 cores", judging(2, 2, 1.0, span=0.03, pool=2),
     Action.START_PROCESSES, "the GIL holds them"),
    ("16 cores, four GIL-bound scouts keep one core busy", judging(16, 4, 1.0, span=0.03, pool=16),
     Action.START_PROCESSES, "the GIL holds them"),
    ("16 cores, scouts that release the GIL: the whole pool is judged", judging(16, 4, 3.95, pool=16),
     Action.WIDEN, "whole pool"),
    ("16 cores, scouts losing 7 % to the GIL: more than scouts may lose", judging(16, 4, 3.73, pool=16),
     Action.START_PROCESSES, "the GIL holds them"),
    ("16 cores, the whole pool of decoded crops keeps 15.5 busy", judging(16, 16, 15.5),
     Action.THREADS, "releases the GIL"),
    ("16 cores, scouts that wait on files: the whole pool waits with them", judging(16, 4, 0.2, pool=16),
     Action.WIDEN, "wait"),
    ("16 cores, scouts kept off the cores by other programs: no stretch", judging(16, 4, 0.2, pool=16, runnable=0.5),
     Action.DROP_STRETCH, "other programs"),
    ("16 cores, beside the fork server's imports: no verdict for threads past their first samples",
     judging(16, 16, 15.5, beside_start=True), Action.WAIT, ""),
    ("16 cores, beside the workers' start: the plain verdict on threads still in their first samples",
     judging(16, 4, 1.0, pool=16, beside_start=True, warm=False), Action.START_PROCESSES, "the GIL holds them"),
    ("64 cores, GIL-bound scouts", judging(64, 4, 1.0, span=0.03, pool=64), Action.START_PROCESSES, "the GIL holds them"),
    ("64 cores, GIL-free scouts", judging(64, 4, 3.98, pool=64), Action.WIDEN, "whole pool"),
    ("96 cores, a pool of 96 that keeps 80 busy loses more than the margin", judging(96, 96, 80.0),
     Action.START_PROCESSES, "the GIL holds them"),
    ("96 cores, a pool of 96 that keeps 85 busy: a close call", judging(96, 96, 85.0), Action.WAIT, ""),
    ("96 cores, GIL-free pool of 96 keeps 94 busy", judging(96, 96, 94.0), Action.THREADS, "releases the GIL"),
    ("a cgroup quota of 8 cores on 96 CPUs: scouts that keep theirs busy widen", judging(8, 4, 3.9, pool=8),
     Action.WIDEN, "whole pool"),
    # measured: processes against the threads' bound (their CPU rate on the cores one GIL lets the pool use)
    ("2 cores, GIL-bound: processes at 90 % of the threads' bound win at once",
     measuring(2, 2, kept=1.0, judged=2, processes=180.0), Action.PROCESSES, "of the most 2 threads could reach"),
    ("2 cores, threads kept 1.5: processes at 100 % of the bound are not enough, threads are measured",
     measuring(2, 2, kept=1.5, judged=2, processes=200.0), Action.MEASURE_THREADS, "measured alone"),
    ("16 cores, GIL-bound scouts: the pool's bound is one core's worth; 4 first tasks at 12x win",
     measuring(16, 16, kept=1.0, judged=4, first=1200.0, first_tasks=4), Action.PROCESSES, "processes' first 4 tasks"),
    ("16 cores, three first tasks are too few", measuring(16, 16, kept=1.0, judged=4, first=1200.0, first_tasks=3),
     Action.WAIT, ""),
    ("96 cores, scouts lost 7 % to the GIL: the pool's bound is ~7 cores, processes at 12x it win",
     measuring(96, 96, kept=3.73, judged=4, processes=12 * 700.0), Action.PROCESSES, "of the most 96 threads could reach"),
]


@pytest.mark.parametrize("what, observations, action, why", ROWS, ids=[row[0] for row in ROWS])
def test_the_verdict_for_each_machine_and_kind_of_work(what, observations, action, why):
    verdict = decide(observations, DEFAULT_POLICY)
    assert verdict.action is action, f"{what}: {verdict}"
    assert why in verdict.why, f"{what}: {verdict.why!r} should say {why!r}"


def test_threads_measured_alone_lose_early_where_their_busy_cores_cannot_reach_the_processes():
    alone = Stretch(P.evidence_span, 5.5, 16.0)
    base = dict(cores=16, pool=16, threads=16, thread_rows=100.0, thread_cpu=1.0)
    lose = Observations(Phase.MEASURING_THREADS, processes=Measured(16, 1.0, 1600.0, 16.0, True), alone=alone, **base)
    assert decide(lose, P).action is Action.PROCESSES and "alone kept 5.5 of 16" in decide(lose, P).why
    close = Observations(Phase.MEASURING_THREADS, processes=Measured(16, 1.0, 1050.0, 16.0, True),
                         threads_alone=Measured(16, 1.0, 1000.0, 15.0, True), **base)
    verdict = decide(close, P)
    assert verdict.action is Action.THREADS and verdict.rates == {"thread": 1000.0, "process": 1050.0}, verdict
    far = dataclasses.replace(close, processes=Measured(16, 1.0, 1200.0, 16.0, True))
    assert decide(far, P).action is Action.PROCESSES, "past the margin, processes win"


def test_threads_measured_alone_are_credited_what_they_delivered_side_by_side_not_their_tasks_one_by_one():
    # Two threads taking turns on one GIL: each task runs unopposed, as fast as one thread alone (the wait for
    # the GIL falls between tasks), so the tasks one by one claim both cores; the stretch of wall time in which
    # both threads were busy shows one core's worth.
    base = dict(cores=2, pool=2, threads=2, thread_rows=3000.0, thread_cpu=2.0)
    one_by_one = Measured(20, 0.1, 3000.0, 2.0, True)
    alone = Stretch(0.1, 1.0, 2.0, begun=150)
    seen = Observations(Phase.MEASURING_THREADS, processes=Measured(8, 0.1, 1600.0, 2.0, True),
                        threads_alone=one_by_one, alone=alone, **base)  # (within the margin of the threads' reach)
    verdict = decide(seen, P)
    assert verdict.rates == {"thread": pytest.approx(1500.0), "process": 1600.0}, verdict
    assert "threads 1,500 samples/s (1.0 of 2 cores busy)" in verdict.why, verdict.why
    without_clocks = dataclasses.replace(seen, alone=None)  # no per-thread CPU clocks: the tasks are all there is
    assert decide(without_clocks, P).rates["thread"] == 3000.0


@pytest.mark.parametrize("cores, kept, judged, pool, threads, processes", [
    (2, 1.0, 2, 2, 100.0, 200.0),  # GIL-bound: threads one core's worth, processes every core
    (2, 1.95, 2, 2, 195.0, 200.0),  # GIL-free: the two within a few per cent
    (16, 1.0, 4, 16, 100.0, 1600.0),  # GIL-bound scouts: the pool keeps one core busy however many
    (64, 4.0, 4, 64, 6400.0, 6400.0),  # scouts that lost nothing: the pool keeps every core
])
def test_the_model_predicts_each_candidate_from_the_cpu_rate_the_gil_share_and_the_cores(cores, kept, judged, pool,
                                                                                         threads, processes):
    rates = predict(Observations(Phase.MEASURING_PROCESSES, cores=cores, pool=pool, threads=pool, thread_rows=100.0,
                                 thread_cpu=1.0, cores_kept=kept, judged=judged))
    assert rates.serial == 100.0
    assert rates.threads == pytest.approx(threads) and rates.processes == pytest.approx(processes)


def test_scouts_losing_a_little_to_the_gil_predict_a_grown_pool_that_loses_much_more():
    rates = predict(Observations(Phase.MEASURING_PROCESSES, cores=96, pool=96, threads=96, thread_rows=100.0,
                                 thread_cpu=1.0, cores_kept=3.73, judged=4))
    assert 600 < rates.threads_bound < 800, "a GIL held ~14 % of the time keeps ~7 cores busy, not 90"


@pytest.mark.parametrize("workers, cores, scouts", [(2, 2, 2), (16, 2, 4), (16, 16, 4), (64, 64, 4), (96, 96, 4), (8, 8, 4)])
def test_many_threads_or_many_cores_start_with_scouts(workers, cores, scouts):
    assert first_threads(workers, cores) == scouts


def test_a_policy_passed_for_a_test_changes_the_verdict():
    busy = judging(2, 2, 1.95, span=P.close_call_span + 0.01)
    assert decide(busy, P).action is Action.THREADS
    assert decide(busy, Policy(process_margin=1.0)).action is Action.START_PROCESSES, "keeping 97 % is not 100 %"
    assert Policy().keep_share == pytest.approx(1 / P.process_margin)


def test_a_policy_with_a_negative_threshold_is_refused_naming_it():
    with pytest.raises(ValueError, match="Policy.evidence_span"):
        Policy(evidence_span=-1.0)
    with pytest.raises(ValueError, match="process_margin"):
        Policy(process_margin=0.9)
    with pytest.raises(ValueError, match="Remembering.runs"):
        Remembering(runs=-1)
    with pytest.raises(TypeError, match="Policy"), testing.choice_policy({"early_span": 0}):
        pass


def test_decide_reads_at_most_ten_thresholds_and_each_part_of_the_policy_at_most_five():
    parts = {f.name: getattr(P, f.name) for f in dataclasses.fields(Policy) if dataclasses.is_dataclass(getattr(P, f.name))}
    assert set(parts) == {"start", "watch", "remember"}
    assert len(dataclasses.fields(Policy)) - len(parts) <= 10, "a new threshold: can the model derive it from one it has?"
    assert all(len(dataclasses.fields(part)) <= 5 for part in parts.values())
    assert Policy(watch=WinnerWatch(retrial_after=0.0)).watch.drift_ratio == P.watch.drift_ratio, "a part's other values kept"


def test_the_testing_hook_puts_a_policy_in_force_for_trials_started_inside_it(no_leaks):
    import numpy as np

    pipe = fl.from_arrays(np.arange(8)).map(lambda v: v).batch(4)
    with testing.choice_policy(Policy(scouts=1)):
        assert first_threads(16, 2) == 1
        with pipe:
            assert [int(v) for b in pipe for v in b] == list(range(8))
            trial = testing.executor(pipe)
            assert trial.policy.scouts == 1
    assert first_threads(16, 2) == P.scouts, "the default again once the block ends"


@pytest.mark.parametrize("what, cpu, idle, span, workers, busy", [
    # sixteen grown threads of GIL-bound Python, tasks of a few ms: one core between them, whatever each task's span
    ("one GIL, every thread working", 0.5, 0.0, 0.5, 16, 1.0),
    ("threads waiting on I/O, a tenth of a core each", 0.8, 0.0, 0.5, 16, 1.6),
    ("half their time with no task: read as if all worked", 0.25, 4.0, 0.5, 16, 1.0),
    ("no working time at all", 0.0, 8.0, 0.5, 16, 0.0),
])
def test_grown_threads_are_read_from_their_clocks_so_gil_waits_between_tasks_count_as_working(what, cpu, idle, span, workers, busy):
    from feedline.engine.choice import busy_while_working

    assert busy_while_working(cpu, idle, span, workers) == pytest.approx(busy), what
    low, high = P.watch.gil_limit
    assert (low <= busy_while_working(cpu, idle, span, workers) <= high) == (what.startswith(("one GIL", "half"))), what
