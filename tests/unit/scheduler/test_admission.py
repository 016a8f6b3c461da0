"""Admission inside the core: placement, first come first served, release at the end."""

from dataclasses import replace

from allocator import ContentionCurve, NodeSpec
from scheduler.admission import Admission, GpuPool, TenantShare
from scheduler.config import SchedulerConfig
from scheduler.messages import (
    AgentHello,
    Ending,
    EndReason,
    Exited,
    Finished,
    JobCancelled,
    JobSubmitted,
    Launch,
    Pause,
    Placed,
    Queued,
    StateChanged,
    StateReason,
    Tick,
    Waiting,
    WaitReason,
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
        StateChanged(
            "b",
            JobState.SUBMITTED,
            JobState.CANCELLED,
            StateReason.ENDED,
            ending=Ending(EndReason.CANCELLED, waiting=True),
        )
    ]
    assert scheduler.waiting_for_gpus == ()
    assert only(scheduler.handle(Finished("a"), 3.0), Placed) == []


def test_a_job_that_ended_keeps_its_gpus_until_its_processes_exit() -> None:
    # A script may evaluate or save on its GPUs after its final step, and a cancelled one
    # takes a moment to stop: the next job must not start on those GPUs meanwhile.
    scheduler = core(slots=1)
    (launch,) = only(scheduler.handle(JobSubmitted(job("a")), 0.0), Launch)
    scheduler.handle(AgentHello("a", launch.gen, 0), 0.0)
    scheduler.handle(JobSubmitted(job("b")), 1.0)
    out = scheduler.handle(Finished("a", exited=False), 2.0)
    assert scheduler.status("a").state is JobState.COMPLETED
    assert only(out, Placed) == [] and scheduler.waiting_for_gpus == ("b",)
    assert scheduler.waiting("b", 2.0) == Waiting(WaitReason.GPUS, gpus=1, holding=("a",))
    assert only(scheduler.handle(Tick(), 30.0), Placed) == []
    out = scheduler.handle(Exited("a"), 31.0)
    assert only(out, Placed) == [Placed("b", (0,))]
    (launch,) = only(out, Launch)
    scheduler.handle(AgentHello("b", launch.gen, 0), 31.0)
    scheduler.handle(JobSubmitted(job("c")), 32.0)
    assert only(scheduler.handle(JobCancelled("b", exited=False), 33.0), Placed) == []
    waiting = scheduler.waiting("c", 33.0)
    assert waiting is not None and waiting.holding == ("b",)
    assert only(scheduler.handle(Exited("b"), 34.0), Placed) == [Placed("c", (0,))]


def test_a_waiting_job_is_told_only_of_the_ended_jobs_holding_gpus_it_could_take() -> None:
    scheduler = core(slots=2)
    out = scheduler.handle(JobSubmitted(job("a")), 0.0)
    out += scheduler.handle(JobSubmitted(job("b")), 0.0)
    out += scheduler.handle(Tick(), 0.0)
    for launch in only(out, Launch):
        scheduler.handle(AgentHello(launch.job_id, launch.gen, 0), 0.0)
    assert scheduler.status("b").gpu_indices == (1,)
    pinned = replace(job("pinned"), gpu_indices=(1,))  # b runs there
    scheduler.handle(JobSubmitted(pinned), 1.0)
    scheduler.handle(Finished("a", exited=False), 2.0)  # a keeps GPU 0 while it saves
    assert scheduler.exiting == {"a"}
    waiting = scheduler.waiting("pinned", 2.0)
    assert waiting is not None and waiting.holding == (), "GPU 0 is not one it could take"
    scheduler.handle(JobSubmitted(job("any")), 3.0)
    waiting = scheduler.waiting("any", 3.0)
    assert waiting is not None and waiting.holding == ("a",)


