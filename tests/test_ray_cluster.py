"""The Ray backend on a simulated multi-node cluster (`ray.cluster_utils.Cluster`).

One cluster serves the module: a head node (1 CPU; this test process is
its driver, the "training machine") and two worker nodes (1 CPU and one
``pool`` resource each, the "CPU pool"), each a real raylet with its own
object store on this machine. Tests that add or remove nodes put the
cluster back as they found it. The health check is shortened so that a
removed node is declared dead within ~2 s instead of ~30 s.

What a single node cannot show: actors on every node, a whole node lost
mid-epoch (its actors and its object-store copies of finished batches
gone), a node that joins mid-run, a cluster with no room, and trainers
fed by actors on other nodes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from conftest import snapshot, wait_for

import feedline as fl
from feedline import WorkerError, testing

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402  (after the importorskip)

pytestmark = pytest.mark.timeout(120)

STORE = 100 << 20  # bytes of object store per node: small, the tests move little
FAST_FAILURE_DETECTION = {"health_check_period_ms": 500, "health_check_failure_threshold": 4, "health_check_initial_delay_ms": 0}


# --------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def cluster():
    """Head (1 CPU) + two worker nodes (1 CPU, ``pool``: 1); this process is the head's driver."""
    if ray.is_initialized():
        ray.shutdown()
    sim = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": STORE, "include_dashboard": False, "_system_config": FAST_FAILURE_DETECTION},
    )
    for _ in range(2):
        sim.add_node(num_cpus=1, resources={"pool": 1}, object_store_memory=STORE)
    ray.init(address=sim.address, log_to_driver=False)
    sim.wait_for_nodes()
    yield sim
    ray.shutdown()
    sim.shutdown()


def feedline_actors() -> list[str]:
    return [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith("feedline-")]


@pytest.fixture
def on_cluster(cluster, no_leaks):
    """The test runs on the module's cluster, finds it whole and idle, and leaves no feedline actor behind."""
    assert wait_for(lambda: ray.available_resources().get("CPU", 0) == 3, 30), "the cluster is not idle"
    yield cluster
    assert wait_for(lambda: not feedline_actors(), 15), f"feedline actors left alive: {feedline_actors()}"


def add_pool_node(sim):
    node = sim.add_node(num_cpus=1, resources={"pool": 1}, object_store_memory=STORE)
    sim.wait_for_nodes()
    assert wait_for(lambda: ray.available_resources().get("CPU", 0) >= 1, 30), "the new node's CPU never showed up"
    return node


def lose_node(sim, node) -> None:
    """Like a machine going away: every process of the node (its actors, its raylet and object store) dies at once.

    ``remove_node`` alone kills the raylet and leaves its worker processes
    running for a while, still answering calls; a lost machine does not.
    """
    raylet = node.all_processes["raylet"][0].process.pid
    workers = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent_of(pid) == raylet]
    for pid in workers:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    sim.remove_node(node, allow_graceful=False)


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError):
        return None


def alive_nodes() -> set[str]:
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


# --------------------------------------------------------------- helpers
def slow_augment(sample, rng):
    """Depends on the index and the per-sample rng (any mix-up changes the bytes); 3 ms keeps actors busy.

    16 KiB a sample: a batch of 8 (128 KiB) is over Ray's 100 KiB limit for
    inline results, so batches live in the object stores of the nodes.
    """
    time.sleep(0.003)
    return np.int64(sample), rng.standard_normal(2048)


def pipeline(backend, *, workers=None, n=240, batch=8):
    return fl.from_arrays(np.arange(n, dtype=np.int64)).shuffle(seed=11).map(slow_augment, backend=backend, workers=workers).batch(batch)


def serial_epochs(count, **kwargs):
    pipe = pipeline("serial", **kwargs)
    with pipe:
        return [[snapshot(b) for b in pipe] for _ in range(count)]


def indices(snapshots) -> list[int]:
    return [int(v) for s in snapshots for v in np.frombuffer(s[0][2], dtype=s[0][0])]


# ------------------------------------------------------------- placement
def test_actors_are_placed_on_every_node_and_every_actor_works(on_cluster):
    expected = serial_epochs(1)[0]
    pipe = pipeline("ray")
    with pipe:
        it = iter(pipe)
        assert testing.wait_ready(pipe, 60), "the actors did not start"
        got = [snapshot(b) for b in it]
        nodes = testing.executor(pipe).actor_nodes()
        stats = it.stats()
    assert got == expected, "batches differ from serial on the cluster"
    assert len(nodes) == 3 and set(nodes.values()) == alive_nodes(), "one actor per CPU: one on every node"
    assert set(stats.worker_windows) == set(nodes), "every actor, on every node, ran tasks"


# ------------------------------------------------------------- node loss
@pytest.mark.parametrize("run", range(3))
def test_losing_a_node_mid_epoch_keeps_the_epoch_exact(on_cluster, run):
    """A whole node goes (raylet, its actor, its store's finished batches); the epoch is still serial's, every sample once."""
    expected = serial_epochs(1)[0]
    victim = add_pool_node(on_cluster)
    pipe = pipeline("ray")  # one actor per CPU: 4, one on the victim
    try:
        with pipe:
            it = iter(pipe)
            assert testing.wait_ready(pipe, 60), "the actors did not start"
            assert victim.node_id in testing.executor(pipe).actor_nodes().values()
            got = [snapshot(next(it)) for _ in range(4 + run)]  # lose it at a different point each run
            lose_node(on_cluster, victim)
            victim = None
            got += [snapshot(b) for b in it]
            restarts = it.stats().worker_restarts
    finally:
        if victim is not None:
            on_cluster.remove_node(victim)
    assert sorted(indices(got)) == list(range(240)), "not every sample exactly once after losing a node"
    assert got == expected, "batches differ from serial after losing a node"
    assert restarts >= 1, "the lost node's actor was never noticed"


