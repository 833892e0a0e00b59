"""Resuming sets an epoch up once, as a fresh epoch does: one draw of its permutations, no skipped sample run.

Counts, not times (`feedline.testing.order_draws`): each path to a resumed
epoch's first batch (``pipe.resume``, ``load_state_dict`` then ``iter``, a
state of other ranks, a combined state) must draw the epoch's order once,
and still deliver exactly the rest of the epoch.
"""

from __future__ import annotations

import numpy as np
import pytest

import feedline as fl
from feedline import testing

N, BATCH = 96, 4


def build(rank: int | None = None, ranks: int = 1, fn=None):
    pipe = fl.from_arrays(np.arange(N)).shuffle(seed=5)
    if rank is not None:
        pipe = pipe.shard(rank, ranks, even="drop")
    return pipe.map(fn or (lambda v: v), backend="serial").batch(BATCH)


def values(batches) -> list[int]:
    return [int(v) for b in batches for v in b.tolist()]


def draws_of(start):
    """What ``start()`` returns (an iterator, consumed) and the orders drawn from the call to the end of its epoch."""
    before = testing.order_draws()
    got = values(start())
    return got, testing.order_draws() - before


def taken(pipe, k: int):
    it = iter(pipe)
    seen = values(next(it) for _ in range(k))
    return seen, it


def test_a_fresh_epoch_draws_its_order_once():
    _, drawn = draws_of(lambda: iter(build()))
    assert drawn == 1


def test_resume_draws_the_epochs_order_once_and_delivers_the_rest():
    whole = values(build())
    pipe = build()
    seen, it = taken(pipe, 5)
    rest, drawn = draws_of(lambda: build().resume(it.state()))
    assert seen + rest == whole
    assert drawn == 1


def test_load_state_dict_then_iter_draws_once():
    whole = values(build())
    pipe = build()
    seen, _ = taken(pipe, 7)
    saved = pipe.state_dict()
    fresh = build()

    def start():
        fresh.load_state_dict(saved)  # checked now; the order it drew goes to the epoch that follows
        return iter(fresh)

    rest, drawn = draws_of(start)
    assert seen + rest == whole
    assert drawn == 1


def test_resume_on_other_ranks_draws_once_from_one_ranks_state_or_combined():
    # 4 ranks in lock step, 3 batches each; then 3 ranks finish the epoch
    its = [iter(build(r, 4)) for r in range(4)]
    seen = [v for it in its for v in values(next(it) for _ in range(3))]
    states = [it.state() for it in its]
    everything = set(values(build()))
    for state in (states[2], fl.combine_states(states)):
        rest = []
        for r in range(3):
            got, drawn = draws_of(lambda r=r, state=state: build(r, 3).resume(state))
            assert drawn == 1
            rest += got
        assert sorted(seen + rest) == sorted(everything)  # each sample once (96 = 4 x 24 and 3 x 8 x 4: nothing dropped)


def test_load_state_dict_of_another_rank_count_draws_once():
    pipes = [build(r, 2) for r in range(2)]
    its = [iter(p) for p in pipes]
    seen = [v for it in its for v in values(next(it) for _ in range(3))]  # 72 left: 3 x 24, none dropped
    saved = pipes[0].state_dict()  # one rank's, in lock step
    rest = []
    for r in range(3):
        pipe = build(r, 3)

        def start(pipe=pipe):
            pipe.load_state_dict(saved)
            return iter(pipe)

        got, drawn = draws_of(start)
        assert drawn == 1
        rest += got
    assert sorted(seen + rest) == list(range(N))


@pytest.mark.parametrize("k", [1, 11, 23])
def test_resume_runs_only_the_samples_after_the_position(k):
    calls: list[int] = []

    def record(v):
        calls.append(int(v))
        return v

    pipe = build(fn=record)
    seen, it = taken(pipe, k)
    state = it.state()
    it.close()
    calls.clear()
    rest = values(build(fn=record).resume(state))
    assert sorted(calls) == sorted(rest)  # the samples before the position are not run again (serial: one call each)
    assert sorted(seen + rest) == list(range(N))
