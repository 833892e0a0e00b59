"""`fl.get_worker_info()`: worker id, count, seed and backend inside map functions, on every backend."""

from __future__ import annotations

import pytest

import feedline as fl
from feedline import testing

BACKENDS = ["serial", "thread", "process", "ray"]


def _who(index):
    info = fl.get_worker_info()
    return index, info.id, info.num_workers, info.seed, info.backend


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=8, object_store_memory=128 << 20, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _seen(backend, workers, request) -> list[tuple]:
    if backend == "ray":
        request.getfixturevalue("ray_cluster")
    pipe = fl.from_sequence(range(64)).map(_who, backend=backend, workers=workers)
    with pipe:
        first = list(pipe)
        if backend not in ("process", "thread"):
            return first
        # The second epoch, with every worker up: in the first, a process worker up before the others can run all
        # 64 tiny tasks before they are (a worker still starting is not waited for)
        assert testing.wait_ready(pipe, timeout=120)
        assert [s[0] for s in first] == list(range(64))
        return list(pipe)


@pytest.mark.parametrize("workers", [1, 8])
@pytest.mark.parametrize("backend", BACKENDS)
def test_map_function_sees_its_worker(backend, workers, request):
    seen = _seen(backend, workers, request)
    expected_count = 1 if backend == "serial" else workers  # serial runs every task in the consumer's thread
    assert [s[0] for s in seen] == list(range(64))
    assert {s[4] for s in seen} == {backend}
    assert {s[2] for s in seen} == {expected_count}
    ids = {s[1] for s in seen}
    assert ids <= set(range(expected_count))
    seeds = {}
    for _, worker, _, seed, _ in seen:
        seeds.setdefault(worker, set()).add(seed)
    assert all(len(s) == 1 for s in seeds.values())  # one seed per worker
    assert len({next(iter(s)) for s in seeds.values()}) == len(seeds)  # different between workers
    if backend in ("thread", "process") and workers == 8:
        assert len(ids) > 1  # the tasks were spread over the pool


def test_worker_seed_depends_on_the_pipeline_seed_and_worker_only():
    def seeds(seed):
        pipe = fl.from_sequence(range(16)).shuffle(seed=seed).map(_who, backend="thread", workers=2)
        with pipe:
            return {worker: s for _, worker, _, s, _ in pipe}

    first, again, other = seeds(1), seeds(1), seeds(2)
    assert all(first[w] == again[w] for w in first.keys() & again.keys())
    assert all(first[w] != other[w] for w in first.keys() & other.keys())


def test_worker_info_is_none_outside_workers():
    assert fl.get_worker_info() is None
    pipe = fl.from_sequence(range(8)).map(_who, backend="thread", workers=2)
    with pipe:
        for _ in pipe:
            assert fl.get_worker_info() is None  # the consumer's loop is no worker, between and after tasks
    assert fl.get_worker_info() is None


def test_source_getitem_sees_its_worker_too():
    class Source:
        def __len__(self):
            return 8

        def __getitem__(self, i):
            return fl.get_worker_info().num_workers

    pipe = fl.from_sequence(Source()).map(lambda n: n, backend="process", workers=2)
    with pipe:
        assert list(pipe) == [2] * 8
