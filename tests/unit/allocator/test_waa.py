from allocator import allocate
from tests.unit.allocator.builders import (
    assert_every_last_worker_counts,
    make_job,
    make_request,
)

FREE = ()  # a contention-free node: eta = 1 everywhere


def test_algorithm_1_by_hand() -> None:
    # d' = b*c/step: a 4.0, b 5.0, c 3.33 -> ceilings 4, 5, 4 (13 processes, capacity 10).
    # Over-provision: c 0.67, a 0, b 0 -> order c, a, b. One pass: c 3, a 3, b 4 -> 10 fits.
    request = make_request(
        make_job("a", batch_size=100, step_time_s=0.25, sample_cost_s=0.01),
        make_job("b", batch_size=100, step_time_s=0.20, sample_cost_s=0.01),
        make_job("c", batch_size=100, step_time_s=0.30, sample_cost_s=0.01),
        cpu_workers=10,
        contention=FREE,
    )
    plan = allocate(request, "waa")
    assert plan.workers() == {"a": 3, "b": 4, "c": 3}
    # Line 11's strict `<` would have gone on to take c down to 2 and leave a process unused.
    assert plan.loader_processes == 10


def test_enough_capacity_gives_every_job_exactly_what_keeps_its_gpus_busy() -> None:
    request = make_request(
        make_job("a", batch_size=100, step_time_s=0.25, sample_cost_s=0.01),
        make_job("b", gpus=2, batch_size=200, step_time_s=0.30, sample_cost_s=0.01),
        cpu_workers=64,
        contention=FREE,
    )
    plan = allocate(request, "waa")
    assert plan.workers() == {"a": 4, "b": 4}
    assert plan.loader_processes == 12  # the other 52 stay idle
    for job in request.jobs:
        assert plan.allocations[job.id].predicted_samples_per_s == job.max_samples_per_s


def test_contention_raises_the_workers_needed() -> None:
    # Alone, 12 workers keep up at eta = 1; at 12 processes eta falls (knee at 11), so WAA
    # asks for more until the total it asks for stops growing.
    job = make_job("a", batch_size=120, step_time_s=0.1, sample_cost_s=0.01)
    free = allocate(make_request(job, cpu_workers=64, contention=FREE), "waa")
    contended = allocate(make_request(job, cpu_workers=64), "waa")
    assert free.workers() == {"a": 12}
    assert contended.workers()["a"] > 12
    assert contended.allocations["a"].predicted_samples_per_s == job.max_samples_per_s


def test_each_pass_decrements_every_job_once_in_over_provision_order() -> None:
    # Everyone wants 6, capacity 9 of 18 asked: three full passes take each down by 3.
    jobs = [make_job(name, batch_size=60, step_time_s=0.1, sample_cost_s=0.01) for name in "xyz"]
    plan = allocate(make_request(*jobs, cpu_workers=9, contention=FREE), "waa")
    assert plan.workers() == {"x": 3, "y": 3, "z": 3}


def test_static_keeps_running_jobs_and_plans_newcomers_around_them() -> None:
    running = make_job("old", batch_size=100, step_time_s=0.1, current_workers_per_gpu=3)
    arriving = make_job("new", batch_size=100, step_time_s=0.25, sample_cost_s=0.01)
    request = make_request(running, arriving, cpu_workers=18, contention=FREE)
    assert allocate(request, "static").workers() == {"old": 3, "new": 4}
    # WAA, free to move the running job, gives it the 10 it needs.
    assert allocate(request, "waa").workers() == {"old": 10, "new": 4}


def test_static_without_running_jobs_is_waa() -> None:
    jobs = [make_job("a", step_time_s=0.05), make_job("b", step_time_s=0.2, gpus=2)]
    request = make_request(*jobs, cpu_workers=12)
    assert allocate(request, "static").workers() == allocate(request, "waa").workers()


def test_surplus_left_by_decrements_is_handed_back() -> None:
    # After decrements the total is lower, eta higher, and a job may need fewer workers.
    request = make_request(
        make_job("a", gpus=2, batch_size=200, step_time_s=0.1, sample_cost_s=0.01),
        make_job("b", batch_size=100, step_time_s=0.08, sample_cost_s=0.01),
        cpu_workers=14,
        contention=((1.0, 1.0), (4.0, 1.0), (30.0, 0.4)),
    )
    assert_every_last_worker_counts(request, allocate(request, "waa"))
