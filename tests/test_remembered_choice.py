"""The automatic choice remembers its verdict across runs and starts later runs on it (docs/automatic_choice.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import snapshot

import feedline as fl
import feedline.backends.process
from feedline import testing
from feedline.engine.choice import DEFAULT_POLICY, Remembering, WinnerWatch

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def choice_policy():
    """``choice_policy(**changes)``: trials started in the test decide under the default policy with ``changes``."""
    with contextlib.ExitStack() as stack:
        yield lambda **changes: stack.enter_context(testing.choice_policy(dataclasses.replace(DEFAULT_POLICY, **changes)))


def waits(i):
    time.sleep(0.004)  # waits like a file or network read: the trial settles on threads at once (I/O)
    return np.full(4, i, np.int64)


def waits_longer(i):
    time.sleep(0.005)
    return np.full(4, i, np.int64)


def _run(fn=waits, samples=96, workers=None):
    """One run of an automatic pipeline: (its batches as bytes, stats)."""
    pipe = fl.from_sequence(range(samples)).map(fn, workers=workers).batch(8)
    with pipe:
        batches = [snapshot(b) for b in pipe]
        return batches, pipe.stats()


@pytest.fixture
def choices(tmp_path, monkeypatch):
    """A file of remembered verdicts of this test's own."""
    path = tmp_path / "choices.json"
    monkeypatch.setenv("FEEDLINE_REMEMBER", str(path))
    return path


def _entries(path) -> dict:
    return json.loads(path.read_text())


def _set_winner(path, winner: str, agreed: int = DEFAULT_POLICY.remember.agree) -> None:
    """Rewrite the one remembered verdict as ``winner`` (as if ``agreed`` trials in a row had found it)."""
    entries = _entries(path)
    (entry,) = entries.values()
    entry["winner"], entry["agreed"] = winner, agreed
    path.write_text(json.dumps(entries))


def _trials(fn=waits, **kwargs):
    """The runs whose trials must agree before a verdict is started on; the last one's (batches, stats)."""
    for _ in range(DEFAULT_POLICY.remember.agree):
        out = _run(fn, **kwargs)
        assert "remembered" not in out[1].decision, out[1].decision
    return out


def test_a_later_run_starts_on_the_verdict_two_trials_agreed_on(choices):
    first, stats = _run()
    assert "remembered" not in stats.decision
    (entry,) = _entries(choices).values()
    assert entry["winner"] == stats.backend == "thread" and entry["runs"] == 0 and entry["agreed"] == 1
    _, confirming = _run()
    assert "remembered" not in confirming.decision  # one trial is not enough: a second one runs
    assert _entries(choices)[next(iter(_entries(choices)))]["agreed"] == 2
    stats = confirming
    second, again = _run()
    assert again.backend == "thread" and again.decision.count("remembered") == 1, again.decision
    assert f"threads x{again.workers} at once, remembered" in again.decision and "run 1 of" in again.decision
    assert again.trial == stats.trial  # the report keeps the rates the verdict came from
    assert second == first  # every backend gives the same batches
    assert _entries(choices)[next(iter(_entries(choices)))]["runs"] == 1


def test_a_trial_that_disagrees_is_not_started_on_until_another_agrees(choices):
    _run()
    _set_winner(choices, "process", agreed=1)  # as if the first trial had judged otherwise (a busy moment)
    _, second = _run()
    assert "remembered" not in second.decision
    (entry,) = _entries(choices).values()
    assert entry["winner"] == "thread" and entry["agreed"] == 1
    assert "remembered" not in _run()[1].decision  # this trial agrees with the second
    assert "remembered" in _run()[1].decision


def test_a_remembered_process_verdict_starts_the_workers_at_once_with_the_same_batches(choices):
    first, _ = _run()
    _set_winner(choices, "process")
    second, stats = _run()
    assert stats.backend == "process" and f"processes x{stats.workers} at once, remembered" in stats.decision, stats.decision
    assert second == first


def test_the_trial_runs_again_after_its_remembered_runs_and_is_remembered_anew(choices, choice_policy):
    choice_policy(remember=Remembering(runs=2))
    _trials()
    assert "remembered" in _run()[1].decision and "remembered" in _run()[1].decision
    _, fresh = _run()
    assert "remembered" not in fresh.decision  # the third run after the verdict: a trial
    (entry,) = _entries(choices).values()
    assert entry["runs"] == 0
    assert "run 1 of 2" in _run()[1].decision  # it agreed with the verdict before: started on at once


def test_different_code_is_not_started_on_another_pipelines_verdict(choices):
    _run(waits)
    _, other = _run(waits_longer)
    assert "remembered" not in other.decision
    assert len(_entries(choices)) == 2


def test_nothing_is_remembered_when_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("FEEDLINE_REMEMBER", "0")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _run()
    assert "remembered" not in _run()[1].decision
    assert not list(tmp_path.rglob("*.json"))


def test_the_default_file_is_under_the_cache_home(tmp_path, monkeypatch):
    monkeypatch.delenv("FEEDLINE_REMEMBER")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    _trials()
    assert "remembered" in _run()[1].decision
    assert (tmp_path / "feedline" / "choices.json").is_file()


def test_an_unwritable_memory_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("FEEDLINE_REMEMBER", str(blocker / "choices.json"))  # a folder that is a file
    batches, stats = _run()
    assert len(batches) == 12
    assert "not remembered (" in stats.decision and "FEEDLINE_REMEMBER" in stats.decision, stats.decision


