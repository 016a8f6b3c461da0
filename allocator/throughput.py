"""Formulas 5 and 7 of A-Dloader evaluated on a request: what a split of workers yields.

A job with d workers per GPU on n GPUs runs n*d loader processes. With eta = eta(D) for the
node's total D, it loads lambda = d*eta/(b*c) mini-batches per GPU per second, so its
throughput is T = B * min(mu, lambda) = min(B/step_time, n*d*eta/c) samples per second.
"""

import math
from collections.abc import Mapping, Sequence
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from allocator.types import AllocationPlan, AllocationRequest, JobAllocation, JobSpec

Rates = TypeVar("Rates", float, npt.NDArray[np.float64])  # one rate, or an array of them

# Rounding guard for ceilings of worker counts computed in floating point.
_CEIL_TOLERANCE = 1e-9


def job_samples_per_s(
    job: JobSpec, workers_per_gpu: int, efficiency: float, knee_sharpness: float | None = None
) -> float:
    """T_i in samples per second for d workers per GPU at contention efficiency eta: formula
    5's min of the GPU's rate and the loaders', or with a sharpness p the smooth
    (G^-p + L^-p)^(-1/p) that `lookahead` plans on: the job's own p where it has one (its
    measurements say how it bends), else `knee_sharpness`; then the job's waits that no
    worker shortens added to every sample's time (`with_overhead`)."""
    loading = job.gpus * workers_per_gpu * efficiency / job.sample_cost_s
    sharpness = job.knee_sharpness or knee_sharpness
    if sharpness is None:
        return with_overhead(min(job.max_samples_per_s, loading), job.overhead_s)
    power = -sharpness
    steady = float((loading**power + job.max_samples_per_s**power) ** (1.0 / power))
    return with_overhead(steady, job.overhead_s)


def with_overhead(steady: Rates, overhead_s: float | Rates) -> Rates:
    """Samples/s of a job that runs at `steady` but for waits of `overhead_s` per sample
    that no worker shortens (`JobSpec.overhead_s`): 1 / (1 / steady + overhead). Concave in
    `steady`, so curves stay concave in the workers."""
    return steady / (1.0 + steady * overhead_s)


def workers_to_keep_up(job: JobSpec, efficiency: float) -> float:
    """d' solving mu = lambda(d'): the fractional workers per GPU that just feed the GPU."""
    return job.batch_size_per_gpu * job.sample_cost_s / (job.step_time_s * efficiency)


def ceil_workers(fractional: float) -> int:
    """Ceiling of a fractional worker count, at least one, tolerant of rounding noise."""
    return max(1, math.ceil(fractional - _CEIL_TOLERANCE))


def loader_processes(request: AllocationRequest, workers: Sequence[int]) -> int:
    """D = sum of n_i * d_i."""
    return sum(job.gpus * d for job, d in zip(request.jobs, workers, strict=True))


def predicted_total(
    request: AllocationRequest, workers: Sequence[int], knee_sharpness: float | None = None
) -> float:
    """Sum of T_i with eta taken at the split's own total D (on the smooth knee if given)."""
    efficiency = request.node.contention.efficiency(loader_processes(request, workers))
    return sum(
        job_samples_per_s(job, d, efficiency, knee_sharpness)
        for job, d in zip(request.jobs, workers, strict=True)
    )


def make_plan(
    policy: str,
    request: AllocationRequest,
    workers: Sequence[int],
    notes: Sequence[str] = (),
    on_device: Mapping[str, JobAllocation] | None = None,
    *,
    knee_sharpness: float | None = None,
) -> AllocationPlan:
    """Wrap a split of workers per GPU (request order) into a plan with its predictions.
    `on_device` has the allocations of the jobs that decode on the device (`joint`); the
    others decode on the CPU. With `knee_sharpness` the predictions are on the smooth knee
    (`job_samples_per_s`)."""
    processes = loader_processes(request, workers)
    efficiency = request.node.contention.efficiency(processes) if processes else 1.0
    # Positional arguments: this runs once per job of every plan, and keywords add about a
    # fifth to the cost of building a JobAllocation.
    allocations = {
        job.id: JobAllocation(d, job_samples_per_s(job, d, efficiency, knee_sharpness))
        for job, d in zip(request.jobs, workers, strict=True)
    }
    if on_device:
        allocations.update(on_device)
    over_capacity = request.floor_processes > request.node.cpu_workers
    all_notes = list(notes)
    if over_capacity:
        all_notes.append(
            f"one worker per GPU needs {request.floor_processes} loader processes but the node "
            f"allows {request.node.cpu_workers}; every job is held at the floor of 1 and the "
            "node is oversubscribed until jobs finish or wait"
        )
    return AllocationPlan(
        policy=policy,
        allocations=allocations,
        loader_processes=processes,
        cpu_workers=request.node.cpu_workers,
        efficiency=efficiency,
        predicted_total_samples_per_s=sum(a.predicted_samples_per_s for a in allocations.values()),
        over_capacity=over_capacity,
        notes=tuple(all_notes),
        knee_sharpness=knee_sharpness,
    )
