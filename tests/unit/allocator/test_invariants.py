"""Properties every policy keeps, on random requests."""

import pytest
from hypothesis import given, settings

from allocator import POLICIES, AllocationRequest, allocate
from allocator.throughput import predicted_total
from tests.unit.allocator.builders import assert_every_last_worker_counts, make_request, requests


@pytest.mark.parametrize("policy", list(POLICIES))
@settings(max_examples=100, deadline=None)
@given(request=requests(max_jobs=6, max_capacity=40))
def test_capacity_floor_and_determinism(policy: str, request: AllocationRequest) -> None:
    plan = allocate(request, policy)
    assert list(plan.allocations) == [job.id for job in request.jobs]
    assert all(d >= 1 for d in plan.workers().values())
    fits = request.floor_processes <= request.node.cpu_workers
    assert plan.over_capacity == (not fits)
    if fits:
        assert plan.loader_processes <= request.node.cpu_workers
    else:
        assert set(plan.workers().values()) == {1}
    assert allocate(request, policy) == plan
    assert plan.predicted_total_samples_per_s == pytest.approx(
        predicted_total(request, list(plan.workers().values()), plan.knee_sharpness)
    )


@settings(max_examples=200, deadline=None)
@given(request=requests(max_jobs=6, max_capacity=40))
def test_waa_gives_no_job_a_worker_it_cannot_use(request: AllocationRequest) -> None:
    assert_every_last_worker_counts(request, allocate(request, "waa"))


@settings(max_examples=200, deadline=None)
@given(request=requests(max_jobs=6, max_capacity=40))
def test_optimal_loses_throughput_if_any_worker_is_taken_away(request: AllocationRequest) -> None:
    plan = allocate(request, "optimal")
    workers = list(plan.workers().values())
    for index, d in enumerate(workers):
        if d > 1:
            fewer = [*workers[:index], d - 1, *workers[index + 1 :]]
            assert predicted_total(request, fewer) < plan.predicted_total_samples_per_s * (
                1 - 1e-10
            )


@pytest.mark.parametrize("policy", list(POLICIES))
def test_a_request_with_no_jobs_gets_an_empty_plan(policy: str) -> None:
    plan = allocate(make_request(), policy)
    assert plan.allocations == {}
    assert plan.loader_processes == 0
    assert plan.predicted_total_samples_per_s == 0.0
    assert not plan.over_capacity
