"""The daemon's restore and refit fed to the core as events through `handle`: `Reattached`,
`Restored`, `Released` and `ModelRefitted` do what `adopt`, `hold`, `release` and `use_model`
did, and no round follows them at once."""

from dataclasses import replace

import pytest

from allocator import ContentionCurve, NodeSpec
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.errors import RefitRejected, RefitUntrusted, SchedulerError
from scheduler.messages import (
    AgentHello,
    Allocation,
    Exited,
    Failed,
    JobSubmitted,
    Launch,
    ModelRefitted,
    Pause,
    Paused,
    Placed,
    RanUnmanaged,
    Reattached,
    Released,
    Restored,
    Resume,
    StateChanged,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.reasons import StateReason
from scheduler.refit import FitQuality
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import FlatModel, NoPipelineModel, job, only, scheduler


def placing(slots: int = 2) -> Scheduler:
    """A core whose admission places jobs on `slots` GPUs, one job each."""
    return Scheduler(
        NodeSpec(cpu_workers=32, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(arrival_window_s=0.0, completion_window_s=0.0),
        GpuPool(slots, 1),
    )


def workers(core: Scheduler, job_id: str) -> int:
    allocation = core.status(job_id).allocation
    assert allocation is not None
    return allocation.workers_per_gpu


def test_a_reattached_job_runs_on_and_is_planned_with_the_next_arrival() -> None:
    core = scheduler(cpu_workers=12)
    out = core.handle(Reattached(job("old"), Allocation(7), iteration=500), 0.0)
    assert out == [StateChanged("old", None, JobState.RUNNING, StateReason.REATTACHED, 500)]
    assert core.status("old").state is JobState.RUNNING and workers(core, "old") == 7
    with pytest.raises(SchedulerError):
        core.handle(Reattached(job("old"), Allocation(7), iteration=500), 0.0)
    out = core.handle(JobSubmitted(job("new")), 1.0)
    (pause,) = only(out, Pause)  # 7 + 10 > 12: the adopted job shrinks for the newcomer
    assert pause.job_id == "old"
    core.handle(Tick(), 5.0)
    assert core.status("old").state is JobState.PAUSING  # heartbeats are still expected


def test_a_reattached_command_without_the_sdk_is_kept_unmanaged() -> None:
    core = scheduler(cpu_workers=12)
    event = Reattached(job("plain"), Allocation(3), iteration=40, gpu_indices=(0,), unmanaged=True)
    out = core.handle(event, 0.0)
    why = StateReason.REATTACHED_UNMANAGED
    assert out == [StateChanged("plain", None, JobState.RUNNING, why, 40), RanUnmanaged("plain")]
    assert core.status("plain").unmanaged and core.status("plain").gpu_indices == (0,)
    assert core.next_deadline() is None, "no heartbeat is awaited from it"


def test_restarts_used_before_a_daemon_restart_count_against_the_cap() -> None:
    core = scheduler(cpu_workers=12)
    adopted = replace(job("b"), max_restarts=1, restarts=1)
    core.handle(Reattached(adopted, Allocation(2), iteration=10), 1.0)
    core.handle(Failed("b", "agent exited with code 1"), now=2.0)
    assert core.status("b").state is JobState.FAILED


def test_a_reattached_jobs_time_limit_counts_what_an_earlier_daemon_ran() -> None:
    core = scheduler(heartbeat_timeout_s=1000.0)
    request = replace(job("a"), time_limit_s=60.0, ran_before_s=50.0)
    core.handle(Reattached(request, Allocation(4), iteration=100), 0.0)
    assert core.next_deadline() == 10.0
    core.handle(Tick(), 10.0)
    assert core.status("a").state is JobState.CANCELLED


def test_restored_gpus_are_kept_until_released_and_placed_at_the_next_event() -> None:
    core = placing(slots=2)
    assert core.handle(Restored("old", (0,)), 0.0) == []
    assert only(core.handle(JobSubmitted(job("big", gpus=2)), 0.0), Placed) == []
    assert core.waiting_for_gpus == ("big",)
    assert core.handle(Released("old"), 1.0) == [], "no admission, no round at this event"
    assert only(core.handle(Tick(), 1.0), Placed) == [Placed("big", (0, 1))]


def test_a_restored_job_that_ended_keeps_its_gpus_until_its_processes_exit() -> None:
    core = placing(slots=2)
    core.handle(Restored("done", (1,), exiting=True), 0.0)
    assert core.exiting == {"done"} and core.exiting_gpus() == {"done": (1,)}
    pinned = replace(job("pinned"), gpu_indices=(1,))
    assert only(core.handle(JobSubmitted(pinned), 1.0), Placed) == []
    waiting = core.waiting("pinned", 1.0)
    assert waiting is not None and waiting.holding == ("done",)
    assert only(core.handle(Exited("done"), 2.0), Placed) == [Placed("pinned", (1,))]
    assert core.exiting == frozenset()


def test_a_reattached_job_keeps_the_gpus_it_runs_on() -> None:
    core = placing(slots=2)
    core.handle(Reattached(job("old"), Allocation(2), 5, gpu_indices=(0,)), 0.0)
    assert only(core.handle(JobSubmitted(job("new")), 1.0), Placed) == [Placed("new", (1,))]


def test_a_refitted_model_repredicts_live_jobs_for_the_next_round() -> None:
    node = NodeSpec(cpu_workers=64, contention=ContentionCurve.contention_free())
    config = SchedulerConfig(policy="optimal", arrival_window_s=0.0)
    core = Scheduler(node, RateModel(FlatModel(0.1)), config)
    predicted = replace(job("a"), step_time_s=None, sample_cost_s=None, flops=1e9)
    (launch,) = only(core.handle(JobSubmitted(predicted), 0.0), Launch)
    assert launch.allocation.workers_per_gpu == 10  # 100 * 0.01 / 0.1
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    assert core.handle(ModelRefitted(RateModel(FlatModel(0.05)), node), 0.5) == []
    assert core.status("a").allocation == launch.allocation  # nothing changes until a round
    out = core.handle(JobSubmitted(job("b", step_time_s=1.0)), 1.0)
    (pause,) = only(out, Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 5), 1.5), Resume)
    assert resume.allocation.workers_per_gpu == 20  # 100 * 0.01 / 0.05


