"""`joint` against brute force over every decode mode and worker split of small requests."""

import itertools
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import AllocationRequest, ContentionCurve, JobSpec, NodeSpec, allocate
from allocator.jointcandidate import joint_total
from tests.unit.allocator.builders import contention_curves, make_job, make_request

# The worst relative shortfall against brute force that the search may show on small
# instances (measured: see docs/allocator.md); anything above it is a regression.
SHORTFALL = 0.03


@st.composite
def decoder_requests(
    draw: st.DrawFn, max_jobs: int = 4, max_capacity: int = 12
) -> AllocationRequest:
    """Small requests on a node with a decoder; some jobs can use it, some cannot."""
    jobs = []
    for index in range(draw(st.integers(1, max_jobs))):
        cost = draw(st.floats(0.002, 0.05))
        augment = draw(st.one_of(st.none(), st.floats(0.1, 1.2)))
        job = make_job(
            f"j{index}",
            gpus=draw(st.sampled_from((1, 2))),
            batch_size=draw(st.sampled_from((32, 64, 128))),
            step_time_s=draw(st.floats(0.01, 0.5)),
            sample_cost_s=cost,
        )
        if augment is not None:  # the device may even cost more CPU: then it is no help
            job = type(job)(**{**job.__dict__, "device_sample_cost_s": cost * augment})
        jobs.append(job)
    base = make_request(*jobs, cpu_workers=draw(st.integers(1, max_capacity)))
    node = NodeSpec(
        cpu_workers=base.node.cpu_workers,
        contention=ContentionCurve(draw(contention_curves())),
        decoder_capacity=draw(st.sampled_from((0.0, 100.0, 1000.0, 5000.0))),
    )
    return AllocationRequest(node=node, jobs=base.jobs)


