"""Each job's curve, learned from its own heartbeats: a known curve is recovered from noisy
simulated telemetry however wrong the prior, a job that never waits bounds its loaders'
cost, a device job's loaders are left alone, and the core plans with what it learned."""

import math
import random
from dataclasses import replace

import pytest

from allocator import ContentionCurve, InvalidRequest, JobSpec, NodeSpec
from allocator.throughput import job_samples_per_s
from scheduler.config import SchedulerConfig
from scheduler.curves import JobCurve, Observation
from scheduler.messages import (
    AgentHello,
    Finished,
    Heartbeat,
    JobSubmitted,
    Launch,
    Pause,
    Paused,
    Planned,
    Resume,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from tests.unit.scheduler.builders import job, only

TRUTH = JobSpec(
    id="j", gpus=1, batch_size=64, model_params=1e6, step_time_s=0.1, sample_cost_s=0.02
)
EFFICIENCY = 0.9


def heartbeat(
    truth: JobSpec, workers: int, noise: float, efficiency: float = EFFICIENCY
) -> Observation:
    """What a job whose true curve is `truth` reports with `workers` per GPU."""
    rate = job_samples_per_s(truth, workers, efficiency) * noise
    iteration_s = truth.batch_size / rate
    idle = max(0.0, 1.0 - truth.step_time_s / iteration_s)
    return Observation(rate, idle, workers, efficiency)


def test_a_known_curve_is_recovered_within_5_percent_from_noisy_heartbeats() -> None:
    rng = random.Random(7)
    for prior in (
        replace(TRUTH, step_time_s=0.2, sample_cost_s=0.01),  # twice, and half, the truth
        replace(TRUTH, step_time_s=0.05, sample_cost_s=0.05),
    ):
        curve = JobCurve()
        for beat in range(60):  # starved with 2 workers, fed with 16, in turn
            workers = 2 if beat % 2 else 16
            curve.observe(prior, heartbeat(TRUTH, workers, math.exp(rng.gauss(0.0, 0.03))))
        learned = curve.learned(prior)
        assert learned.step_time_s == pytest.approx(TRUTH.step_time_s, rel=0.05)
        assert learned.sample_cost_s == pytest.approx(TRUTH.sample_cost_s, rel=0.05)
        for workers in range(1, 21):
            truth = job_samples_per_s(TRUTH, workers, EFFICIENCY)
            assert job_samples_per_s(learned, workers, EFFICIENCY) == pytest.approx(truth, rel=0.05)


def test_a_curve_that_bends_early_is_recovered_from_two_operating_points() -> None:
    # Synergy's AlexNet profile fits p = 2.5: at its hard knee (6 workers here) it runs at
    # 76 % of its GPU's rate. One operating point cannot tell that from a slower loader.
    bends = replace(TRUTH, knee_sharpness=2.5)
    prior = replace(TRUTH, step_time_s=0.2, sample_cost_s=0.01)
    rng = random.Random(11)
    curve = JobCurve()
    for _ in range(20):
        curve.observe(prior, heartbeat(bends, 4, math.exp(rng.gauss(0.0, 0.03))))
    assert curve.learned(prior).knee_sharpness is None, "one point: the plan's default"
    for _ in range(20):
        curve.observe(prior, heartbeat(bends, 8, math.exp(rng.gauss(0.0, 0.03))))
    learned = curve.learned(prior)
    assert learned.knee_sharpness == pytest.approx(2.5, abs=0.6)
    for workers in range(1, 25):
        truth = job_samples_per_s(bends, workers, EFFICIENCY)
        assert job_samples_per_s(learned, workers, EFFICIENCY) == pytest.approx(truth, rel=0.05)


def timed(truth: JobSpec, workers: int, noise: float, timer_noise: float) -> Observation:
    """`heartbeat`, and the SDK's timing of a loader worker: c / eta, with its own noise."""
    seen = heartbeat(truth, workers, noise)
    return replace(seen, loader_cost_s=truth.sample_cost_s / EFFICIENCY * timer_noise)


@pytest.mark.parametrize(("sharpness", "workers"), [(2.5, 14), (2.5, 20), (5.0, 11), (8.0, 14)])
def test_a_timed_job_shows_its_bend_at_one_operating_point(sharpness: float, workers: int) -> None:
    # The hard knee of TRUTH is at 14.2 workers: 14 is at it, 20 past it, 11 before it.
    bends = replace(TRUTH, knee_sharpness=sharpness)
    prior = replace(TRUTH, step_time_s=0.2, sample_cost_s=0.01)
    rng = random.Random(13)
    curve = JobCurve()
    for _ in range(30):
        noises = (math.exp(rng.gauss(0.0, 0.03)) for _ in range(2))
        curve.observe(prior, timed(bends, workers, *noises))
    learned = curve.learned(prior)
    assert learned.knee_sharpness == pytest.approx(sharpness, rel=0.3)
    for at in range(1, 25):
        truth = job_samples_per_s(bends, at, EFFICIENCY)
        assert job_samples_per_s(learned, at, EFFICIENCY) == pytest.approx(truth, rel=0.05), at


def test_a_fed_jobs_timing_measures_its_cost_and_says_nothing_of_the_bend() -> None:
    # With 16 workers it never waits: untimed, that only bounds c from above (a ceiling
    # twice the truth here); timed, it is c itself. The bend needs a wait.
    fed = timed(TRUTH, 16, 1.0, 1.0)
    assert fed.idle_fraction < 0.05
    untimed, clocked = JobCurve(), JobCurve()
    prior = replace(TRUTH, sample_cost_s=0.005)  # a quarter of the truth
    for _ in range(5):
        untimed.observe(prior, replace(fed, loader_cost_s=0.0))
        clocked.observe(prior, fed)
    assert untimed.learned(prior).sample_cost_s == prior.sample_cost_s, "below its ceiling"
    assert clocked.learned(prior).sample_cost_s == pytest.approx(TRUTH.sample_cost_s, rel=0.05)
    assert not clocked.bends and clocked.learned(prior).knee_sharpness is None


def test_the_prior_fades_as_measurements_come_and_an_odd_heartbeat_is_outvoted() -> None:
    for factor, within in ((2.0, (0.10, 0.05)), (10.0, (None, None, 0.10))):
        prior = replace(TRUTH, step_time_s=TRUTH.step_time_s * factor)
        curve = JobCurve()
        errors = []
        for _ in range(3):
            curve.observe(prior, heartbeat(TRUTH, 16, 1.0))
            errors.append(curve.learned(prior).step_time_s / TRUTH.step_time_s - 1)
        assert errors == sorted(errors, reverse=True), "closer with each heartbeat"
        for error, bound in zip(errors, within, strict=False):
            assert bound is None or error < bound, (factor, errors)  # as the module says
    assert JobCurve().learned(prior) == prior, "no heartbeat, the prior"
    curve = JobCurve()
    for noise in (1.0, 1.0, 0.02, 1.0, 1.0):  # one heartbeat 50x slow (a stall)
        curve.observe(TRUTH, heartbeat(TRUTH, 16, noise))
    assert curve.learned(TRUTH).step_time_s == pytest.approx(TRUTH.step_time_s, rel=0.01)


def test_a_job_that_never_waits_bounds_its_loaders_cost() -> None:
    prior = replace(TRUTH, sample_cost_s=0.1)  # says 16 workers could not keep up
    curve = JobCurve()
    for _ in range(5):
        curve.observe(prior, heartbeat(TRUTH, 16, 1.0))  # they did: never idle
    learned = curve.learned(prior)
    assert not curve.sample_costs and learned.sample_cost_s < prior.sample_cost_s
    fed = job_samples_per_s(TRUTH, 16, EFFICIENCY)
    assert job_samples_per_s(learned, 16, EFFICIENCY) == pytest.approx(fed, rel=0.01)


def test_a_device_jobs_heartbeat_leaves_its_loaders_cost_alone() -> None:
    curve = JobCurve()
    starved = heartbeat(TRUTH, 2, 1.0)
    curve.observe(TRUTH, replace(starved, loaders=False))
    assert curve.learned(TRUTH).sample_cost_s == TRUTH.sample_cost_s
    assert curve.step_seen == 1 and curve.cost_seen == 0


def test_the_cpu_clocks_say_a_jobs_cpu_cost_and_core_share_from_the_third_heartbeat() -> None:
    """No prior: what the clocks measured, the median. The share of a core is CPU time over
    CPU time and run-queue wait: a worker that waits on a file, and not for a core, got
    all of the core it could use."""
    curve = JobCurve()
    clocked = replace(
        heartbeat(TRUTH, 2, 1.0),
        loader_cost_s=0.02,
        loader_cpu_s=0.004,
        loader_wait_s=0.004,
        cpu_cost_s=0.03,
    )
    odd = replace(clocked, loader_wait_s=0.0, cpu_cost_s=0.3)
    for beat in (clocked, odd):
        curve.observe(TRUTH, beat)
        learned = curve.learned(TRUTH)
        assert (learned.cpu_cost_s, learned.core_share) == (None, None), "not yet measured"
    curve.observe(TRUTH, clocked)
    learned = curve.learned(TRUTH)
    assert learned.cpu_cost_s == pytest.approx(0.03), "the odd one outvoted"
    assert learned.core_share == pytest.approx(0.5), "as long waiting for a core as on one"
    for _ in range(3):
        curve.observe(TRUTH, odd)
    assert curve.learned(TRUTH).core_share == 1.0, "12 ms of 20 on a file: no contention"
    unclocked = JobCurve()
    for _ in range(5):
        unclocked.observe(TRUTH, replace(clocked, loader_cpu_s=0.0, cpu_cost_s=0.0))
    assert unclocked.learned(TRUTH).cpu_cost_s is None, "an SDK before version 5"


def test_waits_for_a_passs_first_batch_are_a_cost_per_pass_not_slow_loaders() -> None:
    """Short epochs: a fifth of the time waiting for each epoch's first batch while the
    loaders keep up. Read as the loaders', that wait would promise a quarter more from
    twice the workers; apart, the curve says what the job runs at, and that workers add
    nothing (its pipeline's start-up, not its throughput, is the wait)."""
    fed = heartbeat(TRUTH, 16, 1.0)  # 640 samples/s, its GPU's rate; loaders to spare
    overhead_s = 0.25 / fed.samples_per_s  # seconds per sample at the passes' starts
    rate = 1.0 / (1.0 / fed.samples_per_s + overhead_s)  # 512 samples/s, as measured
    refill = 1.0 - rate / fed.samples_per_s  # the share of time those waits take
    seen = replace(fed, samples_per_s=rate, idle_fraction=refill, refill_fraction=refill)
    curve, apart = JobCurve(), JobCurve()
    for _ in range(10):
        curve.observe(TRUTH, replace(seen, refill_fraction=0.0))  # as an SDK before v6
        apart.observe(TRUTH, seen)
    learned = apart.learned(TRUTH)
    assert learned.overhead_s == pytest.approx(overhead_s, rel=0.01)
    for workers in (16, 32):
        assert job_samples_per_s(learned, workers, EFFICIENCY) == pytest.approx(rate, rel=0.02)
    together = curve.learned(TRUTH)
    more = job_samples_per_s(together, 32, EFFICIENCY)
    assert more > 1.2 * rate, "read as the loaders', twice the workers promise 25 % more"


def test_a_wait_that_workers_with_plenty_to_spare_cannot_explain_is_the_hand_over() -> None:
    """Timed workers that make 4 times what the step takes, and still 6 % of the time spent
    waiting for each batch: taking it over from them, a cost per batch. Read as the
    loaders' (a soft bend, p = 1.5, as `stoker demo`'s jobs were), fewer workers would be
    predicted slower than they are; kept apart, the job's rate stands from 2 workers on."""
    step_rate = TRUTH.max_samples_per_s  # 640 samples/s
    rate = step_rate * (1.0 - 0.06)
    loader_cost_s = 16 / (4.0 * step_rate)  # 16 workers making 4 times the step's intake
    seen = Observation(rate, 0.06, 16, EFFICIENCY, loader_cost_s=loader_cost_s)
    curve = JobCurve()
    for _ in range(10):
        curve.observe(TRUTH, seen)
    learned = curve.learned(TRUTH)
    assert learned.knee_sharpness is None, "no bend"
    assert learned.overhead_s == pytest.approx(0.06 / rate, rel=0.01)
    for workers in (8, 16, 32):  # 2 to 8 times the step's intake
        assert job_samples_per_s(learned, workers, 1.0) == pytest.approx(rate, rel=0.02)
    # Workers making 1.75 times the intake and 64 % of the time waiting (the README's
    # tabular example): no bend explains that much; what the softest leaves is the hand-over.
    slow_hand = JobCurve()
    taking = step_rate * (1.0 - 0.64)
    for _ in range(10):
        slow_hand.observe(
            TRUTH, Observation(taking, 0.64, 7, 1.0, loader_cost_s=7 / (1.75 * step_rate))
        )
    learned = slow_hand.learned(TRUTH)
    assert learned.overhead_s > 0.5 * 0.64 / taking
    assert job_samples_per_s(learned, 7, 1.0) == pytest.approx(taking, rel=0.05)
    near = JobCurve()  # workers making 1.2 times the intake: their wait, their bend
    for _ in range(10):
        near.observe(TRUTH, replace(seen, loader_cost_s=16 / (1.2 * step_rate)))
    assert near.learned(TRUTH).overhead_s == 0.0
    assert near.learned(TRUTH).knee_sharpness is not None


def test_a_curve_follows_its_share_of_the_cores_within_a_few_heartbeats() -> None:
    """A CPU-bound step: 10 ms of CPU a batch of 64. A neighbour takes half the core for a
    while, then leaves. The curve's window (30 heartbeats) would lag; the share of a core
    its training thread got (run-queue clocks) says at once what the node gives it now, and
    the job as if alone stays where it was."""
    alone = replace(TRUTH, step_time_s=0.01, sample_cost_s=0.0001)
    fed = heartbeat(alone, 4, 1.0)  # 6,400 samples/s
    per_sample = 0.01 / 64
    solo = replace(fed, train_cpu_s=per_sample, train_wait_s=0.0)
    halved = replace(
        solo, samples_per_s=fed.samples_per_s / 2, train_wait_s=per_sample
    )  # the step's wall doubles: as long in the run queue as on the core
    curve = JobCurve()
    for _ in range(20):
        curve.observe(alone, solo)
    for _ in range(3):
        curve.observe(alone, halved)
    assert job_samples_per_s(curve.learned(alone), 4, EFFICIENCY) == pytest.approx(
        fed.samples_per_s / 2, rel=0.02
    )
    assert curve.learned(alone, alone=True).step_time_s == pytest.approx(0.01, rel=0.02)
    for _ in range(2):
        curve.observe(alone, solo)
    assert job_samples_per_s(curve.learned(alone), 4, EFFICIENCY) == pytest.approx(
        fed.samples_per_s, rel=0.02
    ), "the neighbour gone: two heartbeats, not half a window"


# A job whose loaders are twice as slow as its hints say: 20 workers keep it fed, not 10.
SLOW_LOADERS = JobSpec(
    id="a", gpus=1, batch_size=100, model_params=1e6, step_time_s=0.1, sample_cost_s=0.02
)


def launched_alone(config: SchedulerConfig) -> tuple[Scheduler, int]:
    """A core on a node of 40 processes that launched job "a" (its hints: 10 workers keep
    it fed) and heard its hello; the core and the launch's generation."""
    node = NodeSpec(cpu_workers=40, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), config)
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    assert launch.allocation.workers_per_gpu == 10
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    return core, launch.gen


