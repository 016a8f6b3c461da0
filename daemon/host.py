"""What this host gives the daemon, detected, and the node's defaults chosen from it.

CPUs: the ones this process may run on (`os.sched_getaffinity`, so `taskset`, a CPU set or
a container's cpuset count), capped by a cgroup CPU quota (`cpu.max` in cgroup v2,
`cpu.cfs_quota_us` in v1) rounded down: a container given 2.5 CPUs of a 64-core host can
keep 2 busy, not 64. GPUs: NVML (daemon/gpus.py). What a setting leaves unset comes from
these (`plan_node`), and `stoker node` prints both.
"""

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from daemon.config import NodeConfig
from daemon.gpus import detect_gpus

CGROUP_ROOT = Path("/sys/fs/cgroup")
# A node without GPUs runs at least this many jobs at once, however few its CPUs: one job
# at a time would leave nothing to share (a 2-core host gave one slot and one loader).
MIN_CPU_SLOTS = 2


@dataclass(frozen=True)
class CpuLimit:
    """The CPUs this process may keep busy, and where each bound came from."""

    usable: int  # min(affinity, quota), at least 1
    affinity: int  # CPUs in this process's affinity mask
    online: int  # CPUs the kernel has online
    quota: float | None  # CPUs' worth of time the cgroup allows; None: no limit

    @property
    def cpus(self) -> float:
        """The CPUs' worth of time this process may keep busy, unrounded (`usable` rounds a
        quota of 2.5 down to 2)."""
        return float(self.affinity) if self.quota is None else min(self.affinity, self.quota)

    @property
    def source(self) -> str:
        if self.quota is not None and math.floor(self.quota) < self.affinity:
            return f"cgroup CPU quota {self.quota:g}"
        if self.affinity < self.online:
            return f"affinity mask ({self.affinity} of {self.online} online)"
        return "all online CPUs"


def cpu_limit(
    *, proc_cgroup: Path = Path("/proc/self/cgroup"), cgroup_root: Path = CGROUP_ROOT
) -> CpuLimit:
    """This process's usable CPUs (module docstring)."""
    affinity = len(os.sched_getaffinity(0))
    quota = cgroup_quota(proc_cgroup, cgroup_root)
    usable = min(affinity, math.floor(quota)) if quota is not None else affinity
    return CpuLimit(max(1, usable), affinity, os.cpu_count() or affinity, quota)


def cgroup_quota(proc_cgroup: Path, cgroup_root: Path) -> float | None:
    """The tightest CPU quota on this process's cgroup and its ancestors, in CPUs; None
    when there is none (or no cgroup file system to read)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    quotas = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2: cpu.max in the group and each ancestor
            quotas += [_v2_quota(group) for group in _ancestry(cgroup_root, path)]
        elif "cpu" in controllers.split(","):  # v1: the cpu controller's own hierarchy
            for mount in (cgroup_root / controllers, cgroup_root / "cpu"):
                if mount.is_dir():
                    quotas += [_v1_quota(group) for group in _ancestry(mount, path)]
                    break
    found = [quota for quota in quotas if quota is not None]
    return min(found) if found else None


def _ancestry(mount: Path, path: str) -> list[Path]:
    """The group at `path` under `mount` and each of its parents up to the mount."""
    group = mount / path.lstrip("/")
    return [group, *[parent for parent in group.parents if parent.is_relative_to(mount)]]


def _v2_quota(group: Path) -> float | None:
    try:
        quota, period = (group / "cpu.max").read_text().split()
    except (OSError, ValueError):
        return None
    return None if quota == "max" else int(quota) / int(period)


def _v1_quota(group: Path) -> float | None:
    try:
        quota = int((group / "cpu.cfs_quota_us").read_text())
        period = int((group / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period


def slot_cpus(allowed: Sequence[int], slots: int) -> tuple[tuple[int, ...], ...]:
    """Each slot's share of the `allowed` CPUs for `node.cpu_sets`: contiguous groups in
    CPU order, as even as they divide (with fewer CPUs than slots, slots share them in
    turn)."""
    cpus = sorted(allowed)
    if len(cpus) < slots:
        return tuple((cpus[slot % len(cpus)],) for slot in range(slots))
    bounds = [round(slot * len(cpus) / slots) for slot in range(slots + 1)]
    return tuple(tuple(cpus[bounds[slot] : bounds[slot + 1]]) for slot in range(slots))


@dataclass(frozen=True)
class NodeResources:
    """The node as the daemon runs it: the settings given, and the rest chosen from the
    host. `threads_per_slot` is each training process's intra-op threads."""

    gpus: int
    slots: int  # GPUs, or CPU training slots on a node without
    cpu_workers: int  # loader processes the planner shares out (the paper's C)
    threads_per_slot: int
    cpus: CpuLimit
    chosen: tuple[str, ...]  # the settings that came from the host, not from the config
    # With `node.cpu_sets`, each slot's CPUs while every slot holds a job (`slot_cpus`);
    # empty: jobs are not pinned.
    cpu_sets: tuple[tuple[int, ...], ...] = ()

    def job_cpus(self, slots: Sequence[int], occupied: Sequence[int]) -> tuple[int, ...]:
        """The CPUs a job on `slots` is pinned to while the `occupied` slots hold jobs: the
        node's CPUs split among the occupied slots only, so a job alone has them all and
        jobs side by side stop sharing cores; () when jobs are not pinned."""
        if not self.cpu_sets:
            return ()
        busy = sorted(set(occupied) | set(slots))
        allowed = sorted({cpu for group in self.cpu_sets for cpu in group})
        groups = dict(zip(busy, slot_cpus(allowed, len(busy)), strict=True))
        return tuple(sorted({cpu for slot in slots for cpu in groups[slot]}))

    @property
    def uses_gpus(self) -> bool:
        return self.gpus > 0


