"""One candidate of `joint`'s search (allocator/joint.py): a choice of device jobs, the
workers `optimal` gives it once each device job's peak is capped at its decoder rate, the
decoder water-filled over them, and what it predicts; and which of two candidates wins."""

from collections.abc import Sequence
from dataclasses import dataclass, replace

from allocator.optimal import optimal
from allocator.throughput import loader_processes, make_plan
from allocator.types import AllocationPlan, AllocationRequest, JobAllocation, JobSpec

_LEFTOVER = 1e-6
_REBALANCE_PASSES = 4
_TIE = 1e-9  # relative: two totals this close are equal, and the simpler candidate wins


@dataclass(frozen=True)
class Candidate:
    """One choice of device jobs, the workers `optimal` gave it, and what it predicts."""

    device: frozenset[int]  # indices of jobs in device mode
    decoder: tuple[float, ...]  # samples/s of the device each job is given (0 on cpu)
    workers: tuple[int, ...]
    total: float


def evaluate(request: AllocationRequest, device: frozenset[int], order: Sequence[int]) -> Candidate:
    """The workers and decoder rates for `device` (jobs on the device, water-filled in
    `order`): first as if the decoder were unlimited, which is exact when its capacity is
    not reached; when it is, also with the decoder water-filled and rebalanced."""
    jobs = request.jobs
    unlimited = settle(
        request, [jobs[i].max_samples_per_s if i in device else 0.0 for i in range(len(jobs))]
    )
    if sum(unlimited.decoder) <= request.node.decoder_capacity:
        return unlimited
    decoder = [0.0] * len(jobs)
    left = request.node.decoder_capacity
    for index in order:
        if index in device:
            decoder[index] = min(jobs[index].max_samples_per_s, left)
            left -= decoder[index]
    best = settle(request, decoder)
    for _ in range(_REBALANCE_PASSES):
        spare = request.node.decoder_capacity - sum(best.decoder)
        # Device jobs the decoder throttles, or that the water-fill left without any of it.
        throttled = [
            i
            for i in order
            if i in device
            and best.decoder[i] < jobs[i].max_samples_per_s
            and best.decoder[i] >= decoder[i] * (1.0 - _TIE)
        ]
        if spare <= _LEFTOVER or not throttled:
            break
        decoder = list(best.decoder)  # what each uses; the spare goes to the throttled
        for index in throttled:
            grant = min(jobs[index].max_samples_per_s - decoder[index], spare)
            decoder[index] += grant
            spare -= grant
        again = settle(request, decoder)
        if not beats(again, best):
            break
        best = again
    return best if beats(best, unlimited) else unlimited


def settle(request: AllocationRequest, decoder: Sequence[float]) -> Candidate:
    """`optimal`'s workers with each device job capped at its decoder rate (0: cpu mode),
    and the decoder rates that split then uses, valued with the device's capacity."""
    workers = split_workers(request, decoder)
    efficiency = request.node.contention.efficiency(loader_processes(request, workers))
    used = tuple(
        min(rate, cpu_side(job, d, efficiency, device=True)) if rate > 0.0 else 0.0
        for job, d, rate in zip(request.jobs, workers, decoder, strict=True)
    )
    device = frozenset(i for i, rate in enumerate(decoder) if rate > 0.0)
    return Candidate(device, used, tuple(workers), joint_total(request, device, workers))


def split_workers(request: AllocationRequest, decoder: Sequence[float]) -> list[int]:
    """`optimal`'s workers when each device job's peak is capped at its decoder rate and its
    workers cost the augment-only c'_i."""
    jobs = tuple(
        job if decoder[index] <= 0.0 else as_device_job(job, decoder[index])
        for index, job in enumerate(request.jobs)
    )
    plan = optimal(replace(request, jobs=jobs))
    return [plan.allocations[job.id].workers_per_gpu for job in request.jobs]


def as_device_job(job: JobSpec, decoder_rate: float) -> JobSpec:
    assert job.device_sample_cost_s is not None
    peak = min(job.max_samples_per_s, decoder_rate)
    return replace(
        job,
        sample_cost_s=job.device_sample_cost_s,
        step_time_s=job.batch_size / peak,
        device_sample_cost_s=None,
    )


def cpu_side(job: JobSpec, workers_per_gpu: int, efficiency: float, *, device: bool) -> float:
    """min(B*mu, n*d*eta/c): the throughput the GPU and the CPU workers allow, with the
    augment-only cost in device mode."""
    cost = job.device_sample_cost_s if device and job.device_sample_cost_s else job.sample_cost_s
    return min(job.max_samples_per_s, job.gpus * workers_per_gpu * efficiency / cost)


def beats(candidate: Candidate, best: Candidate) -> bool:
    """Higher total wins; among equal totals, fewer device jobs, then fewer processes."""
    if candidate.total > best.total * (1.0 + _TIE):
        return True
    if candidate.total < best.total * (1.0 - _TIE):
        return False
    return (len(candidate.device), sum(candidate.workers)) < (len(best.device), sum(best.workers))


def from_plan(request: AllocationRequest, plan: AllocationPlan) -> Candidate:
    workers = tuple(plan.allocations[job.id].workers_per_gpu for job in request.jobs)
    total = joint_total(request, frozenset(), workers)
    return Candidate(frozenset(), (0.0,) * len(workers), workers, total)


def plan_of(request: AllocationRequest, chosen: Candidate, notes: list[str]) -> AllocationPlan:
    """The plan of a candidate: each device job's share in proportion to what its GPU and
    its workers could take from the decoder (`cpu_side`), so that the device jobs together
    get min(K, their sum), the total `joint_total` valued the candidate at. (Shares in
    proportion to the water-fill's rates left a job the fill had cut short below what its
    share of the rest could give it: 116 samples/s planned of 144 possible.)"""
    capacity = request.node.decoder_capacity
    efficiency = request.node.contention.efficiency(loader_processes(request, chosen.workers))
    demand = {
        index: cpu_side(request.jobs[index], chosen.workers[index], efficiency, device=True)
        for index in chosen.device
    }
    wanted = sum(demand.values())
    on_device = {}
    for index, rate in demand.items():
        share = rate / wanted if wanted > 0.0 else 1.0 / len(chosen.device)
        on_device[request.jobs[index].id] = JobAllocation(
            chosen.workers[index], min(rate, share * capacity), share, "device"
        )
    return make_plan("joint", request, chosen.workers, notes, on_device)


def joint_total(
    request: AllocationRequest, device: frozenset[int], workers: Sequence[int]
) -> float:
    """The predicted total for given device jobs and workers, shares chosen at their best:
    the cpu jobs as in `optimal` plus min(K, the device jobs' CPU-side rates)."""
    efficiency = request.node.contention.efficiency(loader_processes(request, workers))
    on_cpu = on_device = 0.0
    for index, (job, d) in enumerate(zip(request.jobs, workers, strict=True)):
        if index in device:
            on_device += cpu_side(job, d, efficiency, device=True)
        else:
            on_cpu += cpu_side(job, d, efficiency, device=False)
    return on_cpu + min(request.node.decoder_capacity, on_device)
