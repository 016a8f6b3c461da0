"""An ended job's processes, as the core watches them (scheduler/watches.py) and decides
what their exit means (scheduler/processes.py): stopped after a cancel's grace, after
`finished_exit_s` for a completed job's script, at once when its work after its end is
cancelled; their exit ends the job as its facts say, and is noted."""

from scheduler.config import SchedulerConfig
from scheduler.exits import AfterEnd, ExitFacts
from scheduler.messages import (
    AgentHello,
    EndReason,
    Exited,
    ExitNoted,
    Finished,
    JobCancelled,
    JobSubmitted,
    Pause,
    Paused,
    ProcessExited,
    Resume,
    Resumed,
    StateChanged,
    StepsKept,
    StopProcesses,
    StopReason,
    StopRequested,
    Tick,
)
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only, scheduler


def running(core: Scheduler | None = None) -> Scheduler:
    """Job `a` running since 1.0."""
    core = core or scheduler()
    core.handle(JobSubmitted(job("a")), now=0.0)
    core.handle(Tick(), now=0.0)
    core.handle(AgentHello("a", core.generation, 0), now=1.0)
    assert core.status("a").state is JobState.RUNNING
    return core


def test_a_cancelled_jobs_processes_are_stopped_once_the_grace_is_over() -> None:
    core = running()
    core.handle(JobCancelled("a", "alice", exited=False), now=2.0)
    assert core.next_deadline() == 2.0 + SchedulerConfig().cancel_grace_s
    assert only(core.handle(Tick(), now=6.9), StopProcesses) == []
    assert core.handle(Tick(), now=7.0) == [StopProcesses("a", StopReason.GRACE_OVER)]
    assert core.next_deadline() is None
    assert only(core.handle(Tick(), now=8.0), StopProcesses) == [], "stopped once"


def test_processes_gone_within_the_grace_are_not_stopped() -> None:
    core = running()
    core.handle(JobCancelled("a", "alice", exited=False), now=2.0)
    core.handle(Exited("a"), now=3.0)
    assert core.next_deadline() is None
    assert only(core.handle(Tick(), now=7.0), StopProcesses) == []


def test_a_completed_script_past_finished_exit_s_is_stopped_and_its_exit_says_it_overran() -> None:
    core = running()
    core.handle(Finished("a", exited=False), now=2.0)
    limit = SchedulerConfig().finished_exit_s
    assert core.next_deadline() == 2.0 + limit
    assert core.handle(Tick(), now=2.0 + limit) == [StopProcesses("a", StopReason.OVERRAN)]
    out = core.handle(ProcessExited("a", ExitFacts(-15, finished=10_000), "killed"), now=603.0)
    assert out == [ExitNoted("a", -15, AfterEnd.OVERRAN)]


def test_a_cancel_of_a_completed_jobs_work_stops_it_at_once() -> None:
    core = running()
    core.handle(Finished("a", exited=False), now=2.0)
    assert core.handle(StopRequested("a", "bob"), now=3.0) == [
        StopProcesses("a", StopReason.ASKED, "bob")
    ]
    assert core.next_deadline() is None
    out = core.handle(ProcessExited("a", ExitFacts(-15)), now=4.0)
    assert out == [ExitNoted("a", -15, AfterEnd.STOPPED)]


def test_a_stop_asked_of_a_job_whose_processes_are_gone_does_nothing() -> None:
    core = running()
    core.handle(Finished("a"), now=2.0)
    assert core.handle(StopRequested("a", "bob"), now=3.0) == []


def test_a_scripts_exit_after_its_end_says_when_and_how_it_failed() -> None:
    core = running()
    core.handle(Finished("a", exited=False), now=2.0)
    out = core.handle(ProcessExited("a", ExitFacts(1), "exit code 1"), now=9.0)
    assert out == [ExitNoted("a", 1, AfterEnd.FAILED, 7.0, "exit code 1")]
    assert core.next_deadline() is None


def test_an_exit_with_the_finished_marker_completes_the_job_its_steps_kept_first() -> None:
    core = running()
    out = core.handle(ProcessExited("a", ExitFacts(0, finished=500)), now=2.0)
    assert out[0] == StepsKept("a", 500)
    (changed,) = only(out, StateChanged)
    assert changed.new is JobState.COMPLETED
    assert out.index(changed) > 0
    assert only(out, ExitNoted) == [ExitNoted("a", 0)]


def test_an_exit_that_fails_the_job_carries_the_daemons_account_and_its_last_word() -> None:
    core = running()
    out = core.handle(ProcessExited("a", ExitFacts(1, last_step=7), "exit code 1: boom"), now=2.0)
    (changed,) = only(out, StateChanged)
    assert changed.new is JobState.FAILED and changed.iteration == 7
    assert changed.ending is not None and changed.ending.reason is EndReason.EXITED
    assert changed.ending.said == "exit code 1: boom"
    assert only(out, ExitNoted) == [ExitNoted("a", 1)]


def test_a_cancelled_jobs_exit_keeps_the_step_it_stopped_at() -> None:
    core = running()
    core.handle(JobCancelled("a", "alice", exited=False), now=2.0)
    out = core.handle(ProcessExited("a", ExitFacts(0, last_step=42)), now=3.0)
    assert out == [StepsKept("a", 42, if_later=True), ExitNoted("a", 0)]
    assert core.next_deadline() is None, "its exit ends the watch"


def test_a_cold_pause_is_the_cores_its_exit_asked_for_and_its_resume_a_relaunch() -> None:
    """A job that resizes cold says so with its `Paused` (its processes exit now): the core
    keeps when it paused, takes its exit with code 0 as the one its pause asked for, and
    its resume carries the pause, a relaunch the daemon measures its gap from."""
    core = running(scheduler(cpu_workers=12, window_s=0.0))
    (pause,) = only(core.handle(JobSubmitted(job("b")), now=2.0), Pause)
    (resume,) = only(core.handle(Paused("a", pause.gen, 0), now=2.0), Resume)  # b launches
    core.handle(AgentHello("b", core.generation, 0), now=2.5)
    core.handle(Resumed("a", resume.gen, resume.allocation.workers_per_gpu, 0.5), now=2.5)
    pauses = only(core.handle(JobSubmitted(job("c")), now=10.0), Pause)
    assert [p.job_id for p in pauses] == ["a", "b"], "c needs room from both"
    core.handle(Paused("a", pauses[0].gen, 0, cold_paused_at=1_700_000_000.0), now=10.1)
    assert core.cold_paused("a") and not core.cold_paused("b")
    out = core.handle(ProcessExited("a", ExitFacts(0)), now=10.15)
    assert only(out, StateChanged) == [], "the exit its cold pause asked for"
    assert core.status("a").state is JobState.PAUSED
    resume_a, resume_b = only(core.handle(Paused("b", pauses[1].gen, 0), now=10.2), Resume)
    assert resume_a.cold_paused_at == 1_700_000_000.0, "a relaunch, from its pause"
    assert resume_b.cold_paused_at is None, "b resizes in place"
    assert not core.cold_paused("a"), "its pause is taken by its relaunch"
