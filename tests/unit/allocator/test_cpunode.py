"""`lookahead` on a node that trains on its CPUs: one budget of cores (allocator/cpunode.py)."""

from dataclasses import replace

import numpy as np
import pytest

from allocator import AllocationRequest, InvalidRequest, JobSpec, NodeSpec
from allocator.cpunode import CoreBudget
from allocator.lookahead import KNEE_SHARPNESS, lookahead
from allocator.throughput import job_samples_per_s
from tests.unit.allocator.builders import make_job, make_request

FREE = ((1.0, 1.0), (64.0, 1.0))


def loader_heavy_mix(core_share: float = 0.4) -> tuple[JobSpec, ...]:
    """Item 7's mix, in small: a job whose loaders bound it (2 workers) beside two
    compute-bound ones (1 each), all running, none costing a pause."""
    heavy = make_job("heavy", batch_size=32, step_time_s=0.1, sample_cost_s=0.02)
    compute = make_job("a", batch_size=32, step_time_s=0.2, sample_cost_s=0.002)
    jobs = (  # `balance` gives its leftover worker to the first: not the loader-heavy job
        replace(compute, current_workers_per_gpu=1, remaining_samples=6000.0, cpu_cost_s=0.004),
        replace(
            compute, id="b", current_workers_per_gpu=1, remaining_samples=6000.0, cpu_cost_s=0.004
        ),
        replace(heavy, current_workers_per_gpu=2, remaining_samples=3000.0, cpu_cost_s=0.008),
    )
    return tuple(replace(job, pause_cost_s=0.0, core_share=core_share) for job in jobs)


def busy_now(jobs: tuple[JobSpec, ...]) -> float:
    """The cores the jobs keep busy at their current split, on their curves."""
    return sum(
        job_samples_per_s(job, job.current_workers_per_gpu or 1, 1.0, KNEE_SHARPNESS)
        * (job.cpu_cost_s or 0.0)
        for job in jobs
    )


def on_cpus(jobs: tuple[JobSpec, ...], cores: float | None) -> AllocationRequest:
    request = make_request(*jobs, cpu_workers=4, contention=FREE)
    return replace(request, node=replace(request.node, cpu_cores=cores))


def test_on_busy_cpus_no_split_changes_when_the_work_is_done() -> None:
    """Every core busy under any split: the last job ends when all the CPU seconds the jobs
    need are spent, whoever got the workers."""
    jobs = loader_heavy_mix()
    cores = busy_now(jobs)
    plan = lookahead(on_cpus(jobs, cores))
    work = sum((job.remaining_samples or 0.0) * (job.cpu_cost_s or 0.0) for job in jobs)
    assert plan.predicted_makespan_s == pytest.approx(work / cores, rel=1e-6)
    assert plan.balance_makespan_s == pytest.approx(work / cores, rel=1e-6)


def test_the_gpu_node_model_would_promise_the_split_a_large_gain() -> None:
    """The same jobs with loaders on CPUs of their own (the paper's node): `balance`'s one
    worker halves the loader-heavy job, and the plan predicts a far shorter makespan."""
    plan = lookahead(on_cpus(loader_heavy_mix(), None))
    assert plan.predicted_makespan_s is not None and plan.balance_makespan_s is not None
    assert plan.balance_makespan_s > 1.1 * plan.predicted_makespan_s


def test_a_finish_frees_its_cores_to_the_others_up_to_a_core_per_thread() -> None:
    jobs = loader_heavy_mix(core_share=0.5)  # each thread could run twice as fast alone
    rates = np.array([150.0, 150.0, 100.0])
    running = np.ones(3, dtype=bool)
    budget = CoreBudget.of(on_cpus(jobs, 4.0), rates, running)
    assert budget is not None
    assert budget.busy_now == pytest.approx(100 * 0.008 + 2 * 150 * 0.004)
    alone = np.array([False, True, False])
    scaled = budget.spend(rates, alone)
    assert scaled[1] == pytest.approx(300.0), "twice its rate: its threads at a core each"
    both = np.array([True, True, False])
    assert budget.spend(rates, both)[:2] == pytest.approx([250.0, 250.0]), "2 cores shared"


