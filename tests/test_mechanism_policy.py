"""The mechanisms' thresholds are one frozen policy that a test puts in force for a block, and takes back after it."""

import dataclasses

import pytest

from feedline import testing


def test_a_block_changes_only_the_named_threshold_and_nested_blocks_build_on_the_outer_one():
    with testing.mechanism_policy() as default:
        pass
    with testing.mechanism_policy(tail_piece_seconds=0.5) as outer:
        assert outer.tail_piece_seconds == 0.5 and outer.reuse_arrays_from == default.reuse_arrays_from
        with testing.mechanism_policy(reuse_arrays_from=1) as inner:
            assert (inner.tail_piece_seconds, inner.reuse_arrays_from) == (0.5, 1)
        with testing.mechanism_policy() as again:
            assert again == outer, "the inner block's change is gone once it ends"
    with testing.mechanism_policy() as after:
        assert after == default, "the defaults are back after the outer block"
    with pytest.raises(dataclasses.FrozenInstanceError):
        after.tail_piece_seconds = 1.0


@pytest.mark.parametrize("changes, error, match", [
    ({"piece_seconds": 0.1}, TypeError, "piece_seconds"),
    ({"reuse_arrays_from": -1}, ValueError, "reuse_arrays_from must not be negative"),
    ({"tail_piece_seconds": 0.0}, ValueError, "tail_piece_seconds must be above 0"),
])
def test_an_unknown_or_impossible_threshold_is_refused_with_its_name(changes, error, match):
    with pytest.raises(error, match=match):
        with testing.mechanism_policy(**changes):
            pass
    with testing.mechanism_policy() as now:
        assert now.tail_piece_seconds > 0, "a refused block leaves nothing in force"

