"""Liveness apart from progress (DESIGN.md): a job whose link speaks is alive whatever its
script does; one that makes no progress past its limit is stalled, and the operator's
policy applies; a job's own time limit ends it; a relaunch that gets no further than the
failure before is not relaunched again."""

from dataclasses import replace

from scheduler.messages import (
    AgentHello,
    Alive,
    Allocation,
    Cancel,
    Failed,
    Heartbeat,
    JobRequest,
    JobSubmitted,
    Launch,
    Pause,
    Reattached,
    Stalled,
    StateChanged,
    Tick,
)
from scheduler.reasons import Ending, EndReason, NotRelaunched, RelaunchRefusal
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only, scheduler


def started(core: Scheduler, request: JobRequest, now: float) -> Launch:
    (launch,) = only(core.handle(JobSubmitted(request), now), Launch)
    core.handle(AgentHello(request.id, launch.gen, 0), now)
    return launch


def test_a_job_whose_link_speaks_is_never_lost_however_long_its_setup() -> None:
    core = scheduler(heartbeat_timeout_s=10.0)
    started(core, job("a"), 0.0)
    for second in range(1, 120):  # two minutes of setup: no heartbeat, the link's alive
        core.handle(Alive("a", "setup"), float(second))
        core.handle(Tick(), second + 0.5)
    status = core.status("a")
    assert status.state is JobState.RUNNING
    assert status.phase == "setup"


def test_a_silent_link_is_lost_after_the_jobs_own_timeout() -> None:
    core = scheduler(heartbeat_timeout_s=10.0)
    started(core, replace(job("a"), heartbeat_timeout_s=30.0), 0.0)
    core.handle(Tick(), 29.0)
    assert core.status("a").state is JobState.RUNNING  # its own 30 s, not the config's 10
    out = core.handle(Tick(), 30.0)
    assert core.status("a").state is JobState.FAILED
    (changed,) = only(out, StateChanged)
    none_left = NotRelaunched(RelaunchRefusal.NONE_LEFT)
    lost = Ending(EndReason.LOST, seconds=30.0, limit_s=30.0, not_relaunched=none_left)
    assert changed.ending == lost


def test_no_progress_past_the_limit_is_reported_stalled_and_progress_clears_it() -> None:
    core = scheduler(stall_timeout_s=100.0, heartbeat_timeout_s=1000.0)
    started(core, job("a"), 0.0)
    core.handle(Alive("a", "evaluation"), 1.0)  # a new phase is progress
    assert core.next_deadline() == 101.0
    for second in range(2, 101):
        assert not only(core.handle(Alive("a", "evaluation"), float(second)), Stalled)
    out = core.handle(Tick(), 101.0)
    assert only(out, Stalled) == [Stalled("a", True, 100.0, "evaluation")]
    assert core.status("a").stalled
    assert core.status("a").state is JobState.RUNNING  # warn: reported, left to run
    assert not only(core.handle(Tick(), 500.0), Stalled)  # said once
    out = core.handle(Heartbeat("a", 1, 7, 100.0, 0.0, 10), 501.0)  # a step: it moves again
    assert only(out, Stalled) == [Stalled("a", False, phase="evaluation")]
    assert not core.status("a").stalled


def test_a_stall_fails_the_job_when_the_operator_says_so() -> None:
    core = scheduler(stall_timeout_s=100.0, stall_action="fail", heartbeat_timeout_s=1000.0)
    started(core, replace(job("a"), stall_timeout_s=50.0), 0.0)
    core.handle(Alive("a", "training"), 1.0)
    out = core.handle(Tick(), 51.0)
    assert core.status("a").state is JobState.FAILED
    (changed,) = only(out, StateChanged)
    none_left = NotRelaunched(RelaunchRefusal.NONE_LEFT)
    stalled = Ending(
        EndReason.STALLED, seconds=50.0, limit_s=50.0, phase="training", not_relaunched=none_left
    )
    assert changed.ending == stalled
    assert "a" in core.exiting  # its hung process keeps its GPUs until it exits


def test_a_time_limit_cancels_the_job_through_its_checkpoint() -> None:
    core = scheduler(heartbeat_timeout_s=1000.0)
    started(core, replace(job("a"), time_limit_s=60.0), 5.0)
    assert core.next_deadline() == 65.0
    out = core.handle(Tick(), 65.0)
    assert core.status("a").state is JobState.CANCELLED
    assert only(out, Cancel) == [Cancel("a")]  # the SDK checkpoints, then leaves
    (changed,) = only(out, StateChanged)
    assert changed.ending == Ending(EndReason.TIME_LIMIT, limit_s=60.0)


