"""The start-up speculation (`feedline.testing.start_speculation`): what a description starts ahead, on how many cores, and what cancels it.

Run with a policy whose start after set-up never comes due, so that no fork
server starts here: each case reads whether a start was scheduled (its
timer thread) and that building a runtime cancels it.
"""

import threading

import pytest

from feedline import testing

_TIMER = "feedline-forkserver-ahead"
_NEVER = 3600.0  # seconds: the start after set-up never comes due


def _scheduled() -> bool:
    return any(t.name == _TIMER and t.is_alive() for t in threading.enumerate())


class _Runtime:
    """What the policy asks of the engine's runtime: whether a consumer iterates it."""

    def iterating(self, within: float) -> bool:
        return False


@pytest.fixture
def few_cores(monkeypatch):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    with testing.start_speculation(cores=4, after_idle=_NEVER) as speculation:
        yield speculation
        speculation.runtime_built(_Runtime())  # cancels what a case left scheduled


@pytest.mark.parametrize(("backend", "workers"), [("thread", None), ("serial", None), (None, 1)])
def test_a_map_that_never_runs_on_processes_schedules_nothing(few_cores, backend, workers):
    few_cores.described(backend, workers)
    assert not _scheduled()


def test_an_automatic_map_on_few_cores_schedules_a_start_after_set_up_and_a_runtime_cancels_it(few_cores):
    few_cores.described(None)
    assert _scheduled()
    few_cores.runtime_built(_Runtime())
    for thread in threading.enumerate():
        if thread.name == _TIMER:
            thread.join(5)
    assert not _scheduled()


def test_one_core_schedules_nothing(monkeypatch):
    monkeypatch.delenv("FEEDLINE_FORKSERVER", raising=False)
    with testing.start_speculation(cores=1, after_idle=_NEVER) as speculation:
        speculation.described(None)
    assert not _scheduled()


def test_fresh_interpreter_workers_have_nothing_to_start_ahead(monkeypatch):
    monkeypatch.setenv("FEEDLINE_FORKSERVER", "0")
    with testing.start_speculation(cores=4, after_idle=_NEVER) as speculation:
        speculation.described(None)
    assert not _scheduled()


def test_the_policy_is_one_frozen_record():
    with testing.start_speculation(cores=4) as speculation, pytest.raises(AttributeError):
        speculation.policy.after_idle = 1.0
