"""What time alone decides, on a `Tick`: a plan not made in time (given up and asked for
again), a round's pause timeout, a job's time limit, a running job's link silent too long
(lost), a running job without progress past its stall limit (stalled), a launched job that
never said hello (a command then runs unmanaged, anything else has failed), an ended job's
processes past their time (scheduler/watches.py), and a launch the node was short for,
tried again (scheduler/launches.py). The limits themselves are here too, for the
deadlines."""

from scheduler import launches, lifecycle, rounds, watches
from scheduler.commands import Command, RanUnmanaged, Stalled
from scheduler.core import Core
from scheduler.jobs import Job
from scheduler.reasons import Ending, EndReason, StateReason
from scheduler.states import JobState


def tick(core: Core, now: float, out: list[Command]) -> None:
    rounds.give_up_late_plan(core, now, out)
    current = core.round
    if current is not None and now >= current.deadline and current.waiting:
        rounds.give_up_on_stragglers(core, current, now, out)
    # In submission order, as the jobs were given: what ends first is recorded first.
    for job in list(core.live.values()):
        limit, ran = job.request.time_limit_s, job.first_ran
        if limit is not None and ran is not None and now - ran + job.request.ran_before_s >= limit:
            ending = Ending(EndReason.TIME_LIMIT, limit_s=limit)
            lifecycle.cancel(core, job.request.id, now, out, ending, exited=False)
    for job in sorted(core.watched.values(), key=lambda job: job.seq):
        silent, allowed = now - job.last_heard, silence_allowed(core, job)
        if job.state is JobState.RUNNING and silent >= allowed:
            # A hung process may still hold its GPUs: they wait until it has Exited.
            lost = Ending(EndReason.LOST, seconds=silent, limit_s=allowed)
            _fail(core, job, now, out, lost)
        elif job.state is JobState.RUNNING and not job.stalled:
            _check_stall(core, job, now, out)
        elif job.state is JobState.STARTING and silent >= allowed:
            if job.request.command and silent < core.config.launch_timeout_s:
                _run_unmanaged(core, job, out)
            else:
                _fail(core, job, now, out, Ending(EndReason.NO_HELLO))
    watches.tick(core, now, out)
    launches.tick(core, now, out)


def _check_stall(core: Core, job: Job, now: float, out: list[Command]) -> None:
    """A running job without progress past its stall limit is reported stalled; with
    `stall_action = "fail"` it is stopped and failed (its restart policy applies)."""
    idle = now - job.progressed_at
    limit = stall_limit(core, job)
    if idle < limit:
        return
    job.stalled = True
    out.append(Stalled(job.request.id, True, idle, job.phase))
    if core.config.stall_action == "fail":
        stalled = Ending(EndReason.STALLED, seconds=idle, limit_s=limit, phase=job.phase)
        _fail(core, job, now, out, stalled)


def _fail(core: Core, job: Job, now: float, out: list[Command], ending: Ending) -> None:
    """The job failed as `ending` says, its processes maybe still running: its GPUs wait
    until they have `Exited`."""
    lifecycle.ended(core, job.request.id, JobState.FAILED, now, out, ending=ending, exited=False)


def _run_unmanaged(core: Core, job: Job, out: list[Command]) -> None:
    """A command that has not said hello runs without the SDK: it keeps the workers it
    was launched with, is never paused, and no heartbeat is awaited from it."""
    job.unmanaged = job.fixed = True
    job.allocation = job.planned
    job.started_at = 0
    if job.first_ran is None:
        job.first_ran = job.last_heard  # when it was launched
    core.move(job, JobState.RUNNING, out, StateReason.RAN_UNMANAGED)
    out.append(RanUnmanaged(job.request.id))
    core.watched.pop(job.request.id, None)


def silence_allowed(core: Core, job: Job) -> float:
    """How long a watched job may be silent before the core acts."""
    if job.state is JobState.RUNNING:
        return job.request.heartbeat_timeout_s or core.config.heartbeat_timeout_s
    if job.request.command:
        return min(core.config.unmanaged_after_s, core.config.launch_timeout_s)
    return core.config.launch_timeout_s


def stall_limit(core: Core, job: Job) -> float:
    """How long a running job may go without progress before it is stalled."""
    return job.request.stall_timeout_s or core.config.stall_timeout_s
