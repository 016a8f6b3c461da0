"""The daemon's decisions that live in the core: restore, restarts, re-attach, telemetry
sampling and refit acceptance. Data in, decision out: no files, sockets or clocks."""

import pytest

from allocator import ContentionCurve, NodeSpec
from scheduler.config import SchedulerConfig
from scheduler.errors import RefitRejected
from scheduler.messages import AgentHello, JobSubmitted, Launch, ModelRefitted
from scheduler.rates import RateModel
from scheduler.refit import FitQuality
from scheduler.restore import (
    AgentReport,
    RestoreAction,
    StoredJob,
    adopts,
    after_silence,
    may_relaunch,
    restarts_after_relaunch,
    restore_action,
    stop_leaves_running,
)
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from scheduler.telemetry import Beat, TelemetrySampler
from tests.unit.scheduler.builders import NoPipelineModel, job, only


def stored(state: JobState = JobState.RUNNING, **changes: bool) -> StoredJob:
    facts = {"finished": False, "agent_alive": True, "placement_fits": True, **changes}
    return StoredJob(state=state, **facts)


def test_a_finished_marker_completes_the_job_whatever_its_state() -> None:
    for state in (JobState.SUBMITTED, JobState.STARTING, JobState.RUNNING, JobState.PAUSED):
        assert restore_action(stored(state, finished=True), False) is RestoreAction.COMPLETE


def test_only_a_running_job_whose_agent_lives_where_it_was_placed_is_awaited() -> None:
    assert restore_action(stored(), clean_stop=False) is RestoreAction.AWAIT_HELLO
    relaunched = [
        stored(agent_alive=False),
        stored(placement_fits=False),
        stored(JobState.PAUSED),
        stored(JobState.STARTING),
    ]
    for job_ in relaunched:
        assert restore_action(job_, clean_stop=False) is RestoreAction.RELAUNCH
    # A clean stop paused every job and took its checkpoint: nothing is left to adopt.
    assert restore_action(stored(), clean_stop=True) is RestoreAction.RELAUNCH


def test_a_command_without_the_sdk_that_runs_on_is_adopted_after_any_stop() -> None:
    # No hello will come, and no checkpoint: a clean stop left it running for that.
    for clean in (False, True):
        adopted = restore_action(stored(unmanaged=True), clean_stop=clean)
        assert adopted is RestoreAction.ADOPT_UNMANAGED
    ended = stored(unmanaged=True, agent_alive=False)
    for clean in (False, True):  # it would start over: it ran once, that is its run
        assert restore_action(ended, clean_stop=clean) is RestoreAction.ENDED_UNSEEN
    moved = stored(unmanaged=True, placement_fits=False)
    assert restore_action(moved, clean_stop=False) is RestoreAction.RELAUNCH


def test_a_command_that_said_no_hello_yet_is_awaited_then_taken_as_unmanaged() -> None:
    # In its first seconds a command without the SDK is `starting`: stopped and relaunched
    # it would start over, so its hello is awaited, and its silence taken as no SDK.
    starting = stored(JobState.STARTING, command=True)
    for clean in (False, True):
        assert restore_action(starting, clean_stop=clean) is RestoreAction.AWAIT_HELLO
    assert after_silence(starting) is RestoreAction.ADOPT_UNMANAGED
    for other in (
        stored(JobState.STARTING),  # a zoo job: the daemon's own trainer, on the SDK
        stored(JobState.STARTING, command=True, agent_alive=False, left_last_step=True),
        stored(command=True),  # running on the SDK, now silent: hung, relaunched
    ):
        assert after_silence(other) is RestoreAction.RELAUNCH
    # Gone with no word of the SDK's: it ran without it, and ended while no daemon watched
    # (or while this one waited for its hello). Run again, it would run twice.
    gone = stored(JobState.STARTING, command=True, agent_alive=False)
    assert after_silence(gone) is RestoreAction.ENDED_UNSEEN
    for clean in (False, True):
        assert restore_action(gone, clean_stop=clean) is RestoreAction.ENDED_UNSEEN
    crashed = stored(JobState.STARTING, command=True, agent_alive=False, left_last_step=True)
    assert restore_action(crashed, clean_stop=False) is RestoreAction.RELAUNCH, "on the SDK"


