"""Plans made outside the core (issue 39, item 3): the core asks (`PlanNeeded`), takes other
events while the plan is made, and uses the plan (`PlanMade`) only if what it planned is
still there; else it asks again. Driven as the daemon drives it: `plans_inline=False`, the
plan made by `work_out` whenever the test says."""

import pytest

from allocator import InvalidRequest
from scheduler.messages import (
    AgentHello,
    Allocation,
    Command,
    Finished,
    Heartbeat,
    JobSubmitted,
    Launch,
    Pause,
    PlanAbandoned,
    PlanMade,
    Planned,
    PlanNeeded,
    PlanOutcome,
    Reattached,
    Tick,
)
from scheduler.planning import work_out
from scheduler.reasons import WaitReason
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only, scheduler


def asked(out: list[Command]) -> PlanNeeded:
    (needed,) = only(out, PlanNeeded)
    return needed


def planned_ids(needed: PlanNeeded) -> list[str]:
    return [spec.id for spec in needed.work.request.jobs]


def made(core: Scheduler, needed: PlanNeeded, now: float) -> list[Command]:
    """The plan `needed` asks for, made now and handed back."""
    return core.handle(PlanMade(needed.ticket, work_out(needed.work)), now)


def running(core: Scheduler, job_ids: list[str], now: float) -> None:
    """Submit the jobs, make their plan when their window closes and say hello as their
    agents."""
    for job_id in job_ids:
        core.handle(JobSubmitted(job(job_id)), now)
    window = core.config.arrival_window_s
    launches = only(made(core, asked(core.handle(Tick(), now + window)), now + window), Launch)
    assert sorted(launch.job_id for launch in launches) == sorted(job_ids)
    for launch in launches:
        core.handle(AgentHello(launch.job_id, launch.gen, 0), now + window)
        assert core.status(launch.job_id).state is JobState.RUNNING


def test_a_job_launches_once_its_plan_comes_and_events_flow_meanwhile() -> None:
    core = scheduler(cpu_workers=64, plans_inline=False)
    out = core.handle(JobSubmitted(job("a")), 0.0)
    needed = asked(out)
    assert not only(out, Launch) and planned_ids(needed) == ["a"]
    assert core.planning == 1
    waiting = core.waiting("a", 0.5)
    assert waiting is not None and waiting.reason is WaitReason.PLANNING
    # Time passes and other events come while the plan is made: no second plan is asked.
    assert not only(core.handle(Tick(), 1.0), PlanNeeded)
    assert not only(core.handle(JobSubmitted(job("b")), 1.0), PlanNeeded)
    (launch,) = only(made(core, needed, 1.5), Launch)
    assert (launch.job_id, launch.gen) == ("a", 1)
    assert core.status("a").state is JobState.STARTING


def test_an_arrival_while_a_plan_is_made_gets_the_next_plan() -> None:
    core = scheduler(cpu_workers=64, plans_inline=False)
    first = asked(core.handle(JobSubmitted(job("a")), 0.0))
    core.handle(JobSubmitted(job("b")), 0.1)  # its plan waits for the one in flight
    out = made(core, first, 0.2)
    assert [launch.job_id for launch in only(out, Launch)] == ["a"]
    second = asked(out)  # asked at once, with the room `a` now holds counted
    assert planned_ids(second) == ["b"]
    assert second.work.request.node.cpu_workers < 64
    assert [launch.job_id for launch in only(made(core, second, 0.3), Launch)] == ["b"]


def test_a_job_that_ends_while_its_round_is_planned_is_left_out_and_the_plan_used() -> None:
    core = scheduler(cpu_workers=24, window_s=1.0, plans_inline=False)
    running(core, ["a", "b"], 0.0)
    core.handle(JobSubmitted(job("c")), 1.0)
    needed = asked(core.handle(Tick(), 2.0))  # the arrival window closed: a round
    assert sorted(planned_ids(needed)) == ["a", "b", "c"]
    core.handle(Heartbeat("b", 1, 10_000, 0.1, 0.0, 0), 2.1)
    core.handle(Finished("b"), 2.1)  # while the plan is made
    out = made(core, needed, 2.2)
    # Not thrown away (on a busy node something ends during every long plan): used for
    # the jobs still as they were; what b freed goes to the round its finish brings.
    (round_plan,) = only(out, Planned)
    assert sorted(round_plan.plan.allocations) == ["a", "b", "c"]
    assert core.status("c").state is JobState.PENDING  # taken by the round
    assert not only(out, PlanNeeded)


