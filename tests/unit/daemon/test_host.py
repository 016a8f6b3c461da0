"""What the host gives the daemon: the CPUs it may use (affinity, cgroup quotas of v2 and
v1, read from real files laid out as the kernel does), and the node defaults chosen from
them; `stoker node` under `taskset` sees the restricted mask."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from daemon.config import NodeConfig
from daemon.host import CpuLimit, cgroup_quota, cpu_limit, plan_node, simulated_node, slot_cpus


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_cgroup_v2_quota_is_the_tightest_on_the_way_up(tmp_path: Path) -> None:
    root = tmp_path / "sys/fs/cgroup"
    write(tmp_path / "cgroup", "0::/user.slice/job.scope\n")
    write(root / "cpu.max", "max 100000\n")
    write(root / "user.slice/cpu.max", "250000 100000\n")  # 2.5 CPUs for the slice
    write(root / "user.slice/job.scope/cpu.max", "max 100000\n")
    assert cgroup_quota(tmp_path / "cgroup", root) == 2.5
    write(root / "user.slice/job.scope/cpu.max", "50000 100000\n")
    assert cgroup_quota(tmp_path / "cgroup", root) == 0.5
    limit = cpu_limit(proc_cgroup=tmp_path / "cgroup", cgroup_root=root)
    assert limit.usable == 1, "half a CPU still runs one process"
    assert limit.cpus == 0.5, "the time it may use, unrounded"
    assert limit.quota == 0.5 and limit.source == "cgroup CPU quota 0.5"


def test_a_cgroup_v1_quota_is_read_from_the_cpu_hierarchy(tmp_path: Path) -> None:
    root = tmp_path / "sys/fs/cgroup"
    write(tmp_path / "cgroup", "5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    group = root / "cpu,cpuacct/docker/abc"
    write(group / "cpu.cfs_quota_us", "150000\n")
    write(group / "cpu.cfs_period_us", "100000\n")
    assert cgroup_quota(tmp_path / "cgroup", root) == 1.5
    write(group / "cpu.cfs_quota_us", "-1\n")  # no limit
    assert cgroup_quota(tmp_path / "cgroup", root) is None


def test_no_cgroup_to_read_is_no_limit(tmp_path: Path) -> None:
    assert cgroup_quota(tmp_path / "missing", tmp_path) is None
    write(tmp_path / "cgroup", "0::/\n")
    assert cgroup_quota(tmp_path / "cgroup", tmp_path / "empty") is None
    limit = cpu_limit(proc_cgroup=tmp_path / "missing")
    assert limit.usable == len(os.sched_getaffinity(0)) and limit.quota is None
    assert limit.cpus == limit.usable


def cpus(usable: int) -> CpuLimit:
    return CpuLimit(usable=usable, affinity=usable, online=usable, quota=None)


def test_defaults_come_from_the_host_and_settings_given_win() -> None:
    gpu_node = plan_node(NodeConfig(), cpus(18), detected_gpus=4)
    assert (gpu_node.slots, gpu_node.cpu_workers, gpu_node.threads_per_slot) == (4, 14, 1)
    assert gpu_node.chosen == ("gpus", "cpu_workers")
    # A small host still shares: two jobs at once, with workers to give up to each other.
    small = plan_node(NodeConfig(), cpus(2), detected_gpus=0)
    assert (small.slots, small.cpu_workers, small.threads_per_slot) == (2, 4, 1)
    assert not small.uses_gpus and small.chosen == ("gpus", "cpu_slots", "cpu_workers")
    cpu_node = plan_node(NodeConfig(), cpus(16), detected_gpus=0)
    assert (cpu_node.slots, cpu_node.cpu_workers, cpu_node.threads_per_slot) == (4, 8, 2)
    given = plan_node(NodeConfig(gpus=0, cpu_slots=3, cpu_workers=7), cpus(2), detected_gpus=8)
    assert (given.gpus, given.slots, given.cpu_workers, given.chosen) == (0, 3, 7, ())
    crowded = plan_node(NodeConfig(), cpus(4), detected_gpus=8)
    assert crowded.cpu_workers == 1, "never fewer than one loader process"


@pytest.mark.skipif(shutil.which("taskset") is None, reason="no taskset (util-linux)")
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to restrict to 1")
def test_stoker_node_under_taskset_sees_the_restricted_mask(tmp_path: Path) -> None:
    one = min(os.sched_getaffinity(0))
    run = subprocess.run(
        ["taskset", "-c", str(one), sys.executable, "-m", "cli", "node", "--json"],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120,
        env=os.environ | {"PYTHONPATH": str(Path(__file__).parents[3])},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout)
    assert found["cpus_usable"] == 1 and found["cpu_affinity"] == 1
    assert found["cpus_online"] == os.cpu_count()
    assert found["cpus_limited_by"].startswith("affinity mask (1 of")
    # One CPU: one loader beside a GPU's thread; without GPUs, the small host's floor.
    assert found["cpu_workers"] == (1 if found["gpus"] else 2 * found["slots"])


@pytest.mark.parametrize(("slots", "said"), [(None, "the host"), ("2", "the settings")])
def test_stoker_node_says_where_the_slots_came_from(
    tmp_path: Path, slots: str | None, said: str
) -> None:
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[3])}
    env.pop("STOKER_NODE__CPU_SLOTS", None)
    if slots is not None:
        env["STOKER_NODE__CPU_SLOTS"] = slots
    run = subprocess.run(
        [sys.executable, "-m", "cli", "node"],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (line,) = [line for line in run.stdout.splitlines() if line.startswith("slots ")]
    assert line.split()[2:4] == said.split(), line
    if slots is not None:  # a variable set it: not said to be the config file's
        assert "(config file, STOKER_ variable)" in line, line


def test_cpu_sets_share_the_allowed_cpus_among_the_slots() -> None:
    assert slot_cpus([3, 0, 1, 2], 2) == ((0, 1), (2, 3))
    assert slot_cpus(range(8), 3) == ((0, 1, 2), (3, 4), (5, 6, 7))  # as even as they divide
    assert slot_cpus([5], 2) == ((5,), (5,)), "fewer CPUs than slots: they share"
    eight = CpuLimit(usable=8, affinity=8, online=8, quota=None)
    pinned = plan_node(NodeConfig(cpu_slots=4, cpu_sets=True), eight, 0, tuple(range(8)))
    assert pinned.cpu_sets == ((0, 1), (2, 3), (4, 5), (6, 7))
    assert pinned.job_cpus((1, 3), occupied=(0, 1, 2, 3)) == (2, 3, 6, 7), "a full node"
    assert pinned.job_cpus((1,), occupied=()) == tuple(range(8)), "alone: every CPU"
    assert pinned.job_cpus((2,), occupied=(0, 2)) == (4, 5, 6, 7), "beside one: half"
    assert pinned.threads_per_slot == 1, "4 slots, 4 training CPUs: one thread each"
    two = plan_node(NodeConfig(cpu_slots=1, cpu_sets=True), eight, 0, (0, 1))
    assert two.threads_per_slot == 2, "at most its slot's 2 CPUs"
    loose = plan_node(NodeConfig(cpu_slots=4), eight, 0, tuple(range(8)))
    assert loose.cpu_sets == () and loose.job_cpus((0,), (0, 1)) == (), "off by default"


def test_cpu_sets_without_taskset_is_refused_naming_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no taskset on it
    with pytest.raises(ValueError, match="cpu_sets") as error:
        NodeConfig(cpu_sets=True)
    assert "util-linux" in str(error.value)
    assert NodeConfig(cpu_sets=False).cpu_sets is False


def test_stoker_node_warns_of_loader_processes_far_past_the_cpus(tmp_path: Path) -> None:
    env = os.environ | {"PYTHONPATH": str(Path(__file__).parents[3])}
    env["STOKER_NODE__CPU_WORKERS"] = "500"
    run = subprocess.run(
        [sys.executable, "-m", "cli", "node"],
        capture_output=True, text=True, check=False, cwd=tmp_path, timeout=120, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "\nwarning: cpu_workers 500 on " in run.stdout, run.stdout


def test_a_simulated_daemon_simulates_the_stated_node_else_the_papers() -> None:
    papers = simulated_node(NodeConfig())
    assert (papers.gpus, papers.cpu_workers) == (4, 18)  # never this host's CPUs
    stated = simulated_node(NodeConfig(gpus=8, cpu_workers=40))
    assert (stated.gpus, stated.cpu_workers) == (8, 40)
    slots = simulated_node(NodeConfig(cpu_slots=3))  # a node without GPUs, as stated
    assert (slots.gpus, slots.cpu_slots, slots.cpu_workers) == (0, 3, 18)
