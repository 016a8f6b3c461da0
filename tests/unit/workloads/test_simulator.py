from pathlib import Path

import numpy as np
import pytest

from scheduler.config import DEFAULT_POLICY
from tests.unit.workloads.builders import job, workload
from workloads.results import SimulationResult
from workloads.simulator import Simulation, SimulationOptions, simulate
from workloads.spec import Workload, load_workload

REPO = Path(__file__).resolve().parents[3]
STATIC = load_workload(REPO / "configs" / "workloads" / "paper-static.toml")
DYNAMIC = load_workload(REPO / "configs" / "workloads" / "paper-dynamic.toml")
FIG3 = {"balance": 1660.0, "proportion": 1554.0, "inverse": 1928.0}  # images/s


def busiest(result: SimulationResult) -> float:
    """The most loader processes running at once, from the jobs' worker logs."""
    times = sorted({t for j in result.jobs for t, _ in j.workers})
    most = 0.0
    for moment in times:
        total = 0.0
        for j in result.jobs:
            current = [w for t, w in j.workers if t <= moment]
            total += (current[-1] if current else 0) * j.gpus
        most = max(most, total)
    return most


@pytest.mark.parametrize("policy", ["waa", "optimal", "balance", "static", "oracle"])
def test_every_job_finishes_within_the_node(policy: str) -> None:
    result = simulate(DYNAMIC, policy, seed=1)
    assert [j.id for j in result.jobs] == [j.id for j in DYNAMIC.jobs]
    for done, spec in zip(result.jobs, DYNAMIC.jobs, strict=True):
        assert spec.arrival_s <= done.start_s < done.end_s
        assert done.samples == spec.iterations * spec.batch_size
    assert busiest(result) <= DYNAMIC.node.cpu_workers
    samples = sum(j.samples for j in result.jobs)
    assert result.throughput_samples_per_s == pytest.approx(samples / result.makespan_s)
    assert 0.0 <= result.gpu_idle_fraction < 1.0


def test_same_seed_same_run_other_seed_other_run() -> None:
    first, again = simulate(STATIC, "waa", seed=3), simulate(STATIC, "waa", seed=3)
    other = simulate(STATIC, "waa", seed=4)
    assert first.to_dict() == again.to_dict()
    assert other.makespan_s != first.makespan_s


def test_static_runs_the_workers_table_three_asks_for() -> None:
    result = simulate(DYNAMIC, "static", seed=0)
    assert result.reallocations == 0
    for done, spec in zip(result.jobs, DYNAMIC.jobs, strict=True):
        assert {w for _, w in done.workers if w} == {spec.workers_per_gpu}


def test_the_scheduler_plans_with_a_fitted_tpm_and_the_oracle_with_the_truth() -> None:
    fitted = simulate(STATIC, "optimal", seed=0)
    assert fitted.tpm is not None
    assert float(fitted.tpm["training"]["candidates"]["polynomial"]["r2"]) > 0.9  # type: ignore[index]
    assert simulate(STATIC, "oracle", seed=0).tpm is None


def test_a_lone_job_runs_no_faster_than_its_gpu() -> None:
    alone = workload(job("a", iterations=300, workers_per_gpu=6), node={"gpus": 1})
    result = simulate(alone, "optimal", seed=0)
    step = alone.jobs[0].step_time_s(alone.node_truth())
    run = result.jobs[0].end_s - result.jobs[0].start_s
    assert run >= 300 * step * 0.85  # 0.85: the job's own step noise (5 % lognormal)


def test_jobs_wait_for_a_free_gpu_first_come_first_served() -> None:
    queue = workload(
        job("a", iterations=100),
        job("b", iterations=100, arrival_s=1.0),
        job("c", iterations=100, arrival_s=2.0),
        node={"gpus": 1},
    )
    result = simulate(queue, "waa", seed=0)
    a, b, c = result.jobs
    assert a.end_s <= b.start_s and b.end_s <= c.start_s
    assert result.avg_jct_s > (a.end_s - a.start_s)


def test_the_arrival_window_batches_arrivals() -> None:
    def first_start(window: float) -> SimulationResult:
        jobs = (job("a"), job("b", arrival_s=5.0))
        return simulate(workload(*jobs, scheduler={"arrival_window_s": window}), "waa", 0)

    at_once, batched = first_start(0.0), first_start(30.0)
    assert batched.jobs[0].start_s >= 30.0 > at_once.jobs[0].start_s
    assert batched.plans == 1 and at_once.plans == 2


def test_the_gate_saves_pauses() -> None:
    # Over a few seeds: in one run a change the gate keeps can move a later round, so one
    # seed may pause as often either way (seed 0 does, 7 against 7).
    def run(gate: bool, seed: int) -> SimulationResult:
        data = DYNAMIC.model_dump()
        data["scheduler"] = {"gate": gate}
        return simulate(Workload.model_validate(data), "optimal", seed=seed)

    gated = [run(True, seed) for seed in range(3)]
    ungated = [run(False, seed) for seed in range(3)]
    assert all(r.gated_changes > 0 for r in gated)
    assert all(r.gated_changes == 0 for r in ungated)
    assert sum(r.pauses for r in gated) < sum(r.pauses for r in ungated)


def test_baselines_land_within_15_percent_of_fig3() -> None:
    """The truth's calibration (docs/simulator.md): only these three were tuned."""
    for policy, paper in FIG3.items():
        measured = np.mean(
            [simulate(STATIC, policy, seed).sum_job_samples_per_s for seed in range(3)]
        )
        assert measured == pytest.approx(paper, rel=0.15), policy