def _admitted(pool: GpuPool, queue: list[tuple[str, str]]) -> list[str]:
    """The ids `Admission` places, in order, from (job id, tenant) submitted in order."""
    admission = Admission(pool)
    for job_id, tenant in queue:
        admission.enqueue(replace(job(job_id), tenant=tenant))
    return [request.id for request, _ in admission.admit()]


def test_a_flood_of_one_tenant_does_not_keep_anothers_job_waiting_behind_it() -> None:
    flood = [(f"a{n}", "alice") for n in range(6)]
    fifo = _admitted(GpuPool(2), [(job_id, "") for job_id, _ in [*flood, ("b0", "bob")]])
    assert fifo == ["a0", "a1"], "one tenant: first come, first served"
    assert _admitted(GpuPool(2), [*flood, ("b0", "bob")]) == ["a0", "b0"]
    assert _admitted(GpuPool(4), [*flood, ("b0", "bob"), ("b1", "bob")]) == [
        "a0", "b0", "a1", "b1",
    ]  # fmt: skip


def test_weights_and_running_caps_share_the_node() -> None:
    queue = [*[(f"a{n}", "alice") for n in range(6)], *[(f"b{n}", "bob") for n in range(6)]]
    heavy = GpuPool(6, shares={"alice": TenantShare(weight=2.0)})
    placed = _admitted(heavy, queue)
    assert sum(job_id.startswith("a") for job_id in placed) == 4, placed  # 2 : 1
    capped = GpuPool(6, shares={"alice": TenantShare(max_running=1)})
    assert sorted(_admitted(capped, queue)) == ["a0", "b0", "b1", "b2", "b3", "b4"]


def test_a_waiting_job_says_what_it_waits_for() -> None:
    scheduler = Scheduler(
        NodeSpec(cpu_workers=1, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(arrival_window_s=30.0, completion_window_s=0.0),
        GpuPool(2),
    )
    scheduler.handle(JobSubmitted(job("a")), 0.0)  # an idle node: it starts at once
    waiting = scheduler.waiting("a", 0.5)
    assert waiting is not None and waiting.reason is WaitReason.HELLO
    scheduler.handle(AgentHello("a", scheduler.generation, 0), 1.0)
    assert scheduler.waiting("a", 1.0) is None
    scheduler.handle(JobSubmitted(job("b")), 1.0)  # no worker left beside `a`: it must pause
    scheduler.handle(JobSubmitted(job("c")), 2.0)  # no GPU left: c and d wait in the queue
    scheduler.handle(JobSubmitted(job("d")), 2.0)
    assert scheduler.waiting("b", 11.0) == Waiting(
        WaitReason.ARRIVAL_WINDOW, seconds_left=20.0, setting_s=30.0
    )
    said = scheduler.waiting("d", 10.0)
    assert said is not None and said.reason is WaitReason.GPUS and said.ahead == 1


def test_a_job_whose_window_closed_during_a_round_says_it_waits_for_the_round() -> None:
    scheduler = Scheduler(
        NodeSpec(cpu_workers=12, contention=ContentionCurve.contention_free()),
        RateModel(),
        SchedulerConfig(
            arrival_window_s=1.0, completion_window_s=0.0, policy="waa", start_when_free=False
        ),
        GpuPool(3),
    )
    (launch,) = only(
        scheduler.handle(JobSubmitted(job("a")), 0.0) + scheduler.handle(Tick(), 1.0), Launch
    )
    scheduler.handle(AgentHello("a", launch.gen, 0), 1.5)
    scheduler.handle(JobSubmitted(job("b")), 2.0)
    paused = only(scheduler.handle(Tick(), 3.0), Pause)  # b's window: a shrinks for it
    assert paused == [Pause("a", 2)]
    scheduler.handle(JobSubmitted(job("c")), 3.5)
    scheduler.handle(Tick(), 5.0)  # c's window closed too, the round still open
    assert scheduler.waiting("c", 5.0) == Waiting(WaitReason.ROUND_PAUSES)
