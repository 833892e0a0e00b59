"""A CPU quota caps the cores the automatic choices count: a container limited to 4 CPUs on a 64-core host gets 4 workers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from cgroups import cgroup_limited, run_in

from feedline.testing import cpu_quota


def _tree(tmp_path, own: str, files: dict[str, str]):
    """A cgroup mount under ``tmp_path`` holding ``files`` (relative path -> text), and a /proc/self/cgroup file."""
    for rel, text in files.items():
        path = tmp_path / "cg" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "self").write_text(own)
    return str(tmp_path / "cg"), str(tmp_path / "self")


def test_a_cgroup_v2_quota_is_read_in_cpus_and_max_means_none(tmp_path):
    root, own = _tree(tmp_path, "0::/job\n", {"job/cpu.max": "250000 100000\n"})
    assert cpu_quota(root, own) == 2.5
    root, own = _tree(tmp_path, "0::/job\n", {"job/cpu.max": "max 100000\n"})
    assert cpu_quota(root, own) is None


def test_a_parent_cgroup_quota_limits_its_children(tmp_path):
    root, own = _tree(tmp_path, "0::/pod/container\n", {"pod/cpu.max": "400000 100000\n",
                                                          "pod/container/cpu.max": "max 100000\n"})
    assert cpu_quota(root, own) == 4.0


def test_a_container_that_sees_its_cgroup_at_the_mount_root_is_read_there(tmp_path):
    # with a cgroup namespace, /proc/self/cgroup may name a host path the container's mount does not hold
    root, own = _tree(tmp_path, "0::/kubepods/burstable/pod1/abc\n", {"cpu.max": "200000 100000\n"})
    assert cpu_quota(root, own) == 2.0


def test_a_cgroup_v1_quota_is_read_and_minus_one_means_none(tmp_path):
    root, own = _tree(tmp_path, "4:cpu,cpuacct:/docker/abc\n2:memory:/docker/abc\n",
                      {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000\n",
                       "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cpu_quota(root, own) == 1.5
    root, own = _tree(tmp_path, "4:cpu,cpuacct:/docker/abc\n", {"cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "-1\n",
                                                                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert cpu_quota(root, own) is None


def test_no_cgroup_files_mean_no_quota(tmp_path):
    assert cpu_quota(str(tmp_path / "absent"), str(tmp_path / "absent-too")) is None
    root, own = _tree(tmp_path, "0::/\n", {"cpu.max": "not a number\n"})
    assert cpu_quota(root, own) is None


_CHILD = """
import numpy as np, feedline as fl
from feedline._cores import usable_cores
with fl.from_arrays(np.arange(64)).map(lambda v: v + 1).batch(8) as pipe:
    out = [b.tolist() for b in pipe]
    stats = pipe.stats()
assert out == [list(range(k + 1, k + 9)) for k in range(0, 64, 8)]
print(usable_cores(), stats.backend, stats.workers, stats.decision, sep="|")
"""


def test_a_process_under_a_cpu_quota_counts_the_quota_not_the_cpus_it_sees():
    visible = len(os.sched_getaffinity(0))
    if visible < 2:
        pytest.skip("one CPU: a quota of one changes nothing")
    with cgroup_limited({"cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"}},
                        {"cpu.max": "100000 100000"}) as folder:  # 1 CPU's worth of time
        run = run_in(folder, _CHILD)
    assert run.returncode == 0, run.stderr
    cores, backend, workers, decision = run.stdout.strip().split("|")
    assert (cores, backend, workers) == ("1", "serial", "1"), run.stdout  # not one worker per visible CPU
    assert "one core available (a CPU quota of 1 of the" in decision, decision


def _child_with(args: list[str], env: dict) -> list[str]:
    run = subprocess.run([sys.executable, *args, "-c", _CHILD], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env})
    assert run.returncode == 0, run.stderr
    return run.stdout.strip().split("|")


def test_python_cpu_count_sets_the_cores_the_automatic_choice_counts():
    """A pod with a CPU request and no limit sees the whole node: ``PYTHON_CPU_COUNT`` (Python 3.13's name) says how many."""
    cores, backend, workers, decision = _child_with([], {"PYTHON_CPU_COUNT": "3"})
    assert (cores, workers) == ("3", "3"), decision
    assert f"one per available core: PYTHON_CPU_COUNT=3; this process sees {len(os.sched_getaffinity(0))} CPUs" in decision


def test_x_cpu_count_wins_over_the_environment_and_one_core_means_serial():
    cores, backend, workers, decision = _child_with(["-X", "cpu_count=1"], {"PYTHON_CPU_COUNT": "5"})
    assert (cores, backend, workers) == ("1", "serial", "1"), decision
    assert "one core available (-X cpu_count=1; this process sees" in decision


def test_python_cpu_count_default_and_python_e_count_the_cpus_as_usual():
    visible = str(len(os.sched_getaffinity(0)))
    assert _child_with([], {"PYTHON_CPU_COUNT": "default"})[0] == visible
    assert _child_with(["-E"], {"PYTHON_CPU_COUNT": "7"})[0] == visible  # -E: no PYTHON* variable is read


@pytest.mark.parametrize("value", ["abc", "0", "-2", "2.5"])
def test_a_python_cpu_count_that_is_not_a_count_is_a_clear_error_naming_it(monkeypatch, value):
    import numpy as np

    import feedline as fl

    monkeypatch.setenv("PYTHON_CPU_COUNT", value)
    with pytest.raises(fl.FeedlineError, match=rf"PYTHON_CPU_COUNT='{value}' is not a number of CPUs: set it to a whole number"):
        with fl.from_arrays(np.arange(8)).map(lambda v: v + 1).batch(4) as pipe:
            list(pipe)
