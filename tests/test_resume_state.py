"""`pipe.resume(state)` trusts nothing: every field is validated, edits are caught by the digest.

Each bad input is refused with a `ValueError` naming the field; genuine
states (also after a JSON round trip, and states from before the digest)
still resume exactly, on serial, thread and process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import snapshot

import feedline as fl
from feedline import testing


def twice(x):
    return x * 2


def fails_on_sevens(x):
    if int(x) % 7 == 6:
        raise ValueError(f"bad sample {int(x)}")
    return x * 2


def shards(shard, num_shards):
    for i in range(5 + 2 * shard):
        yield np.int64(100 * shard + i)


def build(kind: str, backend: str = "serial", workers: int = 1):
    """Pipelines of each resume flavour: aligned batches, re-cut batches, unbatched, generator."""
    source = fl.from_arrays(np.arange(30, dtype=np.int64)).shuffle(seed=5)
    if kind == "batched":
        return source.map(twice, backend=backend, workers=workers).batch(4)
    if kind == "skip":
        return source.map(fails_on_sevens, backend=backend, workers=workers, on_error="skip").batch(4)
    if kind == "filter":
        return source.filter(lambda x: int(x) % 3 != 0).map(twice, backend=backend, workers=workers).batch(4)
    if kind == "unbatched":
        return fl.from_arrays(np.arange(600, dtype=np.int64)).shuffle(seed=5).map(twice, backend=backend, workers=workers)
    if kind == "generator":
        return fl.from_generator(shards, num_shards=3).shuffle(seed=5).map(twice, backend=backend, workers=workers).batch(3)
    if kind == "generator_unbatched":
        return fl.from_generator(shards, num_shards=3).shuffle(seed=5).map(twice, backend=backend, workers=workers)
    raise AssertionError(kind)


def state_after(pipe, batches: int, epoch: int = 1) -> dict:
    it = pipe.epoch(epoch)
    for _ in range(batches):
        next(it)
    return it.state()


def refused(pipe, state, field: str, *words: str) -> str:
    with pytest.raises(ValueError) as info:
        pipe.resume(state)
    message = str(info.value)
    assert message.startswith("resume(): ") and f"state[{field!r}]" in message, message
    for word in words:
        assert word in message, message
    return message


# ------------------------------------------------------------ the issue's four
@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
def test_the_four_bad_states_of_the_issue_are_refused_naming_the_field(no_leaks):
    with build("skip") as pipe:  # re-cut batches: the offset is meaningful here
        state = state_after(pipe, 2)
        assert pipe.resume(state) is not None
        refused(pipe, {**state, "offset": 99}, "offset", "99", "holds only")
        refused(pipe, {**state, "task": 10**9}, "task", "1000000000", "tasks")
        refused(pipe, {**state, "batches": "3"}, "batches", "must be an integer", "'3'")
        refused(pipe, {**state, "skipped": [1, 2]}, "skipped", "[index, reason] pairs", "item 0 is 1")
        refused(pipe, {**state, "chunk": 8}, "chunk", "re-cuts its batches")
    with build("unbatched") as pipe:
        state = state_after(pipe, 5)
        refused(pipe, {**state, "offset": 99}, "offset", "holds only")


def test_every_field_is_checked_for_type_and_range(no_leaks):
    with build("batched") as pipe:
        state = state_after(pipe, 2)
        advice = "it.state() returned, unchanged"
        with pytest.raises(ValueError, match="must be the dict that it.state"):
            pipe.resume([state])
        refused(pipe, {k: v for k, v in state.items() if k != "version"}, "version", "is missing")
        refused(pipe, {**state, "version": 99}, "version", "99")
        refused(pipe, {**state, "version": True}, "version")
        refused(pipe, {k: v for k, v in state.items() if k != "task"}, "task", "is missing")
        refused(pipe, {**state, "epoch": -1}, "epoch", ">= 0", advice)
        refused(pipe, {**state, "epoch": 1.0}, "epoch", "must be an integer")
        refused(pipe, {**state, "task": True}, "task", "must be an integer")
        refused(pipe, {**state, "task": -2}, "task", ">= 0")
        refused(pipe, {**state, "offset": None}, "offset", "must be an integer")
        refused(pipe, {**state, "fingerprint": 7}, "fingerprint", "must be a string")
        refused(pipe, {**state, "digest": 7}, "digest", "must be a string")
        refused(pipe, {**state, "seeds": ["5"]}, "seeds", "shuffle seeds")
        refused(pipe, {**state, "skipped": "none"}, "skipped", "must be a list")
        refused(pipe, {**state, "skipped": [[3, 4]]}, "skipped", "item 0")
        refused(pipe, {**state, "my_step": 12}, "my_step", "not a field", "beside the state")
        refused(pipe, {**state, "chunk": 3}, "chunk", "not a whole number of batches of 4")
        refused(pipe, {**state, "streams": {}}, "streams", "generator source")


def test_fields_must_fit_the_pipeline_and_each_other(no_leaks):
    with build("batched") as pipe:  # 30 samples, batches of 4: 8 tasks
        state = state_after(pipe, 3)
        for k in range(9):  # every position of the epoch (8: its end) validates, with a digest to match
            assert pipe.resume(testing.seal_state({**state, "task": k, "batches": k})) is not None
        refused(pipe, {**state, "task": 9}, "task", "8 tasks of 4 samples")
        refused(pipe, {**state, "offset": 1}, "offset", "a multiple of the batch size, 4")
        refused(pipe, {**state, "task": 4}, "task", "state['batches'] is 3")
        refused(pipe, {**state, "batches": 2}, "task", "state['batches'] is 2")
        refused(pipe, {**state, "skipped": [[1, "x"]]}, "skipped", "never skips")
    with build("unbatched") as pipe:  # 600 samples: 256 tasks of 2
        state = state_after(pipe, 7)
        assert state["chunk"] == 2 and (state["task"], state["offset"]) == (3, 1)
        refused(pipe, {**state, "chunk": 0}, "chunk", ">= 1")
        refused(pipe, {**state, "task": 301}, "task", "300 tasks of 2 samples")
        refused(pipe, {**state, "task": 300, "offset": 1, "batches": 601}, "offset", "end of the epoch")
        refused(pipe, {**state, "offset": 2}, "offset", "holds only 2")
        refused(pipe, {**state, "batches": 6}, "task", "state['batches'] is 6")
        refused(pipe, {**state, "batches": 700}, "batches", "more than the 7")


@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
def test_skipped_samples_must_have_been_read_before_the_point(no_leaks):
    with build("skip") as pipe:
        it = pipe.epoch(0)
        for _ in range(4):
            next(it)
        state = it.state()
        assert state["skipped"], "the epoch should have skipped a sample by now"
        order = pipe.plan.epoch_indices(0).tolist()
        later = order[-1]
        refused(pipe, {**state, "skipped": state["skipped"] + [[later, "x"]]}, "skipped", f"sample {later}")
        refused(pipe, {**state, "skipped": [[99, "x"]]}, "skipped", "sample 99")
        refused(pipe, {**state, "skipped": state["skipped"] * 2}, "skipped", "twice")
        refused(pipe, {**state, "batches": 10**6}, "batches", "more than")
        refused(pipe, {**state, "offset": 4}, "offset", "holds only 4")


def test_generator_positions_are_validated(no_leaks):
    with build("generator") as pipe:
        state = state_after(pipe, 3)
        streams = state["streams"]
        assert state["task"] == 0 and state["offset"] == 0 and streams["positions"]
        refused(pipe, {**state, "task": 2}, "task", "always has 0")
        refused(pipe, {**state, "offset": 3}, "offset", "at most 3 items")
        refused(pipe, {**state, "chunk": 2}, "chunk", "indexed source")
        refused(pipe, {**state, "streams": None}, "streams", "'positions', 'exhausted' and 'cursor'")
        refused(pipe, {**state, "streams": {**streams, "cursor": 3}}, "streams", "['cursor']")
        refused(pipe, {**state, "streams": {**streams, "cursor": "0"}}, "streams", "['cursor']")
        refused(pipe, {**state, "streams": {**streams, "positions": {"7": 1}}}, "streams", "shard 7")
        refused(pipe, {**state, "streams": {**streams, "positions": {"x": 1}}}, "streams", "'x'")
        refused(pipe, {**state, "streams": {**streams, "positions": {"0": -1}}}, "streams", "integer >= 0")
        refused(pipe, {**state, "streams": {**streams, "positions": [1]}}, "streams", "['positions']")
        refused(pipe, {**state, "streams": {**streams, "exhausted": [0, 0]}}, "streams", "['exhausted']")
        refused(pipe, {**state, "streams": {**streams, "exhausted": 0}}, "streams", "['exhausted']")
        refused(pipe, {**state, "batches": 99}, "batches", "items read")
        refused(pipe, {**state, "skipped": [[[0, 99], "x"]]}, "skipped", "already read")
        refused(pipe, {**state, "skipped": [[5, "x"]]}, "skipped", "already read")
        edited = json.loads(json.dumps(state))
        shard = next(iter(edited["streams"]["positions"]))
        edited["streams"]["positions"][shard] += 1  # in range, so only the digest can tell
        refused(pipe, edited, "digest", "changed after it.state() wrote it")


def test_an_unbatched_generator_resumes_inside_a_task(no_leaks):
    # Shards of 5, 7 and 9 items are one task each: every state but the last of each shard is inside a task.
    with build("generator_unbatched") as pipe:
        full = [int(v) for v in pipe.epoch(1)]
        it = pipe.epoch(1)
        next(it)
        state = it.state()
        assert state["offset"] == 1 and state["streams"]["positions"] == {}
        assert [int(v) for v in pipe.resume(json.loads(json.dumps(state)))] == full[1:]
        resumed = pipe.resume(state)
        assert resumed.state()["streams"] == state["streams"]  # before its first item, a resumed iterator is where it was
        refused(pipe, {**state, "offset": 64}, "offset", "at most 64 items")
        shard = pipe.plan.epoch_shards(1)[0]
        streams = {**state["streams"], "exhausted": [shard]}
        refused(pipe, testing.seal_state({**state, "streams": streams}), "offset", "exhausted")


def test_an_edit_that_passes_every_range_check_is_caught_by_the_digest(no_leaks):
    with build("unbatched") as pipe:
        state = state_after(pipe, 7)
        refused(pipe, {**state, "offset": 0, "batches": 6}, "digest", "changed after it.state() wrote it")
        refused(pipe, {**state, "epoch": 2}, "digest")
        refused(pipe, {**state, "digest": "0" * 16}, "digest")
        refused(pipe, {**state, "seeds": [6]}, "digest")


def test_a_state_without_a_digest_is_accepted_when_its_fields_validate(no_leaks):
    with build("unbatched") as reference:
        full = [int(v) for v in reference.epoch(1)]
    with build("unbatched") as pipe:  # a fresh one: its grid is the first epoch's, not one measured on a finished epoch
        state = state_after(pipe, 7)
        older = {k: v for k, v in state.items() if k not in ("digest", "seeds")}  # as feedline wrote before the digest
        assert [int(v) for v in pipe.resume(older)] == full[7:]
        refused(pipe, {**older, "offset": 2}, "offset")  # validated all the same
        # A state from before the task grid was named: 64 samples a task.
        old_grid = {**older, "task": 1, "offset": 6, "batches": 70}
        old_grid.pop("chunk")
        assert [int(v) for v in pipe.resume(old_grid)] == full[70:]


@pytest.mark.filterwarnings("ignore:feedline skipped:RuntimeWarning")
@pytest.mark.parametrize("kind", ["batched", "skip", "filter", "unbatched", "generator", "generator_unbatched"])
def test_genuine_states_still_resume_exactly(kind, backend, no_leaks):
    with build(kind, "serial", 1) as reference_pipe:
        reference = [snapshot(b) for b in reference_pipe.epoch(1)]
    with build(kind, backend, 2) as pipe:
        it = pipe.epoch(1)
        states = [json.loads(json.dumps(it.state()))]
        for _ in it:
            states.append(json.loads(json.dumps(it.state())))
    assert len(states) == len(reference) + 1
    picks = sorted({0, 1, len(states) // 2, len(states) - 2, len(states) - 1})
    with build(kind, backend, 2) as fresh:
        for k in picks:
            assert [snapshot(b) for b in fresh.resume(states[k])] == reference[k:], f"after {k} outputs"


# ------------------------------------------------------------- shuffle seeds
def saved_and_resumed_in_new_processes(tmp_path, build: str, seed: str) -> tuple[str, str, dict]:
    """Save a state of the pipeline ``build`` makes in one process, resume it in another: (its seed, the refusal, the state)."""
    script = textwrap.dedent(f"""
        import json, sys
        import numpy as np, feedline as fl
        pipe = {build}
        if sys.argv[1] == "save":
            it = iter(pipe)
            next(it)
            json.dump(it.state(), open(sys.argv[2], "w"))
            print({seed})
        else:
            try:
                pipe.resume(json.load(open(sys.argv[2])))
            except ValueError as e:
                print(e)
    """)
    path = tmp_path / "state.json"
    run = [sys.executable, "-c", script]
    saved = subprocess.run(run + ["save", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    message = subprocess.run(run + ["load", str(path)], capture_output=True, text=True, check=True).stdout
    return saved, message, json.loads(path.read_text())


def test_a_drawn_shuffle_seed_in_a_new_process_is_named(tmp_path):
    saved, message, state = saved_and_resumed_in_new_processes(
        tmp_path, "fl.from_arrays(np.arange(40)).shuffle().batch(4)", "pipe.steps[0].seed")
    assert "state['fingerprint'] differs only in the shuffle seed" in message, message
    assert f"shuffle(seed={saved})" in message and "new process" in message and "explicit seed" in message
    with fl.from_arrays(np.arange(40)).shuffle(seed=int(saved)).batch(4) as pipe:  # what the message says to do
        assert len(list(pipe.resume(state))) == 9


def test_a_drawn_mix_seed_in_a_new_process_is_named(tmp_path):
    saved, message, state = saved_and_resumed_in_new_processes(
        tmp_path, "fl.mix([fl.from_arrays(np.arange(40)), fl.from_arrays(np.arange(100, 140))]).batch(4)", "pipe.source.seed")
    assert "state['fingerprint'] differs only in the seed of fl.mix()" in message, message
    assert f"fl.mix(..., seed={saved})" in message and "new process" in message and "explicit seed" in message
    inputs = [fl.from_arrays(np.arange(40)), fl.from_arrays(np.arange(100, 140))]
    with fl.mix(inputs, seed=int(saved)).batch(4) as pipe:  # what the message says to do
        assert len(list(pipe.resume(state))) == 19


def test_a_different_pipeline_is_refused_with_the_fingerprint(no_leaks):
    with fl.from_arrays(np.arange(40)).shuffle(seed=1).batch(4) as pipe:
        state = state_after(pipe, 1)
    refused(fl.from_arrays(np.arange(40)).shuffle(seed=1).batch(5), state, "fingerprint", "does not match this pipeline")
    refused(fl.from_arrays(np.arange(41)).shuffle(seed=1).batch(4), state, "fingerprint", "does not match")
    older = {k: v for k, v in state.items() if k not in ("digest", "seeds")}
    message = refused(fl.from_arrays(np.arange(40)).shuffle(seed=2).batch(4), older, "fingerprint")
    assert "shuffle() without seed=" in message  # no seeds in the state: the hint, not a verdict


def test_state_digest_survives_json_and_pickle():
    import pickle

    state = {"version": 1, "epoch": 0, "batches": 1, "skipped": [[(0, 2), "r"]], "fingerprint": "f", "task": 0,
             "offset": 0, "streams": {"positions": {0: 3, 10: 1, 2: 4}, "exhausted": [2], "cursor": 1}, "seeds": [np.int64(3)]}
    testing.seal_state(state)
    assert testing.seal_state(json.loads(json.dumps(state, default=int)))["digest"] == state["digest"]
    assert testing.seal_state(pickle.loads(pickle.dumps(state)))["digest"] == state["digest"]


# ------------------------------------------------ recombined pipelines
def two_inputs():
    return fl.from_arrays(np.arange(20)), fl.from_arrays(np.arange(100, 120))


def test_a_state_of_concatenate_resumed_with_its_inputs_swapped_is_refused_naming_the_swap(no_leaks):
    a, b = two_inputs()
    with fl.concatenate([a, b]).batch(4) as pipe:
        state = state_after(pipe, 2)
    a, b = two_inputs()
    refused(fl.concatenate([b, a]).batch(4), state, "fingerprint", "concatenate() input 0",
            "input 1 of the state's pipeline", "in another order")
    with fl.concatenate([a, b]).batch(4) as pipe:  # the same inputs, built again: resumes
        assert len(list(pipe.resume(state))) == 8


def test_a_state_of_mix_resumed_with_its_inputs_swapped_is_refused(no_leaks):
    a, b = two_inputs()
    with fl.mix([a, b], seed=1).batch(4) as pipe:
        state = state_after(pipe, 2)
    refused(fl.mix([b, a], seed=1).batch(4), state, "fingerprint", "mix() input 0", "in another order")


def test_a_state_of_an_input_with_other_data_is_refused_naming_the_input(no_leaks):
    a, b = two_inputs()
    with fl.concatenate([a, b]).batch(4) as pipe:
        state = state_after(pipe, 2)
    other = fl.from_arrays(np.arange(200, 220))
    refused(fl.concatenate([a, other]).batch(4), state, "fingerprint", "concatenate() input 1 differs")


def test_a_state_resumed_with_a_map_replaced_by_another_function_is_refused_naming_both(no_leaks):
    with fl.from_arrays(np.arange(40)).map(lambda x: x + 1).batch(4) as pipe:
        state = state_after(pipe, 2)
    refused(fl.from_arrays(np.arange(40)).map(lambda x: x * 2).batch(4), state, "fingerprint", "step 1 differs",
            "<lambda>", "another function")
    refused(fl.from_arrays(np.arange(40)).map(np.negative).batch(4), state, "fingerprint", "map(negative)")
    with fl.from_arrays(np.arange(40)).map(lambda x: x + 1).batch(4) as pipe:  # the same lambda again: resumes
        assert len(list(pipe.resume(state))) == 8
