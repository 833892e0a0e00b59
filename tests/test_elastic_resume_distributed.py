"""Elastic resume under a real torch.distributed job (gloo): 2 ranks, then 3, then 4, within one epoch.

By hand (``it.state()`` gathered and combined) and through
``torch.distributed.checkpoint`` (``pipe.torch()``'s loader in the state
dict, saved by 2 ranks and loaded by 3, then by 4).
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest

distributed = pytest.importorskip("torch.distributed")

if not distributed.is_available() or not distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

N, B = 240, 4

RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch.distributed as dist
    import feedline as fl

    state_in, out, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    pipe = fl.from_arrays(np.arange(%(n)d)).shuffle(seed=7).shard().map(lambda x, rng: [int(x), int(rng.integers(1 << 30))],
                                                                      backend="thread", workers=2).batch(%(b)d)
    with pipe:
        if state_in == "-":
            it = iter(pipe)
        else:
            with open(state_in) as f:
                it = pipe.resume(json.load(f))
        got = []
        for batch in it:
            got += [list(map(int, row)) for row in zip(*batch)]
            if batches and len(got) == batches * %(b)d:
                break
        states = [None] * ranks
        dist.all_gather_object(states, it.state())
    if rank == 0:
        with open(out + ".state", "w") as f:
            json.dump(fl.combine_states(states), f)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(got, f)
    dist.destroy_process_group()
""") % {"n": N, "b": B}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(tmp_path, script, ranks: int, state_in: str, out: str, batches: int | str) -> list:
    """Run ``script`` on ``ranks`` gloo ranks with arguments ``state_in out batches``; each rank's JSON output."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE=str(ranks))
    procs = [subprocess.Popen([sys.executable, str(script), state_in, out, str(batches)], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(ranks)]
    for r, p in enumerate(procs):
        output, _ = p.communicate(timeout=300)
        assert p.returncode == 0, f"rank {r} of {ranks} failed:\n{output}"
    got = []
    for r in range(ranks):
        with open(f"{out}.{r}") as f:
            got.append(json.load(f))
    return got


def test_a_gloo_job_restarted_on_three_then_four_ranks_delivers_its_epoch_once(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    first, second, third = restarted(tmp_path, script, ".state")
    expected = check_segments(first, second, third)
    assert sorted(tuple(row) for seg in (first, second, third) for got in seg for row in got) == sorted(map(tuple, expected))


def restarted(tmp_path, script, saved: str) -> tuple:
    """Each rank's samples of a job run on 2 ranks for 6 batches, restarted on 3 for 4, then on 4 to the end."""
    first = run_ranks(tmp_path, script, 2, "-", str(tmp_path / "a"), 6)
    second = run_ranks(tmp_path, script, 3, str(tmp_path / f"a{saved}"), str(tmp_path / "b"), 4)
    third = run_ranks(tmp_path, script, 4, str(tmp_path / f"b{saved}"), str(tmp_path / "c"), 0)
    return first, second, third


def check_segments(*segments) -> list:
    """Check that each restart's ranks got their shares of what was left, as an uninterrupted run's bytes; that run."""
    import feedline as fl

    fresh = fl.from_arrays(np.arange(N)).shuffle(seed=7).map(lambda x, rng: [int(x), int(rng.integers(1 << 30))],
                                                               backend="serial").batch(B)
    expected = [list(map(int, row)) for batch in fresh for row in zip(*batch)]  # the uninterrupted run, in global order
    left = list(expected)
    for segment in segments:
        ranks = len(segment)
        for r, got in enumerate(segment):
            assert got == left[r::ranks][: len(got)], f"rank {r} of {ranks}"  # same samples, same bytes, same order
        taken = {tuple(row) for got in segment for row in got}
        left = [row for row in left if tuple(row) not in taken]
    assert left == []
    return expected


DCP_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import feedline as fl

    ckpt_in, out, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    pipe = fl.from_arrays(np.arange(%(n)d)).shuffle(seed=7).shard().map(lambda x, rng: [int(x), int(rng.integers(1 << 30))],
                                                                      backend=("thread", "process", "serial")[ranks %% 3],
                                                                      workers=2).batch(%(b)d)
    with pipe:
        loader = pipe.torch()
        if ckpt_in != "-":
            dcp.load({"loader": loader}, checkpoint_id=ckpt_in)  # saved on another number of ranks
        got = []
        it = iter(loader)
        for batch in it:
            got += [list(map(int, row)) for row in zip(*batch)]
            if batches and len(got) == batches * %(b)d:
                break
        dcp.save({"loader": loader}, checkpoint_id=out + ".ckpt")  # every rank in lock step: one rank's position is enough
        it.close()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(got, f)
    dist.destroy_process_group()
""") % {"n": N, "b": B}


def test_a_distributed_checkpoint_of_two_ranks_loads_on_three_then_four(tmp_path):
    pytest.importorskip("torch.distributed.checkpoint")
    script = tmp_path / "dcp_rank.py"
    script.write_text(DCP_SCRIPT)
    first, second, third = restarted(tmp_path, script, ".ckpt")
    check_segments(first, second, third)
    assert [len(got) for got in third] == [36] * 4  # 144 left after 2 x 6 and 3 x 4 batches of 4: 36 a rank


PER_RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    import feedline as fl

    ckpt_in, out, key = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    pipe = fl.from_arrays(np.arange(%(n)d)).shard().filter(lambda v: v %% 7 != 0).batch(%(b)d)
    loader = pipe.torch(even_batches=False)
    name = key.format(rank=rank)
    got, error = [], None
    if ckpt_in == "-":
        it = iter(loader)
        for _ in range(3 + rank):  # the ranks stand at different batches
            got += next(it).tolist()
        dcp.save({name: loader}, checkpoint_id=out + ".ckpt")
        it.close()
    else:
        try:
            dcp.load({name: loader}, checkpoint_id=ckpt_in)
            got = [int(v) for batch in loader for v in batch.tolist()]
        except ValueError as e:
            error = str(e)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"got": got, "error": error}, f)
    dist.destroy_process_group()
""") % {"n": N, "b": B}


@pytest.mark.parametrize("key", ["loader_{rank}", "loader"])
def test_a_distributed_checkpoint_of_filtered_ranks_resumes_each_rank_from_its_own_entry(tmp_path, key):
    pytest.importorskip("torch.distributed.checkpoint")
    script = tmp_path / "per_rank.py"
    script.write_text(PER_RANK_SCRIPT)
    kept = [v for v in range(N) if v % 7]
    first = run_ranks(tmp_path, script, 2, "-", str(tmp_path / "a"), key)
    second = run_ranks(tmp_path, script, 2, str(tmp_path / "a.ckpt"), str(tmp_path / "b"), key)
    if key == "loader":  # one entry for both ranks: DCP keeps one copy, so one rank gets the other's, which is refused
        assert all("loader_{rank}" in s["error"] for s in second if s["error"]) and any(s["error"] for s in second)
        return
    for r in range(2):
        assert first[r]["got"] + second[r]["got"] == [v for v in kept if v % 2 == r]