def test_the_core_plans_with_what_a_jobs_heartbeats_taught_it() -> None:
    # A hard knee; the round its learned curve asks for comes after the arrival below.
    config = SchedulerConfig(
        policy="optimal", arrival_window_s=0.0, gate=False, replan_window_s=30.0
    )
    core, gen = launched_alone(config)
    planned = core.status("a").predicted_samples_per_s
    warm_up = Heartbeat("a", gen, 1, 5.0, 0.99, 10)  # the loaders were starting
    core.handle(warm_up, 0.5)
    assert core.status("a").predicted_samples_per_s == planned, "a start's heartbeat: left out"
    for second in range(1, 21):
        seen = heartbeat(SLOW_LOADERS, 10, 1.0, efficiency=1.0)  # no contention
        beat = Heartbeat("a", gen, second * 5, seen.samples_per_s, seen.idle_fraction, 10)
        core.handle(beat, float(second))
    status = core.status("a")
    assert status.measured_samples_per_s == pytest.approx(500.0)
    assert status.predicted_samples_per_s == pytest.approx(500.0, rel=0.05), "learned"
    (pause,) = only(core.handle(JobSubmitted(job("b", step_time_s=10.0)), 21.0), Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 100), 21.5), Resume)
    assert resume.allocation.workers_per_gpu in (19, 20, 21), "planned on its own curve: ~20"


