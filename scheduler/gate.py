"""The reallocation gate: is changing a running job worth pausing it?

Pausing costs a job its measured pause cost (checkpoint, worker teardown and start-up). A
change pays when the time it saves over the job's remaining work beats that cost by the
hysteresis margin. Changes that capacity forces (a running job must shrink so that the plan
fits) are always made: arrivals and completions are always served.
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
    """Keep every change that does not pay, then give back kept shrinks while over capacity."""
    verdicts: dict[str, GateVerdict] = {}
    kept: dict[str, RunningJob] = {}
    for job in changed:
        planned = plan.allocations[job.spec.id]
        saved_s = _time_saved_s(job, planned.workers_per_gpu, plan)
        needed_s = job.pause_cost_s * (1.0 + hysteresis)
        if saved_s > needed_s:
            verdicts[job.spec.id] = GateVerdict(GateChoice.CHANGE, saved_s, needed_s)
        else:
            kept[job.spec.id] = job
            verdicts[job.spec.id] = GateVerdict(GateChoice.KEEP, saved_s, needed_s)
    processes = plan.loader_processes + sum(
        job.spec.gpus * (job.current_workers_per_gpu - plan.allocations[job_id].workers_per_gpu)
        for job_id, job in kept.items()
    )
    # Largest shrink first: the fewest forced pauses bring the plan back within capacity.
    shrinking = sorted(
        (job for job in kept.values() if _shrink(plan, job) > 0),
        key=lambda job: -_shrink(plan, job),
    )
    for job in shrinking:
        if processes <= capacity:
            break
        del kept[job.spec.id]
        processes -= _shrink(plan, job)
        verdicts[job.spec.id] = replace(verdicts[job.spec.id], choice=GateChoice.FORCED)
    return GateDecision(frozenset(kept), verdicts)


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
