"""The daemon's restore fed to the core as events through `handle`: GPUs `Restored` for a
job whose agent may come back are kept until it is `Reattached` or `Released`, and no round
follows these at once. (A refit, `ModelRefitted`, and a reattached job's restarts and time
limit are tested beside the rest of the core: test_scheduler.py, test_decisions.py,
test_liveness.py.)"""

from dataclasses import replace

from allocator import ContentionCurve, NodeSpec
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.messages import (
    Allocation,
    Exited,
    HelloMissed,
    JobSubmitted,
    Placed,
    RanUnmanaged,
    Reattached,
    Released,
    Restored,
    StateChanged,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.reasons import StateReason
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only, scheduler


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


def test_a_reattached_command_without_the_sdk_is_kept_unmanaged() -> None:
    core = scheduler(cpu_workers=12)
    event = Reattached(job("plain"), Allocation(3), iteration=40, gpu_indices=(0,), unmanaged=True)
    out = core.handle(event, 0.0)
    why = StateReason.REATTACHED_UNMANAGED
    assert out == [StateChanged("plain", None, JobState.RUNNING, why, 40), RanUnmanaged("plain")]
    assert core.status("plain").unmanaged and core.status("plain").gpu_indices == (0,)
    assert core.next_deadline() is None, "no heartbeat is awaited from it"


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


def test_a_restored_jobs_hello_is_awaited_until_its_deadline_then_missed_once() -> None:
    core = placing(slots=2)
    assert core.handle(Restored("old", (0,), hello_within_s=10.0), 0.0) == []
    assert core.awaiting_hello("old")
    assert core.next_deadline() == 10.0, "its hello's deadline is the core's timer"
    assert core.handle(Tick(), 9.9) == []
    assert core.handle(Tick(), 10.0) == [HelloMissed("old")]
    assert core.handle(Tick(), 11.0) == [], "answered once"
    assert core.awaiting_hello("old"), "awaited until the daemon gives it back"
    assert core.next_deadline() is None
    core.handle(Released("old"), 11.0)
    assert not core.awaiting_hello("old")


def test_a_reattached_or_released_job_is_no_longer_awaited() -> None:
    core = placing(slots=2)
    core.handle(Restored("a", (0,), hello_within_s=10.0), 0.0)
    core.handle(Restored("b", (1,), hello_within_s=10.0), 0.0)
    core.handle(Reattached(job("a"), Allocation(2), iteration=40, gpu_indices=(0,)), 1.0)
    core.handle(Released("b"), 1.0)
    assert not core.awaiting_hello("a") and not core.awaiting_hello("b")
    assert HelloMissed("a") not in core.handle(Tick(), 20.0)


def test_a_job_restored_exiting_awaits_no_hello() -> None:
    core = placing(slots=2)
    core.handle(Restored("done", (0,), exiting=True), 0.0)
    assert not core.awaiting_hello("done")
