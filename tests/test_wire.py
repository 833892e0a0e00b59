"""The process backend's message codec: every message arrives whole, in its fast form where it fits."""

from __future__ import annotations

import collections

import numpy as np
import pytest

import feedline as fl
from feedline._tree import Leaf, flatten
from feedline.worker._protocol import Done, Hello, Release, Result, RunTask, Stop, Task, TaskError
from feedline.worker._wire import decode, encode

Point = collections.namedtuple("Point", "x y")


def _same_result(a: Result, b: Result) -> None:
    assert a.__dict__.keys() == b.__dict__.keys()
    for name, value in a.__dict__.items():
        assert type(getattr(b, name)) is type(value) or value is None, name
        assert getattr(b, name) == value, name


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint64])
def test_a_task_with_an_index_array_travels_in_the_fast_form(dtype):
    indices = np.random.default_rng(0).permutation(1000)[:256].astype(dtype)
    data = encode(RunTask((3, 17), Task(epoch=2, number=17, indices=indices)))
    assert data[:1] == b"T"
    message = decode(data)
    assert message.key == (3, 17) and message.task.epoch == 2 and message.task.number == 17
    assert message.task.indices.dtype == dtype and message.task.indices.tolist() == indices.tolist()
    assert message.release == []


def test_a_task_carries_the_slots_its_worker_may_reuse():
    message = decode(encode(RunTask((0, 4), Task(epoch=0, number=4, indices=np.arange(8)), [7, 2])))
    assert message.release == [7, 2] and message.task.indices.tolist() == list(range(8))
    pickled = decode(encode(RunTask((0, 5), Task(epoch=0, number=5, shard=1, start=0), [3])))  # the pickled form too
    assert pickled.release == [3]


@pytest.mark.parametrize("task", [
    Task(epoch=0, number=1, shard=3, start=40),  # a stream shard's next batch
    Task(epoch=0, number=1, indices=np.arange(8), timed_out=(5,)),  # a rerun after map(timeout=)
    Task(epoch=0, number=1, indices=np.array([[1, 2], [3, 4]])),  # composed sources index by rows
])
def test_other_tasks_travel_pickled_and_arrive_whole(task):
    data = encode(RunTask((0, 1), task))
    assert data[:1] == b"P"
    back = decode(data).task
    assert (back.epoch, back.number, back.shard, back.start, back.timed_out) == (
        task.epoch, task.number, task.shard, task.start, task.timed_out)
    assert (back.indices is None) == (task.indices is None)
    if task.indices is not None:
        assert np.array_equal(back.indices, task.indices)


@pytest.mark.parametrize("tree", [
    np.zeros((4, 3)),
    (np.zeros(4), np.ones(4, np.int64)),
    {"image": np.zeros((2, 2)), "label": np.arange(2), "name": "batch", "extra": [1.5, None, b"x", True]},
    [np.zeros(2), (np.ones(2), {"k": np.arange(2)})],
])
def test_a_done_message_with_a_plain_skeleton_travels_in_the_fast_form(tree):
    skeleton, _ = flatten(tree)
    result = Result(rows=4, indices=[1, 5, 9], skipped=[(7, "map: ValueError: bad")], times={"read": 0.5, "map": 1.25},
                    exhausted=True, consumed=12, span=(1.0, 2.0), worker=3, cpu=0.75)
    fields = {"skeleton": skeleton, "slot": 2, "name": "feedline_x", "layout": [(0, (4, 3), "<f8")], "total": 96, "retired": [1]}
    data = encode(Done((1, 4), result, fields))
    assert data[:1] == b"D"
    back = decode(data)
    assert back.key == (1, 4)
    _same_result(result, back.result)
    assert {k: v for k, v in back.fields.items() if k != "skeleton"} == {k: v for k, v in fields.items() if k != "skeleton"}
    assert repr(back.fields["skeleton"]) == repr(skeleton)


@pytest.mark.parametrize("make", [
    lambda: Done((0, 1), Result(rows=1), {"skeleton": Point(Leaf(0), Leaf(1)), "slot": 0, "name": None,
                                        "layout": [], "total": 0, "retired": []}),  # a namedtuple keeps its type
    lambda: Done((0, 1), Result(rows=2, skipped=[(np.int64(4), "read: OSError")])),  # a NumPy scalar
    lambda: Done((0, 1), Result(rows=2, payload=[{"a": 1}, {"a": 2}])),  # samples that travel with the message
    lambda: Done((0, 1), Result(error=TaskError.from_exception(ValueError("boom"), 3, "a.png", "map"))),
])
def test_messages_the_fast_form_cannot_carry_travel_pickled_and_arrive_whole(make):
    message = make()
    data = encode(message)
    assert data[:1] == b"P"
    back = decode(data)
    assert type(back) is Done and back.key == message.key
    if message.fields is not None:
        assert type(back.fields["skeleton"]) is Point
    if message.result.error is not None:
        assert back.result.error.message == "boom" and back.result.error.where == "a.png"
    else:
        assert back.result.skipped == message.result.skipped and back.result.payload == message.result.payload


def test_release_and_control_messages_round_trip():
    assert decode(encode(Release([3, 1, 2]))).slots == [3, 1, 2]
    assert isinstance(decode(encode(Stop())), Stop)
    hello = decode(encode(Hello(7, 1234, "feedline_1_w7_status")))
    assert (hello.worker_id, hello.pid, hello.status_segment) == (7, 1234, "feedline_1_w7_status")


def test_bytes_that_are_not_a_message_are_refused_by_name():
    with pytest.raises(ValueError, match="not a feedline message"):
        decode(b"Zjunk")


def _labelled(i):
    return {"x": np.full(3, i, np.float32), "name": f"s{i}", "pair": Point(i, -i)}


def test_process_batches_with_named_and_plain_parts_match_serial(no_leaks):
    """Whichever form each message takes, the batches equal the serial reference."""
    def run(backend):
        pipe = fl.from_sequence(list(range(40))).map(_labelled, backend=backend, workers=3).batch(8)
        with pipe:
            return [(b["x"].tolist(), b["name"], [tuple(p) for p in b["pair"]], type(b["pair"][0]).__name__) for b in pipe]

    assert run("process") == run("serial")


def test_numpy_scalars_keep_their_type_across_the_pipe():
    """marshal would write an np.int64 as bytes and an np.float64 as a float: such messages go pickled."""
    result = Result(rows=1, times={"map": np.float64(0.5)}, indices=[np.int64(3)])
    back = decode(encode(Done((0, 1), result))).result
    assert type(back.times["map"]) is np.float64 and type(back.indices[0]) is np.int64