def test_the_core_plans_with_a_jobs_cpu_clocks() -> None:
    core, gen = launched_alone(SchedulerConfig(policy="optimal", arrival_window_s=0.0))
    core.handle(Heartbeat("a", gen, 1, 5.0, 0.99, 10), 0.5)  # the loaders were starting
    seen = heartbeat(SLOW_LOADERS, 10, 1.0, efficiency=1.0)
    for second in range(1, 4):
        beat = Heartbeat(
            "a", gen, second * 5, seen.samples_per_s, seen.idle_fraction, 10,
            loader_cost_s=0.04, loader_cpu_s=0.03, loader_wait_s=0.01, cpu_cost_s=0.05,
        )  # fmt: skip
        core.handle(beat, float(second))
    curve = core.status("a").curve
    assert curve is not None
    assert curve.cpu_cost_s == pytest.approx(0.05)
    assert curve.core_share == pytest.approx(0.75)


def test_on_a_cpu_node_a_round_comes_once_every_running_job_is_clocked() -> None:
    """Its plans weighed splits without the node's core budget (allocator/cpunode.py) while
    a job's CPU clocks were unknown: once all are, one round weighs them on it."""
    node = NodeSpec(cpu_workers=4, contention=ContentionCurve.contention_free(), cpu_cores=2.0)
    config = SchedulerConfig(
        policy="lookahead", arrival_window_s=0.0, replan_window_s=1.0, replan_error=100.0
    )
    core = Scheduler(node, RateModel(), config)
    launches = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    launches += only(core.handle(JobSubmitted(job("b")), 0.0), Launch)
    workers = {launch.job_id: launch.allocation.workers_per_gpu for launch in launches}
    for launch in launches:
        core.handle(AgentHello(launch.job_id, launch.gen, 0), 0.0)

    def beat(job_id: str, at: float, clocked: bool) -> list[Planned]:
        on = 1.0 if clocked else 0.0  # the clocks, or none
        event = Heartbeat(
            job_id, core.generation, int(at * 10), 500.0, 0.0, workers[job_id],
            loader_cost_s=0.008, loader_cpu_s=0.004 * on, loader_wait_s=0.004 * on,
            cpu_cost_s=0.01 * on,
        )  # fmt: skip
        planned = only(core.handle(event, at), Planned)
        return planned + only(core.handle(Tick(), at + 0.01), Planned)

    rounds: list[Planned] = []
    for second in range(1, 6):  # a clocked from its second heartbeat on, b not
        rounds += beat("a", float(second), clocked=True)
        rounds += beat("b", second + 0.5, clocked=False)
    assert not rounds, "b's clocks unknown: a round could not use them"
    for second in range(6, 10):
        rounds += beat("a", float(second), clocked=True)
        rounds += beat("b", second + 0.5, clocked=True)
    assert len(rounds) == 1, rounds
    assert any("one budget of 2 CPUs" in note for note in rounds[0].plan.notes)