def brute_force_joint(request: AllocationRequest) -> float:
    """The best predicted total over every mode of every job and every split of workers."""
    capacity = request.node.cpu_workers
    ranges = [range(1, max(1, capacity // job.gpus) + 1) for job in request.jobs]
    usable = [i for i, job in enumerate(request.jobs) if job.device_sample_cost_s is not None]
    best = 0.0
    for workers in itertools.product(*ranges):
        used = sum(job.gpus * d for job, d in zip(request.jobs, workers, strict=True))
        if used > max(capacity, request.floor_processes):
            continue
        for size in range(len(usable) + 1):
            for device in itertools.combinations(usable, size):
                best = max(best, joint_total(request, frozenset(device), workers))
    return best


def check_plan(request: AllocationRequest) -> float:
    """The plan is feasible and its prediction is what its own split is worth."""
    plan = allocate(request, "joint")
    shares = [a.decoder_share for a in plan.allocations.values()]
    assert sum(shares) <= 1.0 + 1e-9
    for job in request.jobs:
        allocation = plan.allocations[job.id]
        if allocation.decode_mode == "device":
            assert job.device_sample_cost_s is not None
            assert request.node.decoder_capacity > 0.0
            assert allocation.decoder_share > 0.0
            assert allocation.predicted_samples_per_s <= (
                allocation.decoder_share * request.node.decoder_capacity * (1 + 1e-9)
            )
        else:
            assert allocation.decoder_share == 0.0
    if request.floor_processes < request.node.cpu_workers:
        assert plan.loader_processes <= request.node.cpu_workers
    return plan.predicted_total_samples_per_s


@settings(max_examples=300, deadline=None)
@given(decoder_requests())
def test_joint_is_near_brute_force_and_never_below_optimal(request: AllocationRequest) -> None:
    total = check_plan(request)
    assert total >= allocate(request, "optimal").predicted_total_samples_per_s * (1 - 1e-9)
    best = brute_force_joint(request)
    assert total <= best * (1 + 1e-9)  # a prediction no split can reach is a bug
    assert total >= best * (1 - SHORTFALL)


def _job(
    name: str, gpus: int, batch: int, step_s: float, cost_s: float, *, device_s: float = 0.0
) -> JobSpec:
    made = make_job(name, gpus=gpus, batch_size=batch, step_time_s=step_s, sample_cost_s=cost_s)
    return replace(made, device_sample_cost_s=device_s or None)


def _on_eight(*jobs: JobSpec) -> AllocationRequest:
    node = NodeSpec(8, ContentionCurve(()), decoder_capacity=1000.0)
    return AllocationRequest(node=node, jobs=jobs)


@pytest.mark.parametrize(
    "request_",
    [
        # A 2-GPU job's next worker needs two processes: j0's worker, useless once the
        # decoder binds, and one of j2's pay for it (the search planned 2,152 of 2,256).
        _on_eight(
            _job("j0", 1, 32, 0.0625, 0.0234375, device_s=0.0029296875),
            _job("j1", 2, 32, 0.125, 0.015625),
            _job("j2", 1, 32, 0.03125, 0.002),
            _job("j3", 1, 128, 0.1875, 0.0078125, device_s=0.0009765625),
        ),
        # The best water-fills the decoder to j3 first, which no ranking puts first (the
        # search planned 1,120 of 1,160).
        _on_eight(
            _job("j0", 1, 64, 0.0625, 1 / 28, device_s=1 / 224),
            _job("j1", 1, 64, 1.0, 1 / 32),
            _job("j2", 1, 64, 0.5, 1 / 64),
            _job("j3", 2, 64, 0.125, 1 / 64, device_s=1 / 256),
        ),
        # Five processes, half as efficient, for four jobs, two of which the decoder helps:
        # the best puts both on it, which the search missed (it planned 165 of 180,
        # 2026-11-27): a node this small is now valued choice by choice.
        AllocationRequest(
            node=NodeSpec(5, ContentionCurve(((5.0, 0.5),)), decoder_capacity=100.0),
            jobs=(
                _job("j0", 1, 32, 0.5, 1 / 64),
                _job("j1", 1, 32, 0.5, 1 / 32),
                _job("j2", 1, 32, 0.25, 1 / 64, device_s=1 / 128),
                _job("j3", 1, 32, 0.25, 1 / 32, device_s=3 / 256),
            ),
            fair_floor=0.8,
        ),
    ],
)
def test_the_property_tests_finds_are_planned_as_well_as_brute_force(
    request_: AllocationRequest,
) -> None:
    assert check_plan(request_) == pytest.approx(brute_force_joint(request_), rel=1e-9)


@settings(max_examples=100, deadline=None)
@given(decoder_requests())
def test_without_a_decoder_joint_is_optimal(request: AllocationRequest) -> None:
    cpu_only = AllocationRequest(
        node=NodeSpec(request.node.cpu_workers, request.node.contention), jobs=request.jobs
    )
    plan = allocate(cpu_only, "joint")
    assert plan.workers() == allocate(cpu_only, "optimal").workers()
    assert {a.decode_mode for a in plan.allocations.values()} <= {"cpu"}


def test_a_cpu_starved_node_sends_the_costliest_decoder_to_the_device() -> None:
    # Two identical GPUs' worth of work; 4 processes; a decoder for 2,000 samples/s. The
    # job whose decode is dearest (c - c' largest) gains most from the device.
    cheap = make_job("cheap", sample_cost_s=0.01, step_time_s=0.05)
    dear = make_job("dear", sample_cost_s=0.03, step_time_s=0.05)
    jobs = (
        type(cheap)(**{**cheap.__dict__, "device_sample_cost_s": 0.008}),
        type(dear)(**{**dear.__dict__, "device_sample_cost_s": 0.008}),
    )
    request = AllocationRequest(node=NodeSpec(cpu_workers=4, decoder_capacity=2000.0), jobs=jobs)
    plan = allocate(request, "joint")
    assert plan.allocations["dear"].decode_mode == "device"
    assert (
        plan.predicted_total_samples_per_s
        > allocate(request, "optimal").predicted_total_samples_per_s
    )
    assert plan.predicted_total_samples_per_s == pytest.approx(brute_force_joint(request))


def test_each_device_job_gets_the_share_of_the_decoder_it_can_take() -> None:
    # Found by the property test above: two device jobs whose workers can take 64 and 16
    # samples/s from a decoder of 100. Shared by the water-fill's rates (36 and 16), the
    # first got 36 with 48 samples/s of the decoder idle: 116 planned of 144 possible.
    def job(job_id: str, step_time_s: float, cost: float, device: float | None) -> JobSpec:
        made = make_job(job_id, batch_size=32, step_time_s=step_time_s, sample_cost_s=cost)
        return replace(made, device_sample_cost_s=device)

    jobs = (
        job("j0", 0.5, 0.0078125, None),
        job("j1", 0.25, 0.015625, 0.00390625),
        job("j2", 0.5, 0.03125, 0.015625),
    )
    node = NodeSpec(4, ContentionCurve(((2.0, 0.5),)), decoder_capacity=100.0)
    request = AllocationRequest(node=node, jobs=jobs)
    plan = allocate(request, "joint")
    assert plan.predicted_total_samples_per_s == pytest.approx(brute_force_joint(request))
    assert plan.allocations["j1"].predicted_samples_per_s == pytest.approx(64.0)
    assert sum(a.decoder_share for a in plan.allocations.values()) <= 1.0 + 1e-9


@pytest.mark.parametrize(
    ("cost", "device_cost"),
    [
        (0.021484375, 0.00537109375),  # 1,096: a worker per GPU on j3 where j1 could use it
        (0.02131661152560667, 0.005329152881401667),  # 1,098: j0 alone, split unpolished
    ],
)
def test_workers_the_saturated_decoder_wastes_go_to_the_cpu_jobs(
    cost: float, device_cost: float
) -> None:
    # Found by the property test above: the decoder (1,000 samples/s) is full either way,
    # and optimal's split left a worker per GPU on the 2-GPU device job that the CPU job
    # j1 could use; valued at that split, the choice of j0 and j3 lost to j0 alone.
    # 1,096 and 1,098 planned of 1,160 possible.
    def job(job_id: str, gpus: int, batch: int, step: float, cost: float) -> JobSpec:
        return make_job(job_id, gpus=gpus, batch_size=batch, step_time_s=step, sample_cost_s=cost)

    jobs = (
        replace(job("j0", 1, 128, 0.125, cost), device_sample_cost_s=device_cost),
        job("j1", 1, 32, 0.25, 0.015625),
        job("j2", 1, 32, 0.5, 0.03125),
        replace(job("j3", 2, 64, 0.125, 0.03125), device_sample_cost_s=0.0078125),
    )
    node = NodeSpec(9, ContentionCurve(()), decoder_capacity=1000.0)
    request = AllocationRequest(node=node, jobs=jobs)
    plan = allocate(request, "joint")
    assert plan.predicted_total_samples_per_s == pytest.approx(brute_force_joint(request))
    assert plan.workers()["j1"] == 2 and plan.loader_processes <= 9
