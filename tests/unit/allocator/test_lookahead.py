"""`lookahead`: plans on the smooth knee for the jobs' finishes, weighing pause costs."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import allocator.lookahead as lookahead_module
from allocator import AllocationRequest, InvalidRequest, allocate
from allocator.lookahead import DEFAULT_PAUSE_COST_S, KNEE_SHARPNESS, lookahead
from allocator.throughput import job_samples_per_s
from tests.unit.allocator.builders import make_job, make_request

FREE = ((1.0, 1.0), (64.0, 1.0))  # no contention: each worker adds its full rate


def test_a_job_alone_gets_headroom_past_its_hard_knee() -> None:
    # 13 workers just match the GPU (1,280 samples/s) under the paper's contention: formula 5
    # stops there, the smooth knee gives 8 % less at that point, so `lookahead` goes on.
    alone = make_job("a", remaining_samples=1e6)
    request = make_request(alone, cpu_workers=40)
    hard = allocate(request, "optimal").workers()["a"]
    plan = lookahead(request)
    assert plan.workers()["a"] > hard
    smooth_at_hard_knee = job_samples_per_s(
        alone, hard, request.node.contention.efficiency(hard), KNEE_SHARPNESS
    )
    assert smooth_at_hard_knee < 0.95 * alone.max_samples_per_s
    assert plan.allocations["a"].predicted_samples_per_s > 0.99 * alone.max_samples_per_s


def test_a_loader_hungry_job_beside_a_gpu_bound_one_gets_the_workers_it_can_use() -> None:
    # The long job's one worker per GPU already delivers 1.6 times what its GPUs take; the
    # short one needs 7 per GPU. Both run near their GPUs' rates.
    long = make_job("long", gpus=2, step_time_s=0.5, sample_cost_s=0.005, remaining_samples=2e5)
    short = make_job("short", gpus=2, step_time_s=0.05, sample_cost_s=0.005, remaining_samples=2e4)
    plan = lookahead(make_request(long, short, cpu_workers=18, contention=FREE))
    assert plan.workers()["long"] <= 2
    for job in (long, short):
        assert plan.allocations[job.id].predicted_samples_per_s > 0.95 * job.max_samples_per_s


def test_a_plan_says_when_its_jobs_end_and_when_they_would_under_balance() -> None:
    # balance gives each 9 workers: the short job runs at its GPU's rate, the long one at
    # 9 / 15 of its own. Alone after the short one ends, it pauses and takes all 18.
    long = make_job("long", step_time_s=0.1, sample_cost_s=0.015, remaining_samples=1e5)
    short = make_job("short", step_time_s=0.1, sample_cost_s=0.001, remaining_samples=1e4)
    plan = lookahead(make_request(long, short, cpu_workers=18, contention=FREE))
    assert plan.balance_makespan_s is not None and plan.predicted_makespan_s is not None
    short_ends = 1e4 / short.max_samples_per_s  # 10 s at 1,000 samples/s, under either
    long_rate = [job_samples_per_s(long, d, 1.0, KNEE_SHARPNESS) for d in (9, 18)]
    after = 1e5 - short_ends * long_rate[0]
    expected = short_ends + DEFAULT_PAUSE_COST_S + after / long_rate[1]
    assert plan.balance_makespan_s == pytest.approx(expected, rel=1e-6)
    assert plan.predicted_makespan_s < plan.balance_makespan_s, "more workers to the long job"
    shown = plan.to_dict()
    assert shown["predicted_makespan_s"] == plan.predicted_makespan_s
    assert shown["balance_workers"] == {"long": 9, "short": 9}, "the split it weighed"
    assert plan.workers()["long"] > 9
    assert "balance_makespan_s" not in allocate(make_request(long, short), "optimal").to_dict()


def test_a_finished_jobs_processes_go_on_when_the_completion_window_closes() -> None:
    """The scheduler plans a finish `regrow_delay_s` later: until then the long job runs
    with its 9 workers, and only then pauses and takes all 18."""
    long = make_job("long", step_time_s=0.1, sample_cost_s=0.015, remaining_samples=1e5)
    short = make_job("short", step_time_s=0.1, sample_cost_s=0.001, remaining_samples=1e4)
    request = replace(make_request(long, short, cpu_workers=18, contention=FREE), regrow_delay_s=5)
    plan = lookahead(request)
    long_rate = [job_samples_per_s(long, d, 1.0, KNEE_SHARPNESS) for d in (9, 18)]
    planned_at = 1e4 / short.max_samples_per_s + 5.0
    after = 1e5 - planned_at * long_rate[0]
    expected = planned_at + DEFAULT_PAUSE_COST_S + after / long_rate[1]
    assert plan.balance_makespan_s == pytest.approx(expected, rel=1e-6)
    with pytest.raises(InvalidRequest, match="regrow_delay_s"):
        replace(request, regrow_delay_s=-1.0)


def test_balances_figure_is_a_run_on_its_split_not_a_move_to_it() -> None:
    """Reported beside the plan, `balance_makespan_s` is what `balance` would take had the
    jobs run on its split: no pause to get there (the candidate's score has it)."""
    running = make_job("a", current_workers_per_gpu=15, remaining_samples=1e5)
    running = replace(running, pause_cost_s=30.0)
    other = make_job("b", current_workers_per_gpu=3, remaining_samples=1e5)
    plan = lookahead(make_request(running, other, cpu_workers=18, contention=FREE))
    rate = job_samples_per_s(running, 9, 1.0, KNEE_SHARPNESS)
    assert plan.balance_makespan_s == pytest.approx(1e5 / rate, rel=1e-6), "both at 9, unpaused"


def test_a_running_job_keeps_its_workers_when_a_move_would_not_pay_its_pause() -> None:
    # The running job has 30 s of work left; a pause of 60 s would cost more than any gain,
    # and the new job can be fed from the processes that are free.
    running = make_job("running", current_workers_per_gpu=6, remaining_samples=38_000)
    running = replace(running, pause_cost_s=60.0)
    new = make_job("new", remaining_samples=1e6)
    plan = lookahead(make_request(running, new, cpu_workers=18, contention=FREE))
    assert plan.workers()["running"] == 6
    assert "keep" in plan.notes[-1]


def test_the_same_move_is_made_when_the_pause_is_cheap_and_the_job_has_long_to_go() -> None:
    running = make_job("running", current_workers_per_gpu=2, remaining_samples=5e6)
    running = replace(running, pause_cost_s=1.0)
    plan = lookahead(make_request(running, cpu_workers=18, contention=FREE))
    assert plan.workers()["running"] > 2, "2 workers feed 20 % of its GPU: worth a pause"


def test_the_job_that_would_end_last_gets_a_worker_another_can_spare(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Filled by marginal gains, the slow loader (`slow`, 0.04 s a sample, bending early) gets
    # 2 workers and ends last, 500 s from now; the fast loader can spare one, the short job
    # another: at 4, 3 and 5 the other two end later (310 and 163 s against 290 and 141)
    # and `slow`, the node's last, 17 s sooner.
    shapes = (
        ("slow", 0.04, 80_000, 2.5),
        ("fast", 0.01, 80_000, 2.5),
        ("short", 0.02, 40_000, None),
    )
    jobs = tuple(
        replace(
            make_job(name, batch_size=64, step_time_s=0.2, sample_cost_s=cost),
            remaining_samples=left,
            knee_sharpness=bend,
            pause_cost_s=1.0,  # a resize in place
        )
        for name, cost, left, bend in shapes
    )
    request = make_request(*jobs, cpu_workers=12, contention=FREE)
    plan = lookahead(request)
    assert plan.workers() == {"slow": 4, "fast": 3, "short": 5}
    assert "refined" in plan.notes[0]
    monkeypatch.setattr(
        lookahead_module, "_refine", lambda jobs, split, ends, predict: (split, ends)
    )
    unrefined = lookahead(request)
    assert unrefined.workers() == {"slow": 2, "fast": 4, "short": 6}
    assert plan.predicted_makespan_s is not None and unrefined.predicted_makespan_s is not None
    assert plan.predicted_makespan_s < 0.97 * unrefined.predicted_makespan_s


def test_a_job_on_more_gpus_than_any_donor_takes_a_worker_from_several() -> None:
    # On a full node a 4-GPU job at 1 worker per GPU ends last (629 s); the 1-GPU jobs end
    # at 104 s. A worker more on each of its GPUs takes one from each of four donors.
    big = replace(
        make_job("big", gpus=4, batch_size=512, step_time_s=0.2, sample_cost_s=0.03),
        remaining_samples=4e5,
        knee_sharpness=2.5,
    )
    small = [
        replace(make_job(f"s{index}", remaining_samples=5e4), knee_sharpness=2.5)
        for index in range(4)
    ]
    plan = lookahead(make_request(big, *small, cpu_workers=24, contention=FREE))
    assert plan.workers() == {"big": 2, "s0": 4, "s1": 4, "s2": 4, "s3": 4}
    assert "refined" in plan.notes[0] and plan.loader_processes == 24


def test_without_the_work_left_it_plans_on_marginal_gains_and_says_so() -> None:
    plan = lookahead(make_request(make_job("a"), make_job("b"), cpu_workers=18))
    assert plan.policy == "lookahead"
    assert "remaining samples unknown" in plan.notes[-1]
    assert plan.loader_processes <= 18


def test_over_capacity_every_gpu_keeps_one_worker() -> None:
    plan = allocate(
        make_request(make_job("a", gpus=4), make_job("b", gpus=4), cpu_workers=6), "lookahead"
    )
    assert plan.over_capacity and set(plan.workers().values()) == {1}


@st.composite
def jobs_with_work_left(draw: st.DrawFn) -> AllocationRequest:
    count = draw(st.integers(1, 5))
    jobs = [
        make_job(
            f"j{index}",
            gpus=draw(st.sampled_from((1, 2, 4))),
            step_time_s=draw(st.floats(0.02, 0.5)),
            sample_cost_s=draw(st.floats(0.002, 0.05)),
            remaining_samples=draw(st.floats(1e3, 1e6)),
            current_workers_per_gpu=draw(st.none() | st.integers(1, 4)),
        )
        for index in range(count)
    ]
    return make_request(*jobs, cpu_workers=draw(st.integers(4, 40)))


@settings(max_examples=60, deadline=None)
@given(request=jobs_with_work_left())
def test_plans_fit_the_node_and_predict_on_the_curve_they_were_made_on(
    request: AllocationRequest,
) -> None:
    plan = lookahead(request)
    if plan.over_capacity:
        return
    assert plan.loader_processes <= request.node.cpu_workers
    assert plan.knee_sharpness == KNEE_SHARPNESS
    for job in request.jobs:
        allocation = plan.allocations[job.id]
        expected = job_samples_per_s(
            job, allocation.workers_per_gpu, plan.efficiency, KNEE_SHARPNESS
        )
        assert allocation.predicted_samples_per_s == pytest.approx(expected)


def test_a_job_with_a_gentle_knee_of_its_own_is_planned_on_it() -> None:
    # Two equal jobs but one bends early (p = 2, about what Synergy's AlexNet profile fits):
    # at the hard knee (13 workers) it runs at 71 % of its GPU's rate. With workers to spare
    # it gets more than its twin, which is near its peak at 16.
    sharp = make_job("sharp", remaining_samples=1e6)
    gentle = replace(make_job("gentle", remaining_samples=1e6), knee_sharpness=2.0)
    request = make_request(sharp, gentle, cpu_workers=40, contention=FREE)
    plan = lookahead(request)
    assert plan.workers()["gentle"] > plan.workers()["sharp"]
    d = plan.workers()["gentle"]
    assert plan.allocations["gentle"].predicted_samples_per_s == pytest.approx(
        job_samples_per_s(gentle, d, 1.0, 2.0)
    )
    assert job_samples_per_s(gentle, d, 1.0, KNEE_SHARPNESS) == job_samples_per_s(
        gentle, d, 1.0, 2.0
    ), "a job's own sharpness wins over the plan's"
    with pytest.raises(ValueError, match="knee_sharpness"):
        replace(gentle, knee_sharpness=0.0)


def test_a_job_of_few_large_samples_is_not_starved_for_one_of_many_small_ones() -> None:
    # Speech at 27 samples/s (its GPU's whole rate) needs 6.4 workers; two vision jobs at
    # 5,000 samples/s need 18.5 each. Per worker the vision jobs gain 270 samples/s and
    # the speech job 4, so a split by samples/s gives speech 1 worker and a 6-fold slower
    # finish. By the share of its GPU's rate a worker buys, speech gets its knee.
    speech = make_job(
        "speech", batch_size=20, step_time_s=20 / 27, sample_cost_s=0.237, remaining_samples=16_200
    )
    vision = [
        make_job(
            name, batch_size=256, step_time_s=256 / 5000, sample_cost_s=0.0037,
            remaining_samples=3e6,
        )
        for name in ("vision-a", "vision-b")
    ]  # fmt: skip
    request = make_request(speech, *vision, cpu_workers=40, contention=FREE)
    assert allocate(request, "optimal").workers()["speech"] <= 2, "samples/s starve it"
    plan = lookahead(request)
    assert plan.workers()["speech"] >= 6
    assert plan.allocations["speech"].predicted_samples_per_s > 0.85 * speech.max_samples_per_s
    # ... and neither vision job is starved for it (shortest first would leave one 9). The
    # twins get the same: by speedup alone one gets 16 and ends 30 s after the other, so the
    # plan gives it a worker of speech's seventh.
    assert plan.workers()["vision-a"] == plan.workers()["vision-b"] >= 15


def test_a_wait_at_each_pass_start_slows_a_job_at_every_split() -> None:
    """Two jobs alike but for a wait for the first batch of each pass (short epochs whose
    workers start afresh): that one runs slower at every split, by its wait per sample,
    which no worker shortens. Short of processes for both, it is the one that would end
    last, and gets the workers that shorten the rest of its samples' time."""
    plain = make_job("plain", step_time_s=0.1, sample_cost_s=0.02, remaining_samples=1e5)
    waits = replace(plain, id="waits", overhead_s=0.25 / plain.max_samples_per_s)
    plan = lookahead(make_request(plain, waits, cpu_workers=40, contention=FREE))
    assert plan.workers()["waits"] > plan.workers()["plain"]
    workers = plan.workers()["waits"]
    steady = job_samples_per_s(plain, workers, 1.0, KNEE_SHARPNESS)
    expected = 1.0 / (1.0 / steady + waits.overhead_s)
    assert plan.allocations["waits"].predicted_samples_per_s == pytest.approx(expected, rel=1e-6)
    assert expected < 0.85 * steady


def test_a_negative_wait_at_a_pass_start_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequest) as raised:
        replace(make_job("j"), overhead_s=-0.001)
    assert "jobs[j].overhead_s" in str(raised.value)


def test_every_plan_names_balance_s_split_whatever_path_it_took() -> None:
    unknown = [make_job("a"), make_job("b"), make_job("c")]  # remaining samples unknown
    for request in (
        make_request(*unknown, cpu_workers=7),  # the greedy fallback
        make_request(*unknown, cpu_workers=3),  # no spare process: one each
    ):
        plan = lookahead(request)
        assert plan.balance_workers == allocate(request, "balance").workers()
    assert lookahead(make_request(*unknown, cpu_workers=7)).balance_workers == {
        "a": 3,
        "b": 2,
        "c": 2,
    }