def test_a_torn_file_counts_as_empty_and_is_written_afresh(choices):
    choices.write_text('{"abc": {"winner": "process", "ru')
    _trials()
    assert "remembered" in _run()[1].decision
    assert len(_entries(choices)) == 1


def test_the_file_keeps_only_the_most_recently_used_entries(choices, choice_policy):
    choice_policy(remember=Remembering(entries=2))
    for fn in (waits, waits_longer):
        _trials(fn)
    assert "remembered" in _run(waits)[1].decision  # used again: now the most recent
    _run(lambda i: (time.sleep(0.004), np.full(4, -i, np.int64))[1])
    kept = [entry["why"] for entry in _entries(choices).values()]
    assert len(kept) == 2
    assert "remembered" in _run(waits)[1].decision
    assert "remembered" not in _run(waits_longer)[1].decision


def test_a_remembered_winner_that_no_longer_delivers_runs_the_trial_again(choices, choice_policy):
    choice_policy(watch=WinnerWatch(retrial_after=0.0))
    _trials(workers=2)  # a count set by hand: the worker tuner leaves it (the drift check compares per worker)
    entries = _entries(choices)
    (entry,) = entries.values()
    entry["per_worker"] *= 100  # as if it had delivered 100 times more when it won
    choices.write_text(json.dumps(entries))
    _, stats = _run(samples=400, workers=2)
    decided = [stats.decision] + stats.decisions
    assert any("tried again after the rate fell" in text for text in decided), decided
    (entry,) = _entries(choices).values()
    assert entry["runs"] == 0  # the new trial's verdict replaced the remembered one


_SCRIPT = (
    "import time, numpy as np, feedline as fl\n"
    "def load(i):\n"
    "    time.sleep(0.004)\n"
    "    return np.full(4, i, np.int64)\n"
    "pipe = fl.from_sequence(range(96)).map(load).batch(8)\n"
    "with pipe:\n"
    "    total = sum(int(b.sum()) for b in pipe)\n"
    "print(total, pipe.stats().decision)\n"
)


def test_a_fresh_interpreter_recalls_what_the_previous_ones_found(choices):
    """The key is a digest of the code, stable across interpreters (no ids, no addresses): a run after agreeing trials recalls.

    On a quiet machine the third run recalls; on a loaded one a trial may end
    the short epoch undecided or read the load, and the trials agree a run or
    two later. A key that changed between interpreters would never recall.
    """
    env = {**os.environ, "FEEDLINE_REMEMBER": str(choices)}
    runs = []
    while len(runs) < DEFAULT_POLICY.remember.agree + 4 and not (runs and "remembered" in runs[-1].stdout):
        runs.append(subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120, env=env))
    assert all(run.returncode == 0 for run in runs), [run.stderr for run in runs]
    totals = [run.stdout.split(" ", 1)[0] for run in runs]
    assert totals == [str(4 * sum(range(96)))] * len(runs)
    assert "remembered" in runs[-1].stdout, [run.stdout for run in runs]
    assert len(runs) > DEFAULT_POLICY.remember.agree, "no run recalls before the trials that must agree have run"


def test_remembered_processes_that_cannot_start_leave_the_run_to_a_trial(choices, monkeypatch):
    first, _ = _run()
    _set_winner(choices, "process")

    def no_processes(*args, **kwargs):  # the process backend's executor, as on a machine where workers cannot start
        raise OSError("no process workers here")

    monkeypatch.setattr(feedline.backends.process, "ProcessExecutor", no_processes)
    interval = sys.getswitchinterval()
    second, stats = _run()
    assert second == first
    assert stats.backend == "thread"
    assert "the remembered processes could not start (OSError: no process workers here): a trial" in stats.decision
    assert sys.getswitchinterval() == interval  # nothing the failed start took is left behind


def test_a_later_run_starts_at_the_worker_count_the_tuner_left(choices):
    """Threads that wait on I/O are grown by the worker tuner; the next run starts grown, not at one per core."""
    for _ in range(DEFAULT_POLICY.remember.agree):  # the trials that agree; each run's tuner grows the threads
        pipe = fl.from_arrays(np.arange(1200)).map(waits).batch(4)
        with pipe:
            first = [b.tolist() for b in pipe]
            grown = pipe.stats()
            busy = testing.runtime(pipe).worker_tuner.busy_windows
        if grown.workers <= 2 and busy:  # growth needs idle CPUs: on a loaded machine the tuner (rightly) holds back
            pytest.skip("other programs kept this machine's CPUs busy: the threads were not grown")
        assert grown.backend == "thread" and grown.workers > 2, (grown.workers, grown.decisions)
    (entry,) = _entries(choices).values()
    assert entry["workers"] == grown.workers
    pipe = fl.from_arrays(np.arange(1200)).map(waits).batch(4)
    with pipe:
        it = iter(pipe)
        second = [next(it).tolist()]
        assert it.stats().workers == grown.workers  # from the first batch on
        second += [b.tolist() for b in it]
        again = pipe.stats()
    assert second == first
    assert f"threads x{grown.workers} at once, remembered" in again.decision, again.decision


def test_a_memory_that_cannot_count_its_runs_is_not_started_on(choices):
    """A file it can read but not write (read-only) would hold one verdict forever: the trial runs, and says why."""
    _trials()
    refused = "not remembered (PermissionError: [Errno 13] read-only; set FEEDLINE_REMEMBER to a writable file, or 0)"
    with testing.remembering_refused(refused):  # as a read-only file answers
        _, stats = _run()
    assert "at once, remembered" not in stats.decision
    assert refused in stats.decision, stats.decision
