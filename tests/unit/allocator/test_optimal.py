import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from allocator import AllocationRequest, InvalidRequest, allocate
from allocator.knapsack import Steps, best_steps
from allocator.throughput import job_samples_per_s, predicted_total
from tests.unit.allocator.builders import (
    brute_force_best,
    make_job,
    make_request,
    paper_static_request,
    requests,
)


@settings(max_examples=300, deadline=None)
@given(requests())
def test_optimal_matches_brute_force(request: AllocationRequest) -> None:
    plan = allocate(request, "optimal")
    if request.floor_processes >= request.node.cpu_workers:
        assert set(plan.workers().values()) == {1}
        return
    best, fewest = brute_force_best(request)
    assert plan.predicted_total_samples_per_s == pytest.approx(best, rel=1e-9)
    assert plan.loader_processes == fewest


@settings(max_examples=150, deadline=None)
@given(requests(gpu_choices=(1, 2, 3)))
def test_optimal_matches_brute_force_when_gpu_counts_do_not_divide(
    request: AllocationRequest,
) -> None:
    plan = allocate(request, "optimal")
    if request.floor_processes < request.node.cpu_workers:
        best, fewest = brute_force_best(request)
        assert plan.predicted_total_samples_per_s == pytest.approx(best, rel=1e-9)
        assert plan.loader_processes == fewest


@settings(max_examples=300, deadline=None)
@given(requests(work_left=True))
def test_optimal_stays_exact_when_it_weighs_the_work_left(request: AllocationRequest) -> None:
    plan = allocate(request, "optimal")
    if request.floor_processes < request.node.cpu_workers:
        best, fewest = brute_force_best(request)
        assert plan.predicted_total_samples_per_s == pytest.approx(best, rel=1e-9)
        assert plan.loader_processes == fewest


def test_equal_steps_go_to_the_job_that_would_finish_last() -> None:
    # Two identical loader-bound jobs (100 samples/s a worker up to 1,280) and 6 spare
    # processes: every split of them predicts the same total. Told the work left, optimal
    # evens out the finish times (3,000 / 6 = 1,000 / 2); not told, request order decides.
    def request(left: tuple[float, float] | None) -> AllocationRequest:
        return make_request(
            *(
                make_job(
                    name,
                    step_time_s=0.1,
                    sample_cost_s=0.01,
                    remaining_samples=None if left is None else samples,
                )
                for name, samples in zip(("a", "b"), left or (0.0, 0.0), strict=True)
            ),
            cpu_workers=8,
            contention=(),
        )

    assert allocate(request((3000.0, 1000.0)), "optimal").workers() == {"a": 6, "b": 2}
    assert allocate(request((1000.0, 3000.0)), "optimal").workers() == {"a": 2, "b": 6}
    assert allocate(request((1000.0, 1000.0)), "optimal").workers() == {"a": 4, "b": 4}
    assert allocate(request(None), "optimal").workers() == {"a": 7, "b": 1}
    totals = {
        allocate(request(left), "optimal").predicted_total_samples_per_s
        for left in ((3000.0, 1000.0), (1000.0, 1000.0), None)
    }
    assert max(totals) == pytest.approx(min(totals))


def test_work_left_must_not_be_negative() -> None:
    with pytest.raises(InvalidRequest, match=r"jobs\[a\]\.remaining_samples"):
        make_job("a", remaining_samples=-1.0)


@settings(max_examples=200, deadline=None)
@given(requests(max_jobs=6, max_capacity=40))
def test_optimal_never_scores_below_waa(request: AllocationRequest) -> None:
    optimal = allocate(request, "optimal").predicted_total_samples_per_s
    assert optimal >= allocate(request, "waa").predicted_total_samples_per_s * (1 - 1e-9)


def test_paper_static_case() -> None:
    request = paper_static_request()
    totals = {p: allocate(request, p).predicted_total_samples_per_s for p in ("balance", "waa")}
    optimal = allocate(request, "optimal")
    assert optimal.predicted_total_samples_per_s >= max(totals.values()) * (1 - 1e-9)
    # Resnet18 keeps up with 8 processes (the paper's Fig. 7); more would idle.
    assert optimal.workers()["Resnet18"] <= 4


def test_workers_that_raise_nothing_stay_idle() -> None:
    # Two jobs that saturate with 3 and 2 workers on a node of 64.
    request = make_request(
        make_job("a", batch_size=30, step_time_s=0.1, sample_cost_s=0.01),
        make_job("b", batch_size=20, step_time_s=0.1, sample_cost_s=0.01),
        cpu_workers=64,
        contention=(),
    )
    plan = allocate(request, "optimal")
    assert plan.workers() == {"a": 3, "b": 2}