# The paper's testbed (A-Dloader Sec. IV-A; configs/workloads/paper-dynamic.toml): what a
# simulated daemon simulates where its config does not say.
PAPER_GPUS = 4
PAPER_CPU_WORKERS = 18


def simulated_node(node: NodeConfig) -> NodeConfig:
    """The node a daemon of simulated agents simulates: what `node` states (`cpu_slots`
    given: a node without GPUs), the paper's testbed for the rest; never this host's CPUs
    or GPUs, which simulated agents do not use."""
    gpus = node.gpus
    if gpus is None:
        gpus = 0 if node.cpu_slots is not None else PAPER_GPUS
    return node.model_copy(
        update={
            "gpus": gpus,
            "cpu_workers": PAPER_CPU_WORKERS if node.cpu_workers is None else node.cpu_workers,
        }
    )


def detect_node(node: NodeConfig) -> NodeResources:
    """The node on this host: `plan_node` with this process's CPUs, and NVML asked for the
    GPUs only when `node.gpus` is unset. `stoker serve` and `stoker node` both use it."""
    gpus = detect_gpus() if node.gpus is None else node.gpus
    return plan_node(node, cpu_limit(), gpus, tuple(os.sched_getaffinity(0)))


def plan_node(
    node: NodeConfig, cpus: CpuLimit, detected_gpus: int, allowed: Sequence[int] = ()
) -> NodeResources:
    """The node's resources: what `node` sets, and for what it leaves unset, defaults
    from the host (`allowed`: the CPUs this process may run on, which `node.cpu_sets`
    shares out among the slots).

    - With GPUs, each rank's host thread needs a CPU: the loaders get the rest, at least
      one. Training threads: one per rank (the GPU computes).
    - Without, training runs on the CPUs: a slot for every 4 CPUs, half the CPUs for
      training threads and the other half for loaders; but, on a small host, at least
      `MIN_CPU_SLOTS` slots and twice as many loader processes as slots: jobs share the
      node, and each has workers to give up when another arrives (loader processes spend
      much of their time waiting; the contention curve the core learns prices the rest).
    """
    chosen = []
    gpus = node.gpus if node.gpus is not None else detected_gpus
    if node.gpus is None:
        chosen.append("gpus")
    if gpus > 0:
        slots = gpus
        training = gpus
    else:
        slots = (
            node.cpu_slots if node.cpu_slots is not None else max(MIN_CPU_SLOTS, cpus.usable // 4)
        )
        if node.cpu_slots is None:
            chosen.append("cpu_slots")
        training = max(slots, cpus.usable // 2)
    workers = node.cpu_workers
    if workers is None:
        spare = cpus.usable - training
        workers = max(1, spare) if gpus > 0 else max(2 * slots, spare)
        chosen.append("cpu_workers")
    threads = 1 if gpus > 0 else max(1, training // slots)
    sets = slot_cpus(allowed, slots) if node.cpu_sets and allowed else ()
    if sets:  # a training process's threads never outnumber its slot's CPUs
        threads = max(1, min(threads, *(len(group) for group in sets)))
    return NodeResources(gpus, slots, workers, threads, cpus, tuple(chosen), sets)


def host_summary(node: NodeResources) -> dict[str, Any]:
    """What was detected and what was chosen from it, as `/v1/node` and `stoker node`
    show it."""
    cpus = node.cpus
    return {
        "cpus_usable": cpus.usable,
        "cpus_online": cpus.online,
        "cpu_affinity": cpus.affinity,
        "cpu_quota": cpus.quota,
        "cpus_limited_by": cpus.source,
        "gpus": node.gpus,
        "slots": node.slots,
        "cpu_workers": node.cpu_workers,
        "threads_per_slot": node.threads_per_slot,
        "cpu_sets": [list(group) for group in node.cpu_sets],
        "chosen_from_host": list(node.chosen),
    }