def _beats_until_paused(config: SchedulerConfig) -> list[Pause]:
    """`launched_alone`'s job, with loaders twice as slow as its hints, sending 20
    heartbeats; the pauses the core ordered."""
    core, gen = launched_alone(config)
    pauses: list[Pause] = []
    for second in range(1, 21):
        seen = heartbeat(SLOW_LOADERS, 10, 1.0, efficiency=1.0)
        beat = Heartbeat("a", gen, second * 5, seen.samples_per_s, seen.idle_fraction, 10)
        pauses += [c for c in core.handle(beat, float(second)) if isinstance(c, Pause)]
        if pauses:
            (resume,) = only(core.handle(Paused("a", pauses[0].gen, 100), second + 0.5), Resume)
            assert resume.allocation.workers_per_gpu in (19, 20, 21), "its own curve: ~20"
            break
    return pauses


def test_a_curve_learned_far_from_the_plan_asks_for_a_new_round_without_an_arrival() -> None:
    config = SchedulerConfig(
        policy="optimal", arrival_window_s=0.0, completion_window_s=0.0, gate=False
    )
    assert len(_beats_until_paused(config)) == 1, "re-planned on what it learned"
    patient = replace(config, replan_error=0.6)  # learned 0.5x the plan: within this
    assert _beats_until_paused(patient) == [], "within replan_error: the plan stands"


