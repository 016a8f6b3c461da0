"""Issue 37, finding 1: one job's absurd numbers halted planning for the whole node. A
job's process sent heartbeats the schema accepted (`samples` 10^18, seconds and rates of
1e308, a literal Infinity, an iteration of 2^64); every round then raised or never ended,
another tenant's job stayed `submitted`, and core and store came to disagree. Now such a
message is refused at the edge; a learned curve is held to what a job can do; a plan that
still fails on one job's curve plans it on its prior and says so; and whatever the core
changed before an event raised is carried out, so that the store agrees with it."""

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from agents.protocol import Hello, PausedMessage, ProtocolError, decode_agent
from allocator import (
    AllocationPlan,
    AllocationRequest,
    ContentionCurve,
    JobSpec,
    NodeSpec,
    allocate,
)
from daemon.items import FromAgent
from daemon.wording import curve_refused_words
from scheduler.config import SchedulerConfig
from scheduler.guard import plan_surviving
from scheduler.messages import Command, Heartbeat, JobSubmitted, StateChanged
from scheduler.states import JobState
from tests.unit.daemon.service_harness import Driver
from tests.unit.scheduler.builders import job, only, scheduler

NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)


def said(driver: Driver, data: dict[str, object]) -> None:
    """Bytes from a job's process, as the agent link takes them: refused if they are not a
    message of the protocol, else delivered with the launch's secret."""
    secret = driver.service.agent_secrets.get(str(data["job"]), "")
    raw = json.dumps({**data, "secret": secret}).replace('"INF"', "Infinity").encode()
    try:
        message = decode_agent(raw)
    except ProtocolError as error:
        driver.service.link.refuse(str(data["job"]).encode(), error.reason)
        return
    driver.service.step(FromAgent(message))


def agree(driver: Driver) -> None:
    """Every job the core knows has the state the store has."""
    for job_id, status in driver.service.scheduler.jobs().items():
        assert driver.state(job_id) == status.state.value, job_id


def settled(driver: Driver, at: float) -> None:
    """Each job the round paused says so, and each it launched says hello."""
    gen = driver.service.scheduler.generation
    for job_id, status in driver.service.scheduler.jobs().items():
        if status.state is JobState.PAUSING:
            driver.at(at).agent(PausedMessage(job=job_id, gen=gen, iteration=status.iteration))
    for job_id, status in driver.service.scheduler.jobs().items():
        if status.state is JobState.STARTING:
            driver.at(at).agent(Hello(job=job_id, gen=gen, pid=driver.launcher.live[job_id]))


def running_workers(driver: Driver, job_id: str) -> int:
    allocation = driver.service.snapshot().jobs[job_id].allocation
    assert allocation is not None
    return allocation.workers_per_gpu


ABSURD = [
    {"samples": 10**18, "idle_s": 1e308, "step_s": 1e308, "samples_per_s": 1e308},
    {"samples": 64, "idle_s": "INF", "step_s": 1.0, "samples_per_s": 64.0},
    {"samples": 64, "idle_s": 0.1, "step_s": 0.9, "samples_per_s": 64.0, "iteration": 2**64},
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("numbers", ABSURD)
def test_one_jobs_absurd_heartbeats_leave_another_tenants_job_planned(
    tmp_path: Path, numbers: dict[str, object]
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        workers = running_workers(driver, "a")
        for second in range(5):
            beat = {"type": "heartbeat", "job": "a", "gen": 1, "iteration": 10 + second}
            said(driver.at(2.0 + second), {**beat, "workers": workers, **numbers})
        assert driver.service.link.malformed == 5, "each refused at the edge"
        driver.at(8.0).submit("b", tenant="bob")
        settled(driver, 8.5)
        driver.at(9.0).tick()
        assert driver.state("b") == "running" and driver.state("a") in ("running", "resuming")
        agree(driver)
        await driver.close()

    asyncio.run(scenario())


@pytest.mark.timeout(120)
def test_absurd_numbers_fed_past_the_edge_are_clamped_and_planning_goes_on(
    tmp_path: Path,
) -> None:
    """The core's own defence (the simulator feeds it without the protocol): a curve
    learned from rates of 1e308 and infinities is held to what a job can do."""

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        workers = running_workers(driver, "a")
        for second, (rate, cost) in enumerate([(1e308, 1e-308), (1e308, float("inf"))] * 3):
            driver.at(2.0 + second).service.feed(
                Heartbeat("a", 1, 10 + second, rate, 0.5, workers, loader_cost_s=cost)
            )
        curve = driver.service.snapshot().jobs["a"].curve
        assert curve is not None and curve.max_samples_per_s <= 1e8
        driver.at(9.0).submit("b", tenant="bob")
        settled(driver, 9.5)
        driver.at(10.0).tick()
        assert driver.state("b") == "running"
        agree(driver)
        await driver.close()

    asyncio.run(scenario())


def spec(job_id: str, seconds: float) -> JobSpec:
    """A job whose step and sample cost are `seconds`."""
    return JobSpec(job_id, 1, 64, 1e7, seconds, seconds, remaining_samples=6400.0)


TINY = 1e-320  # positive and finite, as a JobSpec asks, yet its rates are infinite


def test_a_plan_that_fails_on_one_learned_curve_plans_that_job_on_its_prior() -> None:
    node = NodeSpec(cpu_workers=8, contention=ContentionCurve.contention_free())

    def plan(specs: Sequence[JobSpec]) -> AllocationPlan:
        return allocate(AllocationRequest(node, tuple(specs)), "lookahead")

    learned = [spec("a", 0.1), spec("bad", TINY), spec("c", 0.2)]
    with pytest.raises((ArithmeticError, ValueError, RuntimeWarning)):  # 0.0 ** -1, an overflow
        plan(learned)
    priors = [None, spec("bad", 0.1), spec("c", 0.3)]
    found, refused = plan_surviving(plan, learned, priors)
    assert [refusal.job_id for refusal in refused] == ["bad"]
    assert "reported numbers were refused" in curve_refused_words(refused[0])
    assert set(found.allocations) == {"a", "bad", "c"}


def test_an_event_that_raises_part_way_leaves_the_commands_of_what_it_changed() -> None:
    """A round that moved its arrivals to pending and then failed kept them pending in
    the core but not in the store (IllegalTransition later, a job running that the API
    called submitted). The commands decided before the failure come back in `out`."""
    core = scheduler(policy="lookahead")
    out: list[Command] = []
    broken = job("a", step_time_s=TINY, sample_cost_s=TINY)  # no learned curve to go back to
    with pytest.raises((ArithmeticError, ValueError, RuntimeWarning)):
        core.handle(JobSubmitted(broken), 0.0, out)
    moves = only(out, StateChanged)
    assert [(move.old, move.new) for move in moves] == [(JobState.SUBMITTED, JobState.PENDING)]
    assert core.status("a").state is JobState.PENDING