def test_a_clean_stop_leaves_running_what_the_next_daemon_would_not_start_over() -> None:
    leaves = [
        (state, command, unmanaged)
        for state in JobState
        for command in (False, True)
        for unmanaged in (False, True)
        if stop_leaves_running(state, command=command, unmanaged=unmanaged)
    ]
    assert leaves == [
        (JobState.STARTING, True, False),
        (JobState.RUNNING, False, True),
        (JobState.RUNNING, True, True),
    ]


def test_a_relaunch_counts_against_the_restarts_only_when_the_job_had_started() -> None:
    assert restarts_after_relaunch(JobState.RUNNING, 1, count=True) == 2
    assert restarts_after_relaunch(JobState.RUNNING, 1, count=False) == 1  # a clean stop
    assert restarts_after_relaunch(JobState.PENDING, 1, count=True) == 1
    assert may_relaunch(2, max_restarts=2)
    assert not may_relaunch(3, max_restarts=2)


def test_a_hello_is_adopted_only_from_the_recorded_pid_running_with_workers() -> None:
    assert adopts(AgentReport("running", 3, pid=41), recorded_pid=41)
    assert not adopts(AgentReport("running", 3, pid=42), recorded_pid=41)
    assert not adopts(AgentReport("paused", 3, pid=41), recorded_pid=41)
    assert not adopts(AgentReport("running", 0, pid=41), recorded_pid=41)


def test_a_heartbeat_becomes_a_sample_when_busy_and_once_per_period() -> None:
    sampler = TelemetrySampler(every_s=10.0, time_scale=0.5)
    assert sampler.step_time_s(Beat("a", 0, idle_s=0.0, step_s=1.0), now=0.0) is None  # first
    # A heartbeat a second, each for 10 steps of 0.1 s: one sample per 10 s, of every beat
    # since the last (taking the last beat's second over all 100 steps made it 10x small).
    samples = [
        sampler.step_time_s(Beat("a", 10 * second, idle_s=0.02, step_s=0.98), now=second)
        for second in range(1, 11)
    ]
    assert samples[:9] == [None] * 9, "early"
    assert samples[9] == pytest.approx(0.1 / 0.5), "busy time per step, time scale undone"
    stalled = [
        sampler.step_time_s(Beat("a", 100 + 10 * second, idle_s=0.1, step_s=0.9), now=10 + second)
        for second in range(1, 11)
    ]
    assert stalled == [None] * 10, "90 % computing: loading limited, no sample"
    again = sampler.step_time_s(Beat("a", 50, idle_s=0.0, step_s=1.0), now=30.0)
    assert again is None, "a relaunch from a checkpoint starts a new window"


def test_a_refit_that_cannot_plan_is_refused_and_the_old_model_stays() -> None:
    node = NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), SchedulerConfig(arrival_window_s=0.0))
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    with pytest.raises(RefitRejected, match="cannot plan"):
        core.handle(ModelRefitted(RateModel(NoPipelineModel()), node), 0.0)
    assert core.status("a").allocation == launch.allocation


def test_a_fits_quality_is_read_from_its_report() -> None:
    report: dict[str, object] = {
        "training": {"chosen": "ridge", "candidates": {"ridge": {"r2": 0.8}, "svr": {"r2": 0.9}}},
        "loading": {"r2": -0.2},
    }
    assert FitQuality.of_report(report) == FitQuality(0.8, -0.2), "the chosen one's R^2"
    assert FitQuality.of_report({}) == FitQuality(None, None)