@pytest.mark.parametrize(("clocked", "rounds"), [(True, 0), (False, 1)])
def test_a_neighbour_taking_half_the_cores_is_no_reason_for_a_round(
    clocked: bool, rounds: int
) -> None:
    """The job runs at half its rate because another's threads hold the core half the time
    (its training thread waits as long as it runs): the round a learned curve asks for is
    for the job's own curve, which that does not change. Without the run-queue clocks (an
    SDK before version 6) the same heartbeats read as a job half as fast."""
    config = SchedulerConfig(
        policy="optimal",
        arrival_window_s=0.0,
        completion_window_s=0.0,
        replan_window_s=0.0,
        gate=False,
    )
    core, gen = launched_alone(config)
    fed = SLOW_LOADERS.max_samples_per_s  # 1,000 samples/s, its 10 workers keeping up
    per_sample = SLOW_LOADERS.step_time_s / SLOW_LOADERS.batch_size
    plans: list[Planned] = []
    for second in range(1, 21):
        slowed = second > 5
        rate = fed / 2 if slowed else fed
        wait = per_sample if slowed else 0.0
        beat = Heartbeat(
            "a", gen, second * 5, rate, 0.0, 10,
            train_cpu_s=per_sample if clocked else 0.0, train_wait_s=wait if clocked else 0.0,
        )  # fmt: skip
        plans += [c for c in core.handle(beat, float(second)) if isinstance(c, Planned)]
    assert len(plans) == rounds
    if clocked:
        assert core.status("a").predicted_samples_per_s == pytest.approx(fed / 2, rel=0.02)