def test_reallocation_happens_and_is_counted() -> None:
    result = simulate(DYNAMIC, "waa", seed=0)
    assert result.reallocations > 0
    assert result.pause_overhead_s > 0
    paused = [j for j in result.jobs if j.paused_s > 0]
    assert paused and all(any(w == 0 for _, w in j.workers[:-1]) for j in paused)


def test_joint_puts_loading_bound_jobs_on_the_decoder_and_finishes_them_sooner() -> None:
    # Four small-model jobs on a node of 4 loader processes: loading limits all of them.
    jobs = [job(f"j{index}", model="smResnet20", iterations=300) for index in range(4)]
    node = {"gpus": 4, "cpu_workers": 4, "max_jobs_per_gpu": 1}
    with_decoder = workload(*jobs, node=node, truth={"decoder_cores": 8.0})
    cpu_only = simulate(with_decoder, "optimal")
    joint = simulate(with_decoder, "joint")
    assert joint.avg_jct_s < 0.8 * cpu_only.avg_jct_s
    assert joint.makespan_s >= joint.bounds.makespan_s
    assert joint.throughput_samples_per_s <= joint.bounds.throughput_samples_per_s


def test_the_default_policy_loses_to_neither_balance_nor_static_on_paper_dynamic() -> None:
    # Issue 16, item 5: `optimal` took 1,504 s here against balance's 1,478 s and static's
    # 1,470 s; `lookahead` plans for the finishes and weighs each pause.
    ours = simulate(DYNAMIC, DEFAULT_POLICY)
    for baseline in ("balance", "static"):
        theirs = simulate(DYNAMIC, baseline)
        assert ours.makespan_s <= theirs.makespan_s * 1.005, baseline
        assert ours.avg_jct_s <= theirs.avg_jct_s * 1.005, baseline


@pytest.mark.parametrize("hot", [True, False])
def test_a_resize_in_place_costs_its_pause_its_workers_start_and_one_workers_batch(
    hot: bool,
) -> None:
    # The second job's arrival halves the first one's workers (the second still starting),
    # its finish gives them back: two pauses, exactly timed, at 9 and then 18 loader
    # processes on a node whose loaders contend from 4 on.
    costs: dict[str, object] = {"cost_jitter": 0.0, "hot_resize": hot}
    costs |= {"pause_s": 0.3, "resume_s": 0.5} if hot else {"pause_s": 9.0, "resume_s": 7.0}
    costs |= {"contention_free_workers": 4.0, "saturated_capacity": 8.0}
    jobs = workload(
        job("first", iterations=2000),
        job("second", arrival_s=60.0, iterations=200),
        truth=costs,
        scheduler={"gate": False},
    )
    result = simulate(jobs, "balance", seed=0)
    first = next(j for j in result.jobs if j.id == "first")
    assert [workers for _, workers in first.workers] == [18, 0, 9, 0, 18, 0]
    truth = jobs.node_truth()
    # One worker makes the first batch alone, 64 samples at c each, slowed by contention.
    refill = 64 * truth.cost("imagenet") * (1 / truth.efficiency(9) + 1 / truth.efficiency(18))
    expected = 2 * (truth.pause_s + truth.resume_s) + (refill if hot else 0.0)
    assert first.paused_s == pytest.approx(expected)


@pytest.mark.parametrize("hot", [True, False])
def test_the_core_weighs_a_jobs_pauses_as_its_kind_before_it_measures_one(hot: bool) -> None:
    alone = workload(job("solo", iterations=50), truth={"hot_resize": hot})
    simulation = Simulation(alone, SimulationOptions("balance"))
    simulation.run()
    config = alone.scheduler_config("balance")
    expected = config.hot_pause_cost_s if hot else config.default_pause_cost_s
    assert simulation.pause_cost_s("solo") == expected


def test_a_jobs_costs_are_drawn_for_it_whatever_else_runs() -> None:
    """Common random numbers: a job's launch cost comes from its own stream, so adding a
    job beside it (or a policy pausing others more) leaves it as it was."""
    served_at_once = {"arrival_window_s": 0.0}
    alone = workload(job("b"), node={"gpus": 2}, scheduler=served_at_once)
    beside = workload(job("a"), job("b"), node={"gpus": 2}, scheduler=served_at_once)
    started = {
        name: {j.id: j.start_s for j in simulate(load, "static", seed=5).jobs}
        for name, load in (("alone", alone), ("beside", beside))
    }
    assert started["alone"]["b"] > 0.0  # launched at 0, up after a drawn cost
    assert started["beside"]["b"] == started["alone"]["b"]
    assert started["beside"]["a"] != started["beside"]["b"]  # each its own draw
    other_seed = simulate(alone, "static", seed=6).jobs[0].start_s
    assert other_seed != started["alone"]["b"]


# The policies that plan for throughput. The paper's baselines `proportion` and `inverse`
# (Fig. 3) and A-Dloader's `waa` split by their own rules, which lose to `balance` here by
# design (about 60-70 % of its throughput); their jobs grow when another finishes.
THROUGHPUT_POLICIES = ("balance", "static", "optimal", "fair", "joint", "lookahead")


@pytest.mark.parametrize("seed", range(10))
def test_no_policy_pauses_a_static_workload_for_noise_in_what_it_learned(seed: int) -> None:
    results = {policy: simulate(STATIC, policy, seed) for policy in THROUGHPUT_POLICIES}
    balance = results["balance"].throughput_samples_per_s
    for policy, result in results.items():
        assert result.pauses == 0, policy
        assert result.throughput_samples_per_s >= 0.99 * balance, policy
