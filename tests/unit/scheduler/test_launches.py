"""A launch that raised (`LaunchFailed`), as the core decides it (scheduler/launches.py):
refused, it is the job's failure exactly as `Failed(cause=LAUNCH_FAILED)` is; the node short
for it, the job stays starting and the same launch is tried again after a pause that doubles
up to `launch_retry_max_s`, a timer in `next_deadline()`; a job that moved on forgets it."""

from dataclasses import replace

from scheduler.messages import (
    AgentHello,
    EndReason,
    Failed,
    Heartbeat,
    JobCancelled,
    JobSubmitted,
    Launch,
    LaunchFailed,
    LaunchFailure,
    LaunchRetrying,
    StateChanged,
    Tick,
)
from scheduler.scheduler import Scheduler
from scheduler.states import JobState
from tests.unit.scheduler.builders import job, only, scheduler

SHORT, REFUSED = LaunchFailure.SHORT, LaunchFailure.REFUSED
EMFILE = "[Errno 24] Too many open files"


def launched(core: Scheduler | None = None) -> tuple[Scheduler, Launch]:
    """Job `a` launched at 0.0, and its launch."""
    core = core or scheduler()
    (launch,) = only(core.handle(JobSubmitted(job("a")), now=0.0), Launch)
    return core, launch


def short(core: Scheduler, launch: Launch, now: float) -> list[LaunchRetrying]:
    return only(core.handle(LaunchFailed("a", launch, SHORT, EMFILE), now=now), LaunchRetrying)


def test_a_refused_launch_fails_the_job_as_a_failed_launch_did() -> None:
    told, failed = launched(), launched()
    said = "its program could not be executed"
    answer = told[0].handle(LaunchFailed("a", told[1], REFUSED, said, exited=False), now=1.0)
    expected = failed[0].handle(Failed("a", said, exited=False, cause=EndReason.LAUNCH_FAILED), 1.0)
    assert answer == expected
    assert told[0].status("a").state is JobState.FAILED and told[0].exiting == {"a"}
    (change,) = only(answer, StateChanged)
    assert change.ending is not None and change.ending.said == said


def test_a_launch_the_node_was_short_for_is_tried_again_after_a_doubling_pause() -> None:
    core, launch = launched()
    again = Launch("a", launch.gen, launch.allocation, resume_from="ckpt.pt")
    assert short(core, again, 0.0) == [LaunchRetrying("a", 1, 0.5, EMFILE)]
    assert core.status("a").state is JobState.STARTING and core.status("a").restarts == 0
    assert core.next_deadline() == 0.5
    assert only(core.handle(Tick(), now=0.4), Launch) == []
    assert only(core.handle(Tick(), now=0.5), Launch) == [again], "the launch as carried out"
    assert only(core.handle(Tick(), now=0.6), Launch) == [], "once"
    pauses = [short(core, again, now)[0].pause_s for now in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0)]
    assert pauses == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0], "doubled up to launch_retry_max_s"
    assert core.next_deadline() == 16.0


def test_a_job_cancelled_while_its_launch_waits_forgets_it() -> None:
    core, launch = launched()
    short(core, launch, 0.0)
    core.handle(JobCancelled("a", "alice"), now=0.2)
    assert core.next_deadline() is None
    assert only(core.handle(Tick(), now=1.0), Launch) == []


def test_a_job_whose_launch_never_succeeds_fails_at_its_launch_timeout() -> None:
    core, launch = launched()
    timeout = core.config.launch_timeout_s
    now = 0.0
    while core.status("a").state is JobState.STARTING:
        short(core, launch, now)
        deadline = core.next_deadline()
        assert deadline is not None
        now = deadline
        core.handle(Tick(), now=now)
    assert core.status("a").state is JobState.FAILED and now >= timeout


def test_a_new_launch_counts_its_tries_afresh() -> None:
    """A retry counts on from the launch's first failure; the relaunch of a restart is a
    new launch, whose first failure is its first try again."""
    core = scheduler(restart_backoff_s=0.0)
    (launch,) = only(core.handle(JobSubmitted(replace(job("a"), max_restarts=1)), 0.0), Launch)
    short(core, launch, 0.0)
    core.handle(Tick(), now=0.5)
    assert short(core, launch, 0.6)[0].tries == 2
    core.handle(Tick(), now=1.6)
    core.handle(AgentHello("a", launch.gen, 0), now=2.0)
    beat = Heartbeat("a", launch.gen, 50, samples_per_s=900.0, idle_fraction=0.1,
                     workers_per_gpu=launch.allocation.workers_per_gpu)  # fmt: skip
    core.handle(beat, now=3.0)
    (again,) = only(core.handle(Failed("a", "boom"), now=4.0), Launch)  # relaunched
    assert again.gen > launch.gen
    assert short(core, again, 4.0) == [LaunchRetrying("a", 1, 0.5, EMFILE)]


def test_a_short_launch_of_a_job_no_longer_starting_is_forgotten() -> None:
    core, launch = launched()
    core.handle(JobCancelled("a", "alice"), now=0.1)
    assert short(core, launch, 0.2) == []
    assert core.next_deadline() is None