def test_a_relaunch_that_gets_no_further_than_the_last_failure_is_not_relaunched() -> None:
    # The word_language_model case: killed at step 119 of an evaluation each time, relaunched
    # from the top (no checkpoint yet), and its last heartbeat one step short the second time.
    core = scheduler()
    request = replace(job("a"), max_restarts=5)
    started(core, request, 0.0)
    core.handle(Heartbeat("a", 1, 119, 100.0, 0.0, 10), 10.0)
    (launch,) = only(core.handle(Failed("a", "killed"), 11.0), Launch)  # progress: relaunched
    core.handle(AgentHello("a", launch.gen, 0), 22.0)  # from the top
    core.handle(Heartbeat("a", launch.gen, 118, 100.0, 0.0, 10), 30.0)
    out = core.handle(Failed("a", "killed"), 31.0)
    assert core.status("a").state is JobState.FAILED
    (changed,) = only(out, StateChanged)
    again = NotRelaunched(RelaunchRefusal.FAILED_AGAIN_BEFORE, step=118, failed_at=119)
    assert changed.ending is not None and changed.ending.not_relaunched == again


def test_a_job_that_pauses_no_one_starts_at_once_and_the_window_batches_the_rest() -> None:
    core = scheduler(cpu_workers=30, window_s=30.0, start_when_free=True, heartbeat_timeout_s=1e3)
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)  # an idle node
    core.handle(AgentHello("a", launch.gen, 0), 0.5)
    held = launch.allocation.workers_per_gpu
    assert held < 30  # room beside it: b starts at once, on what a leaves
    (second,) = only(core.handle(JobSubmitted(job("b")), 1.0), Launch)
    assert second.allocation.workers_per_gpu <= 30 - held
    assert core.status("a").allocation == launch.allocation  # nobody paused for b
    assert core.next_deadline() == 31.0  # b's window: its round may still share better


def test_a_job_that_would_pause_someone_waits_for_the_window() -> None:
    core = scheduler(cpu_workers=10, window_s=30.0, start_when_free=True, heartbeat_timeout_s=1e3)
    (launch,) = only(core.handle(JobSubmitted(job("a")), 0.0), Launch)
    assert launch.allocation.workers_per_gpu == 10  # it keeps up with 10: the node's all
    core.handle(AgentHello("a", launch.gen, 0), 0.5)
    assert not only(core.handle(JobSubmitted(job("b")), 1.0), Launch)
    assert core.status("b").state is JobState.SUBMITTED
    out = core.handle(Tick(), 31.0)  # the window closes: a shrinks for b
    assert [pause.job_id for pause in only(out, Pause)] == ["a"]


def test_a_job_without_a_loader_holds_no_loader_process() -> None:
    # `job.steps`: its hello says it cannot resize and has no workers at all.
    core = scheduler(cpu_workers=4, window_s=0.0)
    (launch,) = only(core.handle(JobSubmitted(job("steps")), 0.0), Launch)
    assert launch.allocation.workers_per_gpu == 4  # planned before it said
    core.handle(AgentHello("steps", launch.gen, 0, resizable=False, workers=0), 1.0)
    assert core.loader_processes() == 0
    (second,) = only(core.handle(JobSubmitted(job("loader")), 2.0), Launch)
    assert second.allocation.workers_per_gpu == 4  # the node's loaders, all free for it


def test_an_arrival_the_leftover_cannot_hold_waits_for_its_window() -> None:
    # `static` honours the workers a job asked for: 8 do not fit beside a running job's 6.
    core = scheduler(cpu_workers=12, policy="static", window_s=30.0, start_when_free=True)
    first = replace(job("a"), workers_per_gpu=6)
    (launch,) = only(core.handle(JobSubmitted(first), 0.0), Launch)
    core.handle(AgentHello("a", launch.gen, 0), 0.5)
    assert not only(core.handle(JobSubmitted(replace(job("b"), workers_per_gpu=8)), 1.0), Launch)
    assert core.status("b").state is JobState.SUBMITTED


def test_a_long_evaluation_still_shows_the_steps_its_link_says() -> None:
    # No heartbeat comes in an evaluation: its `alive` carries the steps done before it.
    core = scheduler(stall_timeout_s=100.0, heartbeat_timeout_s=1000.0)
    started(core, job("a"), 0.0)
    core.handle(Alive("a", "evaluation", 8), 1.0)
    assert core.status("a").iteration == 8
    core.handle(Tick(), 100.5)
    core.handle(Alive("a", "evaluation", 8), 100.5)  # the same: no progress
    assert only(core.handle(Tick(), 101.0), Stalled)


def test_a_time_limit_counts_what_an_earlier_daemon_ran() -> None:
    # Restored after a restart, 50 s into its 60: it has 10 s left, not 60 again.
    core = scheduler(heartbeat_timeout_s=1000.0)
    request = replace(job("a"), time_limit_s=60.0, ran_before_s=50.0)
    core.handle(Reattached(request, Allocation(4), iteration=100), 0.0)
    assert core.next_deadline() == 10.0
    core.handle(Tick(), 10.0)
    assert core.status("a").state is JobState.CANCELLED
