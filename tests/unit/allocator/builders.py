"""Builders and hypothesis strategies for allocation requests, and a brute-force oracle."""

import itertools

import numpy as np
from hypothesis import strategies as st

from allocator import AllocationPlan, AllocationRequest, ContentionCurve, JobSpec, NodeSpec
from allocator.throughput import job_samples_per_s

PAPER_CONTENTION = ((1.0, 1.0), (11.0, 1.0), (24.0, 0.75))


def make_job(
    job_id: str = "job",
    *,
    gpus: int = 1,
    batch_size: int = 128,
    model_params: float = 11.7e6,
    step_time_s: float = 0.1,
    sample_cost_s: float = 0.01,
    current_workers_per_gpu: int | None = None,
    remaining_samples: float | None = None,
) -> JobSpec:
    """A job with sensible defaults; override what the test is about."""
    return JobSpec(
        id=job_id,
        gpus=gpus,
        batch_size=batch_size,
        model_params=model_params,
        step_time_s=step_time_s,
        sample_cost_s=sample_cost_s,
        current_workers_per_gpu=current_workers_per_gpu,
        remaining_samples=remaining_samples,
    )


def make_request(
    *jobs: JobSpec,
    cpu_workers: int = 18,
    contention: tuple[tuple[float, float], ...] = PAPER_CONTENTION,
    fair_floor: float = 0.8,
) -> AllocationRequest:
    """A request for `jobs` on a node with `cpu_workers` loader processes."""
    return AllocationRequest(
        node=NodeSpec(cpu_workers=cpu_workers, contention=ContentionCurve(contention)),
        jobs=tuple(jobs),
        fair_floor=fair_floor,
    )


def paper_static_request() -> AllocationRequest:
    """Sec. II-D: Resnet18, mdResnet12, smResnet20, two GPUs each, batch 128, 18 processes."""
    return make_request(
        make_job("Resnet18", gpus=2, model_params=11.7e6, step_time_s=0.152, sample_cost_s=0.0095),
        make_job("mdResnet12", gpus=2, model_params=1.8e6, step_time_s=0.052, sample_cost_s=0.0095),
        make_job("smResnet20", gpus=2, model_params=0.9e6, step_time_s=0.041, sample_cost_s=0.0095),
    )


@st.composite
def contention_curves(draw: st.DrawFn) -> tuple[tuple[float, float], ...]:
    """Random eta(D): 0 to 3 points, D increasing, eta non-increasing in (0, 1]."""
    count = draw(st.integers(0, 3))
    ds = sorted(draw(st.sets(st.integers(1, 20), min_size=count, max_size=count)))
    etas = sorted(
        (draw(st.floats(0.3, 1.0)) for _ in range(count)),
        reverse=True,
    )
    return tuple((float(d), eta) for d, eta in zip(ds, etas, strict=True))


@st.composite
def requests(
    draw: st.DrawFn,
    *,
    max_jobs: int = 4,
    max_capacity: int = 16,
    gpu_choices: tuple[int, ...] = (1, 2, 4),
    work_left: bool = False,
) -> AllocationRequest:
    """Small random requests, brute-forceable: up to `max_jobs` jobs and `max_capacity`.
    With `work_left`, every job says how many samples it has left, and the jobs share one
    sample cost, so that many splits tie and the tie order decides among them."""
    job_count = draw(st.integers(1, max_jobs))
    shared_cost = draw(st.floats(0.001, 0.05))
    jobs = [
        make_job(
            f"j{index}",
            gpus=draw(st.sampled_from(gpu_choices)),
            batch_size=draw(st.sampled_from((32, 64, 128, 256))),
            model_params=draw(st.floats(0.5e6, 140e6)),
            step_time_s=draw(st.floats(0.01, 0.5)),
            sample_cost_s=shared_cost if work_left else draw(st.floats(0.001, 0.05)),
            remaining_samples=draw(st.floats(0.0, 1e6)) if work_left else None,
        )
        for index in range(job_count)
    ]
    capacity = draw(st.integers(1, max_capacity))
    return make_request(*jobs, cpu_workers=capacity, contention=draw(contention_curves()))


def brute_force_best(request: AllocationRequest) -> tuple[float, int]:
    """The highest predicted total over every split within capacity, and the fewest
    processes that reach it (ties within 1e-9 relative). Vectorised over all splits."""
    capacity = request.node.cpu_workers
    gpus = np.array([job.gpus for job in request.jobs])
    ranges = [range(1, max(1, capacity // n) + 1) for n in gpus]
    grid = np.array(list(itertools.product(*ranges)), dtype=float)
    processes = grid @ gpus
    grid, processes = grid[processes <= capacity], processes[processes <= capacity]
    curve = request.node.contention
    efficiency = np.array([curve.efficiency(float(p)) for p in processes])
    cost = np.array([job.sample_cost_s for job in request.jobs])
    peak = np.array([job.max_samples_per_s for job in request.jobs])
    totals = np.minimum(peak, grid * gpus * efficiency[:, None] / cost).sum(axis=1)
    best = float(totals.max())
    near = totals >= best - 1e-9 * max(best, 1.0)
    return best, int(processes[near].min())


def assert_every_last_worker_counts(request: AllocationRequest, plan: AllocationPlan) -> None:
    """No job holds a worker per GPU that adds nothing at the plan's own efficiency."""
    for job in request.jobs:
        d = plan.workers()[job.id]
        if d > 1:
            fewer = job_samples_per_s(job, d - 1, plan.efficiency)
            assert fewer < job_samples_per_s(job, d, plan.efficiency), job.id