@pytest.mark.parametrize("window_s", [5.0, 12.0])
def test_the_round_a_learned_curve_asks_for_waits_the_replan_window(window_s: float) -> None:
    # The completion window stays 30 s: the round comes after the replan window, not it.
    config = SchedulerConfig(policy="optimal", arrival_window_s=0.0, gate=False)
    core, gen = launched_alone(replace(config, replan_window_s=window_s))
    paused_at: list[int] = []
    for second in range(1, 21):
        seen = heartbeat(SLOW_LOADERS, 10, 1.0, efficiency=1.0)
        beat = Heartbeat("a", gen, second * 5, seen.samples_per_s, seen.idle_fraction, 10)
        paused_at += [second for _ in only(core.handle(beat, float(second)), Pause)]
    # Its first heartbeat times its loaders' start; the second asks, at 2 s.
    assert paused_at == [2 + int(window_s)], paused_at


def test_a_completion_brings_the_round_a_learned_curve_asked_for_forward() -> None:
    # `stoker serve --window 2`: completions wait 2 s, a learned curve's round 12 s. A job
    # that ends meanwhile is served after its own window, not after the replan window.
    config = SchedulerConfig(
        policy="optimal", arrival_window_s=0.0, completion_window_s=1.0, gate=False,
        replan_window_s=12.0,
    )  # fmt: skip
    node = NodeSpec(cpu_workers=40, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), config)
    out = core.handle(JobSubmitted(job("a")), 0.0) + core.handle(JobSubmitted(job("b")), 0.0)
    out += core.handle(Tick(), 0.0)
    gens = {launch.job_id: launch.gen for launch in only(out, Launch)}
    for name, gen in gens.items():
        core.handle(AgentHello(name, gen, 0), 0.0)
    paused_at: list[int] = []
    for second in range(1, 8):
        seen = heartbeat(SLOW_LOADERS, 10, 1.0, efficiency=1.0)
        beat = Heartbeat("a", gens["a"], second * 5, seen.samples_per_s, seen.idle_fraction, 10)
        out = core.handle(beat, float(second))
        if second == 3:  # the learned curve asked for a round at 2 s, due at 14 s
            out += core.handle(Finished("b"), 3.0)
        paused_at += [second for _ in only(out, Pause)]
    assert paused_at == [4], paused_at