def test_a_new_arrival_waits_through_finishes_during_its_plans_no_longer_than_one() -> None:
    """Twelve jobs run; while each plan is made one of them finishes. The job that
    arrived starts with the first plan, not never (a reviewer's run: ten plans in a row
    thrown away when every change discarded them)."""
    core = scheduler(cpu_workers=48, window_s=1.0, plans_inline=False)
    names = [f"r{index}" for index in range(12)]
    running(core, names, 0.0)
    core.handle(JobSubmitted(job("new")), 2.0)
    needed = asked(core.handle(Tick(), 3.0))
    core.handle(Finished(names[0]), 3.5)  # while it is made
    out = made(core, needed, 4.0)
    assert only(out, Planned) and not only(out, PlanNeeded)
    assert core.status("new").state is JobState.PENDING  # taken by the round


def test_a_plan_that_no_longer_fits_is_asked_again() -> None:
    """An agent re-attached while the plan was made (a restored job, outside the plan,
    now holding processes): the plan no longer fits, and is made again with it."""
    core = scheduler(cpu_workers=24, plans_inline=False)
    first = asked(core.handle(JobSubmitted(job("a")), 0.0))
    request = job("old")
    core.handle(Reattached(request, Allocation(8), 100), 0.1)
    out = made(core, first, 0.2)
    assert not only(out, Planned) and not only(out, Launch)
    again = asked(out)
    assert sorted(planned_ids(again)) == ["a", "old"]
    assert only(made(core, again, 0.3), Planned)


def test_an_answer_to_no_plan_in_flight_changes_nothing() -> None:
    core = scheduler(cpu_workers=64, plans_inline=False)
    needed = asked(core.handle(JobSubmitted(job("a")), 0.0))
    assert core.handle(PlanMade(needed.ticket + 7, work_out(needed.work)), 0.1) == []
    assert core.status("a").state is JobState.SUBMITTED and core.planning == 1
    assert only(made(core, needed, 0.2), Launch)


def test_a_policy_that_fails_is_raised_when_its_plan_comes_and_no_job_is_lost() -> None:
    core = scheduler(cpu_workers=64, plans_inline=False)
    needed = asked(core.handle(JobSubmitted(job("a")), 0.0))
    failed = PlanOutcome(None, error=InvalidRequest("jobs", "a spec out of range"))
    with pytest.raises(InvalidRequest, match="out of range"):
        core.handle(PlanMade(needed.ticket, failed), 0.1)
    assert core.status("a").state is JobState.PENDING  # taken by the round, kept
    assert core.planning == 0


def test_a_replan_in_flight_after_a_pause_timeout_is_not_a_deadline_passed() -> None:
    core = scheduler(cpu_workers=12, window_s=1.0, pause_timeout_s=5.0, plans_inline=False)
    running(core, ["a"], 0.0)
    core.handle(JobSubmitted(job("b")), 1.0)
    out = made(core, asked(core.handle(Tick(), 2.0)), 2.0)
    assert only(out, Pause)  # a is told to shrink for b, and never answers
    replan = asked(core.handle(Tick(), 7.0))  # the pause timed out: b planned again
    assert planned_ids(replan) == ["b"]
    deadline = core.next_deadline()
    assert deadline is None or deadline > 7.0  # nothing to tick for while it is made
    (launch,) = only(made(core, replan, 7.1), Launch)
    assert launch.job_id == "b"


def test_a_plan_not_made_in_time_is_given_up_and_asked_for_again() -> None:
    core = scheduler(cpu_workers=64, plans_inline=False)
    first = asked(core.handle(JobSubmitted(job("a")), 0.0))
    timeout = core.config.plan_timeout_s
    assert core.next_deadline() == timeout  # nothing else to wait for: the plan's deadline
    assert not only(core.handle(Tick(), timeout - 1.0), PlanAbandoned)
    out = core.handle(Tick(), timeout)
    (given_up,) = only(out, PlanAbandoned)
    assert (given_up.ticket, given_up.jobs, given_up.waited_s) == (first.ticket, 1, timeout)
    again = asked(out)  # at once: its window closed long ago
    assert again.ticket != first.ticket and planned_ids(again) == ["a"]
    assert core.handle(PlanMade(first.ticket, work_out(first.work)), timeout + 1.0) == []
    assert only(made(core, again, timeout + 2.0), Launch)


def test_a_replan_not_made_in_time_is_asked_for_again_and_the_round_ends_on_it() -> None:
    core = scheduler(cpu_workers=12, window_s=1.0, pause_timeout_s=5.0, plans_inline=False)
    running(core, ["a"], 0.0)
    core.handle(JobSubmitted(job("b")), 1.0)
    made(core, asked(core.handle(Tick(), 2.0)), 2.0)  # a is told to shrink, never answers
    replan = asked(core.handle(Tick(), 7.0))
    late = 7.0 + core.config.plan_timeout_s
    out = core.handle(Tick(), late)
    assert only(out, PlanAbandoned)
    again = asked(out)
    assert planned_ids(again) == ["b"] and again.ticket != replan.ticket
    (launch,) = only(made(core, again, late + 0.1), Launch)
    assert launch.job_id == "b"
