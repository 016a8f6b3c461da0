"""The reallocation gate: is changing a running job worth pausing it?

Pausing costs a job its measured pause cost (checkpoint, worker teardown and start-up). A
change pays when the time it saves over the job's remaining work beats that cost by the
hysteresis margin. When the changes that pay and the jobs kept as they are do not fit the
node together, processes are freed where that costs least per process: a kept job is made to
shrink after all (it loses its pause cost and the slowdown: FORCED), or a change that grows
a job is held back (it forgoes its gain over its pause cost: HELD). So an arrival is always
served (a new job's share is not the gate's), while one running job's gain never pays for
pausing others at a greater loss: noise in a learned curve cannot pause a static workload.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from allocator import AllocationPlan, JobSpec
from allocator.throughput import job_samples_per_s
from scheduler.commands import GateChoice, GateVerdict


@dataclass(frozen=True)
class RunningJob:
    """What the gate needs to know of a running job the plan would change."""

    spec: JobSpec
    current_workers_per_gpu: int
    remaining_samples: float
    pause_cost_s: float


@dataclass(frozen=True)
class GateDecision:
    """Which changed jobs keep their allocation, and why each changed job went the way it did."""

    kept: frozenset[str]
    verdicts: Mapping[str, GateVerdict]


def decide(
    plan: AllocationPlan, changed: Sequence[RunningJob], capacity: int, hysteresis: float
) -> GateDecision:
    """Keep every change that does not pay; then, while over capacity, force a kept shrink or
    hold back a growth, whichever frees processes at the least cost per process."""
    verdicts: dict[str, GateVerdict] = {}
    kept: set[str] = set()
    for job in changed:
        planned = plan.allocations[job.spec.id]
        saved_s = _time_saved_s(job, planned.workers_per_gpu, plan)
        needed_s = job.pause_cost_s * (1.0 + hysteresis)
        pays = saved_s > needed_s
        verdicts[job.spec.id] = GateVerdict(
            GateChoice.CHANGE if pays else GateChoice.KEEP, saved_s, needed_s
        )
        if not pays:
            kept.add(job.spec.id)
    processes = plan.loader_processes + sum(
        _shrink(plan, job) for job in changed if job.spec.id in kept
    )
    for job, freed in _ways_to_free(plan, changed, kept, verdicts):
        if processes <= capacity:
            break
        verdict = verdicts[job.spec.id]
        if job.spec.id in kept:
            kept.discard(job.spec.id)
            verdicts[job.spec.id] = replace(verdict, choice=GateChoice.FORCED)
        else:
            kept.add(job.spec.id)
            verdicts[job.spec.id] = replace(verdict, choice=GateChoice.HELD)
        processes -= freed
    return GateDecision(frozenset(kept), verdicts)


def _ways_to_free(
    plan: AllocationPlan,
    changed: Sequence[RunningJob],
    kept: set[str],
    verdicts: Mapping[str, GateVerdict],
) -> list[tuple[RunningJob, int]]:
    """Each kept job the plan shrinks and each changed job it grows, with the processes its
    turnaround frees, cheapest per process first; on a tie, the larger first (fewer pauses)."""
    ways: list[tuple[float, int, str, RunningJob]] = []
    for job in changed:
        shrink = _shrink(plan, job)
        freed = shrink if job.spec.id in kept else -shrink
        if freed <= 0:
            continue
        verdict = verdicts[job.spec.id]
        cost_s = abs(verdict.needed_s - verdict.saved_s)
        ways.append((cost_s / freed, -freed, job.spec.id, job))
    return [(job, -negative) for _, negative, _, job in sorted(ways)]


def _shrink(plan: AllocationPlan, job: RunningJob) -> int:
    """Processes the plan takes from the job."""
    planned = plan.allocations[job.spec.id].workers_per_gpu
    return job.spec.gpus * (job.current_workers_per_gpu - planned)


def _time_saved_s(job: RunningJob, planned_workers: int, plan: AllocationPlan) -> float:
    """Seconds the planned allocation saves over the job's remaining samples (negative when
    it slows the job down), on the curve the plan was made on."""
    knee = plan.knee_sharpness
    before = job_samples_per_s(job.spec, job.current_workers_per_gpu, plan.efficiency, knee)
    after = job_samples_per_s(job.spec, planned_workers, plan.efficiency, knee)
    return job.remaining_samples / before - job.remaining_samples / after
