"""The makespan floor and throughput ceiling hold for every policy and are tight where they
should be."""

from pathlib import Path

import pytest

from tests.unit.workloads.builders import job, workload
from workloads.bounds import run_bounds
from workloads.generator import GeneratorOptions, generate_workload
from workloads.simulator import simulate
from workloads.spec import load_workload
from workloads.truth import NodeTruth

REPO = Path(__file__).resolve().parents[3]
POLICIES = ("static", "balance", "waa", "optimal", "oracle")


def test_a_long_gpu_bound_job_sets_the_floor() -> None:
    truth = NodeTruth()
    jobs = workload(
        job("short", iterations=10, arrival_s=5.0),
        job("long", iterations=1000, arrival_s=20.0),
    ).jobs
    bounds = run_bounds(truth, 18, jobs, {"short": 0.1, "long": 0.5})
    assert bounds.makespan_s == pytest.approx(20.0 + 1000 * 0.5 - 5.0)
    assert bounds.binding == "gpu:long"
    samples = (10 + 1000) * 64
    assert bounds.throughput_samples_per_s == pytest.approx(samples / bounds.makespan_s)


def test_loading_sets_the_floor_from_the_latest_arrival_that_binds() -> None:
    truth = NodeTruth()
    per_s = truth.capacity(18) / truth.cost("imagenet")  # samples/s the node can ever load
    jobs = workload(
        job("early", iterations=10, arrival_s=0.0),
        job("late_a", iterations=5000, arrival_s=100.0),
        job("late_b", iterations=5000, arrival_s=100.0),
    ).jobs
    bounds = run_bounds(truth, 18, jobs, {"early": 1e-6, "late_a": 1e-6, "late_b": 1e-6})
    assert bounds.binding == "loading"
    # The early job's samples may load before 100 s; the late ones cannot start before.
    assert bounds.makespan_s == pytest.approx(100.0 + 2 * 5000 * 64 / per_s)


def test_fewer_loader_processes_lower_the_ceiling() -> None:
    truth = NodeTruth()
    jobs = workload(job("a", iterations=2000), job("b", iterations=2000)).jobs
    steps = {"a": 1e-6, "b": 1e-6}
    assert (
        run_bounds(truth, 4, jobs, steps).throughput_samples_per_s
        < run_bounds(truth, 18, jobs, steps).throughput_samples_per_s
    )


@pytest.mark.parametrize("seed", range(4))
def test_no_policy_beats_the_bounds_on_random_workloads(seed: int) -> None:
    spec = generate_workload(GeneratorOptions(jobs=8, seed=seed, mean_interarrival_s=60.0))
    for policy in POLICIES:
        result = simulate(spec, policy, seed=seed)
        assert result.makespan_s >= result.bounds.makespan_s, policy
        assert result.throughput_samples_per_s <= result.bounds.throughput_samples_per_s, policy


@pytest.mark.parametrize(
    ("name", "binding"), [("paper-static", "loading"), ("paper-dynamic", "gpu:app4")]
)
def test_the_paper_workloads_run_close_to_their_bounds(name: str, binding: str) -> None:
    # The gap is launch, pause and resume costs plus the soft minimum near the knee: within
    # 15 % for the best policy, which is why docs/results.md can call goals past the bound
    # unreachable rather than missed by the policy.
    spec = load_workload(REPO / "configs" / "workloads" / f"{name}.toml")
    results = [simulate(spec, policy, seed=0) for policy in ("balance", "optimal", "oracle")]
    assert {result.bounds.binding for result in results} == {binding}
    best = min(result.makespan_s for result in results)
    floor = results[0].bounds.makespan_s
    assert floor <= best <= 1.15 * floor