# ------------------------------------------------------------- node added
def test_a_node_that_joins_gets_an_actor_that_works_from_the_next_epoch(on_cluster):
    expected = serial_epochs(2)
    pipe = pipeline("ray")
    joined = None
    try:
        with pipe:
            it = iter(pipe)
            assert testing.wait_ready(pipe, 60)
            assert [snapshot(b) for b in it] == expected[0]
            assert len(testing.executor(pipe).actor_nodes()) == 3
            joined = add_pool_node(on_cluster)
            it = iter(pipe)
            got = [snapshot(next(it))]
            assert testing.wait_ready(pipe, 60), "the actor for the new node did not start"
            got += [snapshot(b) for b in it]
            nodes = testing.executor(pipe).actor_nodes()
            used = set(it.stats().worker_windows)
    finally:
        if joined is not None:
            on_cluster.remove_node(joined)
    assert got == expected[1], "the epoch with a new actor differs from serial"
    assert joined.node_id in nodes.values(), "no actor was started on the node that joined"
    newcomer = next(position for position, node in nodes.items() if node == joined.node_id)
    assert newcomer in used, "the new node's actor got no task"


# ----------------------------------------------------------------- no room
def run_python(code: str, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


@pytest.mark.timeout(60)  # before: 120 s of waiting
def test_pipeline_on_a_cluster_another_process_fills_fails_fast_naming_the_holder(on_cluster):
    holder = run_python("""
        import sys, numpy as np, ray, feedline as fl
        from feedline import testing
        ray.init(address=sys.argv[1], log_to_driver=False)
        pipe = fl.from_arrays(np.arange(100)).map(lambda x: x, backend="ray").batch(10)
        next(iter(pipe))
        testing.wait_ready(pipe, 60)
        print("HOLDING", flush=True)
        sys.stdin.read()  # until the test closes our stdin
        pipe.close()
    """, on_cluster.address)
    try:
        assert holder.stdout.readline().strip() == "HOLDING", holder.stderr.read()[-3000:]
        pipe = pipeline("ray", workers=2)
        with pytest.raises(WorkerError, match="no room") as info:
            iter(pipe)
        message = str(info.value)
        assert "each asks for CPU=1" in message and "CPU: 3 in all, 0 free" in message, message
        assert f"feedline actors of other processes (3 of process {holder.pid})" in message, message
        assert testing.runtime(pipe) is None
    finally:
        holder.communicate("", timeout=60)
    assert holder.returncode == 0


# --------------------------------------------------- trainers fed by a pool
TRAINER = '''
"""A training process (one rank of two): its pipeline's actors run on the CPU pool's nodes."""
import hashlib, json, sys
import numpy as np
import feedline as fl


def augment(sample, rng):
    return np.int64(sample), (rng.standard_normal((16, 16)) * 100).astype(np.float32)


def build(rank, backend):
    where = fl.Ray(resources={"pool": 1}) if backend == "ray" else backend
    return fl.from_arrays(np.arange(202, dtype=np.int64)).shuffle(seed=7).shard(rank, 2).map(augment, backend=where, workers=1).batch(8)


def digest(batch):
    return [[int(i) for i in batch[0]], hashlib.sha256(batch[0].tobytes() + batch[1].tobytes()).hexdigest()]


if __name__ == "__main__":
    import ray
    from feedline import testing

    address, rank, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    ray.init(address=address, log_to_driver=False)
    report = {"pid_node": ray.get_runtime_context().get_node_id()}
    pipe = build(rank, "ray")
    with pipe:
        it = iter(pipe)
        report["epoch0"] = [digest(next(it)) for _ in range(3)]
        state = it.state()  # a checkpoint; the trainer "restarts" below
        report["nodes"] = sorted(testing.executor(pipe).actor_nodes().values())
    pipe = build(rank, "ray")
    with pipe:
        report["epoch0"] += [digest(b) for b in pipe.resume(state)]
        report["epoch1"] = [digest(b) for b in pipe]
    with open(out, "w") as f:
        json.dump(report, f)
'''


@pytest.mark.timeout(180)
def test_two_trainer_ranks_fed_by_actors_on_the_cpu_pool_get_disjoint_exact_shards_and_resume(on_cluster, tmp_path):
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    trainers = [
        subprocess.Popen([sys.executable, str(script), on_cluster.address, str(rank), str(tmp_path / f"rank{rank}.json")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for rank in range(2)
    ]
    for trainer in trainers:
        _, err = trainer.communicate(timeout=150)
        assert trainer.returncode == 0, err[-3000:]
    spec = importlib.util.spec_from_file_location("trainer", script)
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    pool = {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("pool")}
    shares = []
    for rank in range(2):
        report = json.loads((tmp_path / f"rank{rank}.json").read_text())
        reference = trainer.build(rank, "serial")
        with reference:
            expected = [[trainer.digest(b) for b in reference] for _ in range(2)]
        assert report["epoch0"] == expected[0], f"rank {rank}: epoch 0 (checkpointed, resumed by a new pipeline) differs from serial"
        assert report["epoch1"] == expected[1], f"rank {rank}: epoch 1 differs from serial"
        assert set(report["nodes"]) <= pool and report["pid_node"] not in pool, "the actors should run on the pool, not the trainer's node"
        shares.append([i for batch, _ in report["epoch0"] for i in batch])
    assert not set(shares[0]) & set(shares[1]), "the ranks share samples"
    assert sorted(shares[0] + shares[1]) == list(range(202)), "the ranks' shards do not cover the epoch"