def test_a_refit_below_the_r2_threshold_is_refused_and_one_above_is_taken() -> None:
    node = NodeSpec(cpu_workers=64, contention=ContentionCurve.contention_free())
    config = SchedulerConfig(policy="optimal", arrival_window_s=0.0, min_refit_r2=0.6)
    core = Scheduler(node, RateModel(FlatModel(0.1)), config)
    predicted = replace(job("a"), step_time_s=None, sample_cost_s=None, flops=1e9)
    (launch,) = only(core.handle(JobSubmitted(predicted), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    faster = RateModel(FlatModel(0.05))
    low = FitQuality(training_r2=0.3, loading_r2=0.9)
    with pytest.raises(RefitUntrusted, match=r"training model's held-out R\^2 0\.300 is below"):
        core.handle(ModelRefitted(faster, node, low), 0.5)
    unmeasured = FitQuality(training_r2=0.9, loading_r2=None)
    with pytest.raises(RefitUntrusted, match=r"loading model's .* could not be measured"):
        core.handle(ModelRefitted(faster, node, unmeasured), 0.5)
    out = core.handle(JobSubmitted(job("b", step_time_s=1.0)), 1.0)
    assert not [command for command in out if isinstance(command, Pause)], "a keeps its 10"
    core.handle(ModelRefitted(faster, node, FitQuality(training_r2=0.6, loading_r2=0.95)), 1.5)
    (pause,) = only(core.handle(JobSubmitted(job("c", step_time_s=1.0)), 2.0), Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 5), 2.5), Resume)
    assert resume.allocation.workers_per_gpu == 20, "planned with the refit taken"


def test_a_refit_that_cannot_plan_is_refused_and_the_old_model_stays() -> None:
    node = NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free())
    core = Scheduler(node, RateModel(), SchedulerConfig(arrival_window_s=0.0))
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.0)
    with pytest.raises(RefitRejected, match="cannot plan"):
        core.handle(ModelRefitted(RateModel(NoPipelineModel()), node), 1.0)
    assert core.status("a").allocation == launch.allocation
