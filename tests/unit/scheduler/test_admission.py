"""Admission inside the core: placement, first come first served, release at the end."""

from allocator import ContentionCurve, NodeSpec
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.messages import (
    AgentHello,
    Finished,
    JobCancelled,
    JobSubmitted,
    Launch,
    Placed,
    Queued,
    StateChanged,
)
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only


def core(slots: int = 2, per_gpu: int = 1) -> Scheduler:
    return Scheduler(
        NodeSpec(cpu_workers=32, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(arrival_window_s=0.0, completion_window_s=0.0),
        GpuPool(slots, per_gpu),
    )


def test_a_job_takes_the_least_loaded_gpus_and_is_queued_once_placed() -> None:
    scheduler = core(slots=3, per_gpu=2)
    out = scheduler.handle(JobSubmitted(job("a", gpus=2)), 0.0)
    assert only(out, Placed) == [Placed("a", (0, 1))]
    assert only(out, Queued) == [Queued("a", 2)]
    out = scheduler.handle(JobSubmitted(job("b")), 0.0)
    assert only(out, Placed) == [Placed("b", (2,))]  # GPU 2 holds nothing yet
    assert scheduler.status("b").gpu_indices == (2,)


def test_the_head_of_the_queue_blocks_the_jobs_behind_it_until_gpus_free() -> None:
    scheduler = core(slots=2)
    (launch,) = only(scheduler.handle(JobSubmitted(job("a")), 0.0), Launch)
    scheduler.handle(AgentHello("a", launch.gen, 0), 0.0)
    assert only(scheduler.handle(JobSubmitted(job("big", gpus=2)), 1.0), Placed) == []
    assert only(scheduler.handle(JobSubmitted(job("small")), 1.0), Placed) == []  # behind `big`
    assert scheduler.waiting_for_gpus == ("big", "small")
    assert scheduler.status("small").state is JobState.SUBMITTED
    out = scheduler.handle(Finished("a"), 2.0)
    assert only(out, Placed) == [Placed("big", (0, 1))]
    assert list(scheduler.waiting_for_gpus) == ["small"]


def test_a_pinned_job_waits_for_its_own_gpus_even_when_others_are_free() -> None:
    scheduler = core(slots=2)
    (launch,) = only(scheduler.handle(JobSubmitted(job("a")), 0.0), Launch)
    scheduler.handle(AgentHello("a", launch.gen, 0), 0.0)
    pinned = job("pinned")
    pinned = type(pinned)(**{**vars(pinned), "gpu_indices": (0,)})
    assert only(scheduler.handle(JobSubmitted(pinned), 1.0), Placed) == []
    assert only(scheduler.handle(Finished("a"), 2.0), Placed) == [Placed("pinned", (0,))]


def test_a_job_cancelled_while_waiting_leaves_the_queue_and_says_why() -> None:
    scheduler = core(slots=1)
    (launch,) = only(scheduler.handle(JobSubmitted(job("a")), 0.0), Launch)
    scheduler.handle(AgentHello("a", launch.gen, 0), 0.0)
    scheduler.handle(JobSubmitted(job("b")), 1.0)
    out = scheduler.handle(JobCancelled("b"), 2.0)
    assert only(out, StateChanged) == [
        StateChanged("b", JobState.SUBMITTED, JobState.CANCELLED, "cancelled while waiting")
    ]
    assert scheduler.waiting_for_gpus == ()
    assert only(scheduler.handle(Finished("a"), 3.0), Placed) == []