def test_a_split_that_asks_for_more_cores_than_the_jobs_use_now_gets_what_is_idle() -> None:
    jobs = loader_heavy_mix(core_share=1.0)
    rates = np.array([150.0, 150.0, 100.0])
    budget = CoreBudget.of(on_cpus(jobs, 2.0), rates, np.ones(3, dtype=bool))
    assert budget is not None and budget.busy_now == pytest.approx(2.0)
    more = np.array([150.0, 150.0, 200.0])  # the loader-heavy job with twice the workers
    scaled = budget.spend(more, np.ones(3, dtype=bool))
    assert float(scaled @ budget.cost) == pytest.approx(2.0), "no more cores than the node has"
    idle = replace(budget, cores=4.0)
    assert idle.spend(more, np.ones(3, dtype=bool)) == pytest.approx(more), "idle cores serve it"


def test_without_every_jobs_cpu_clocks_the_loaders_only_model_stands() -> None:
    jobs = loader_heavy_mix()
    unmeasured = (*jobs[:2], replace(jobs[2], cpu_cost_s=None))
    request = on_cpus(unmeasured, 2.0)
    assert CoreBudget.of(request, np.ones(3), np.ones(3, dtype=bool)) is None
    assert lookahead(request) == lookahead(on_cpus(unmeasured, None))


@pytest.mark.parametrize("cost", [0.0, -1.0, float("inf"), float("nan")])
def test_a_cpu_cost_no_job_could_have_is_refused_by_name(cost: float) -> None:
    with pytest.raises(InvalidRequest) as raised:
        replace(loader_heavy_mix()[2], cpu_cost_s=cost)
    assert raised.value.field == "jobs[heavy].cpu_cost_s"


@pytest.mark.parametrize("share", [0.0, 1.5, float("nan")])
def test_a_core_share_past_a_core_is_refused_by_name(share: float) -> None:
    with pytest.raises(InvalidRequest) as raised:
        replace(loader_heavy_mix()[2], core_share=share)
    assert raised.value.field == "jobs[heavy].core_share"


def test_a_node_of_no_cores_is_refused_by_name() -> None:
    with pytest.raises(InvalidRequest) as raised:
        NodeSpec(cpu_workers=4, cpu_cores=0.0)
    assert raised.value.field == "node.cpu_cores"


def test_a_job_at_a_core_per_thread_leaves_the_rest_to_the_others() -> None:
    """Water-filling: the job whose threads already get 90 % of a core can go 1.11 times
    faster, no more; the one at a quarter takes what it leaves of the freed cores."""
    cost = np.array([0.01, 0.01, 0.01])
    budget = CoreBudget(
        cores=3.0, cost=cost, fastest=1.0 / np.array([0.9, 0.25, 0.25]), busy_now=3.0
    )
    rates = np.array([100.0, 100.0, 100.0])
    scaled = budget.spend(rates, np.array([True, True, False]))
    assert scaled[0] == pytest.approx(100.0 / 0.9)
    assert scaled[1] == pytest.approx(300.0 - 100.0 / 0.9), "the third job's core, and more"
    assert float(scaled[:2] @ cost[:2]) == pytest.approx(3.0)


def test_curves_that_put_the_jobs_over_the_node_are_scaled_to_its_cores() -> None:
    cost = np.array([0.01, 0.01])
    budget = CoreBudget(cores=2.0, cost=cost, fastest=np.array([4.0, 4.0]), busy_now=2.2)
    scaled = budget.spend(np.array([110.0, 110.0]), np.ones(2, dtype=bool))
    assert float(scaled @ cost) == pytest.approx(2.0)