@pytest.mark.parametrize("sharpness", [None, 2.0])
def test_the_configs_bend_is_the_prior_of_a_job_that_states_none(sharpness: float | None) -> None:
    config = SchedulerConfig(arrival_window_s=0.0, knee_sharpness=sharpness)  # the default policy
    node = NodeSpec(cpu_workers=40, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), config)
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    workers = launch.allocation.workers_per_gpu
    hinted = RateModel().job_spec(job("a"))
    expected = job_samples_per_s(replace(hinted, knee_sharpness=sharpness or 8.0), workers, 1.0)
    assert core.status("a").predicted_samples_per_s == pytest.approx(expected)
    if sharpness is not None:  # a softer knee: the plan buys more headroom past it
        assert workers > 10


def test_a_bend_that_is_not_positive_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidRequest, match=r"scheduler\.knee_sharpness"):
        SchedulerConfig(knee_sharpness=0.0)


def _rounds_asked(sharpness: float | None, beats: int, noise: float) -> tuple[list[int], float]:
    """Seconds at which a lone job at its hard knee asked for a round (the rate trigger off),
    its bend as `sharpness` says (None: a hard min), its heartbeats' rates and timings with
    `noise`; and the bend it learned."""
    config = SchedulerConfig(arrival_window_s=0.0, replan_error=1.0, replan_window_s=0.0)
    node = NodeSpec(cpu_workers=20, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), config)
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    workers = launch.allocation.workers_per_gpu
    assert workers == 20
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    # Loaders twice as slow as hinted: 20 workers are its hard knee, where it waits for them
    # whatever its bend (against the plan's default, 8).
    hinted = RateModel().job_spec(job("a"))
    truth = replace(hinted, sample_cost_s=2 * hinted.sample_cost_s, knee_sharpness=sharpness)
    rng = random.Random(5)
    rounds: list[int] = []
    for second in range(1, beats + 1):
        rate = job_samples_per_s(truth, workers, 1.0) * math.exp(rng.gauss(0.0, noise))
        idle = max(0.0, 1.0 - rate / truth.max_samples_per_s)
        timing = truth.sample_cost_s * math.exp(rng.gauss(0.0, noise))
        beat = Heartbeat("a", launch.gen, second * 5, rate, idle, workers, timing)
        rounds += [second for _ in only(core.handle(beat, float(second)), Planned)]
    learned = core.status("a").curve
    assert learned is not None and learned.knee_sharpness is not None
    return rounds, learned.knee_sharpness