@settings(max_examples=200, deadline=None)
@given(requests(max_jobs=5, max_capacity=30), st.floats(0.0, 1.0))
def test_fair_keeps_every_job_above_its_floor(request: AllocationRequest, floor: float) -> None:
    request = AllocationRequest(node=request.node, jobs=request.jobs, fair_floor=floor)
    if request.floor_processes >= request.node.cpu_workers:
        return
    balance = allocate(request, "balance")
    fair = allocate(request, "fair")
    for job in request.jobs:
        wanted = floor * balance.allocations[job.id].predicted_samples_per_s
        assert fair.allocations[job.id].predicted_samples_per_s >= wanted * (1 - 1e-9)
    total = fair.predicted_total_samples_per_s
    assert total >= balance.predicted_total_samples_per_s * (1 - 1e-9)
    assert total <= allocate(request, "optimal").predicted_total_samples_per_s * (1 + 1e-9)


def _brute_steps(weights: list[int], gains: list[list[float]], budget: int) -> float:
    best = 0.0
    for counts in itertools.product(*(range(len(g) + 1) for g in gains)):
        if sum(w * k for w, k in zip(weights, counts, strict=True)) <= budget:
            best = max(best, sum(sum(g[:k]) for g, k in zip(gains, counts, strict=True)))
    return best


@st.composite
def step_problems(
    draw: st.DrawFn, sizes: tuple[int, ...], work_left: bool = False
) -> tuple[Steps, int]:
    """Random knapsacks; with `work_left`, gains from a short list (so many tie) and each
    job's work left and starting workers, which order the tied steps."""
    count = draw(st.integers(1, 5))
    gain_choices = st.sampled_from((5.0, 10.0, 20.0)) if work_left else st.floats(1.0, 100.0)
    full_gain = [draw(gain_choices) for _ in range(count)]
    partial = [g * draw(st.sampled_from((0.0, 0.3, 0.99))) for g in full_gain]
    steps = Steps(
        weights=np.array([draw(st.sampled_from(sizes)) for _ in range(count)]),
        full_gain=np.array(full_gain),
        full_count=np.array([draw(st.integers(0, 4)) for _ in range(count)]),
        partial_gain=np.array(partial),
        remaining=np.array([draw(st.floats(0.0, 1e4)) for _ in range(count)])
        if work_left
        else None,
        start=np.array([draw(st.integers(1, 4)) for _ in range(count)]) if work_left else None,
    )
    return steps, draw(st.integers(0, 24))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        step_problems((1, 2, 4, 8)),
        step_problems((2, 3, 5)),
        step_problems((1, 2, 4), work_left=True),
    )
)
def test_knapsack_is_exact(problem: tuple[Steps, int]) -> None:
    steps, budget = problem
    weights = [int(w) for w in steps.weights]
    gains = [steps.gains(job) for job in range(len(weights))]
    taken = [int(k) for k in best_steps(steps, budget)]
    assert sum(w * k for w, k in zip(weights, taken, strict=True)) <= budget
    assert all(0 <= k <= len(g) for k, g in zip(taken, gains, strict=True))
    value = sum(sum(g[:k]) for g, k in zip(gains, taken, strict=True))
    assert value == pytest.approx(_brute_steps(weights, gains, budget), rel=1e-9)


def test_optimal_uses_gpu_granularity_that_greedy_misses() -> None:
    # Two spare processes. Greedy by gain per process gives the 1-GPU job its one useful extra
    # worker (11 per process) and cannot fit the 2-GPU step (10 per process) in what is left:
    # +11. Giving both processes to the 2-GPU job is worth +20.
    request = make_request(
        make_job("narrow", batch_size=22, step_time_s=1.0, sample_cost_s=1 / 11),
        make_job("wide", gpus=2, batch_size=400, step_time_s=0.1, sample_cost_s=0.1),
        cpu_workers=5,
        contention=(),
    )
    plan = allocate(request, "optimal")
    assert plan.workers() == {"narrow": 1, "wide": 2}
    assert plan.predicted_total_samples_per_s == pytest.approx(51.0)
    assert predicted_total(request, [2, 1]) == pytest.approx(42.0)
    assert job_samples_per_s(request.jobs[0], 3, 1.0) == pytest.approx(22.0)


def test_tied_steps_are_ordered_without_expanding_runs_past_the_budget() -> None:
    # A fast job has a great many equal steps below its peak; the budget uses a handful.
    steps = Steps(
        weights=np.array([1, 1]),
        full_gain=np.array([10.0, 10.0]),
        full_count=np.array([10**12, 10**12]),
        partial_gain=np.array([0.0, 0.0]),
        remaining=np.array([300.0, 100.0]),
        start=np.array([1, 1]),
    )
    assert best_steps(steps, 6).tolist() == [5, 1]  # finish times 300/6 = 50 and 100/2 = 50