@pytest.mark.parametrize("sharpness", [2.5, 8.0])
def test_a_bend_learned_far_from_the_plans_asks_for_a_round(sharpness: float) -> None:
    rounds, learned = _rounds_asked(sharpness, beats=7, noise=0.0)
    assert learned == pytest.approx(sharpness, rel=0.05)
    # Its first heartbeat is its loaders' start; the next three measure the bend.
    assert rounds == ([4] if sharpness == 2.5 else []), "a round only for a bend that moved"


def test_a_hard_knee_seen_through_noise_asks_for_no_rounds() -> None:
    # Half its heartbeats read it faster than its loaders (a bend of 24), half a little
    # slower (6 to 10): the median wanders between them, a plan sees no difference.
    rounds, learned = _rounds_asked(None, beats=120, noise=0.03)
    assert learned >= 6.0
    assert rounds == [], rounds


def _eta_truth(processes: int) -> float:
    """A node whose 30 loader processes deliver what 18 would without contention."""
    return {10: 1.0, 30: 0.6}[processes]


def _timed_together(config: SchedulerConfig) -> tuple[Scheduler, int]:
    """`waa` gives each job the workers its hints say keep it fed: "a" alone (10 processes),
    then "a" and "b" (c twice a's: 30 processes), each job timing its loaders at the node's
    contention then, c / eta(D); then "c" arrives and a round plans. While "b" starts, the
    count says 30 but only a's 10 run, and "a" times its loaders at 10. The core and the
    load "a" and "b" ran at together."""
    node = NodeSpec(cpu_workers=60, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), config)
    costs = {"a": 0.01, "b": 0.02}
    now = 0.0

    def beats(count: int, running: dict[str, int]) -> None:
        """Heartbeats of the jobs `running` (id: workers), timed at their processes' load."""
        nonlocal now
        load = sum(running.values())
        for _ in range(count):
            now += 1.0
            for job_id, workers in running.items():
                timing = costs[job_id] / _eta_truth(load)
                beat = Heartbeat(job_id, core.generation, int(now), 1000.0, 0.0, workers, timing)
                core.handle(beat, now)

    def submit(job_id: str) -> list[Launch]:
        request = job(job_id, sample_cost_s=costs[job_id])
        return only(core.handle(JobSubmitted(request), now), Launch)

    for launch in submit("a"):
        core.handle(AgentHello(launch.job_id, launch.gen, 0), now)
    beats(6, {"a": 10})
    starting = submit("b")
    assert core.loader_processes() == 30
    beats(8, {"a": 10})  # "b" starting (a slow import): its loaders not running yet
    for launch in starting:
        core.handle(AgentHello(launch.job_id, launch.gen, 0), now)
    beats(6, {"a": 10, "b": 20})
    core.handle(JobSubmitted(job("c", step_time_s=10.0)), now + 1.0)
    return core, 30


def test_the_node_curve_is_learned_from_jobs_timed_together() -> None:
    """No single-job profile said the node contends (the prior is contention-free); "a"'s
    timings at 10 and 30 processes did, and the plans after it use what they said."""
    config = SchedulerConfig(policy="waa", arrival_window_s=0.0, gate=False)
    core, together = _timed_together(config)
    learned = core.node.contention
    assert learned.efficiency(10) == pytest.approx(1.0)
    assert learned.efficiency(together) == pytest.approx(_eta_truth(together), rel=0.02)
    unlearned = replace(config, learn_contention=False)
    core, together = _timed_together(unlearned)
    assert core.node.contention.efficiency(together) == 1.0, "switched off: the prior stays"
