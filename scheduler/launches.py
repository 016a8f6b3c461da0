"""A launch of a job's processes that raised (`LaunchFailed`), as the daemon tells it. One the
launch refused (its command cannot run, the installation is broken, a bug) is the job's
failure, as `Failed` with `EndReason.LAUNCH_FAILED` is. One the node was short for (no file
descriptors, memory or processes left: the daemon's and the node's lack, not the job's) is
neither its failure nor one of its restarts: the job stays starting and the same launch is
tried again after `launch_retry_s`, doubled at each failure up to `launch_retry_max_s`, a
timer on the job (`Job.launch_retry`) served on a `Tick` and in `Scheduler.next_deadline`.
Its launch timeout (`launch_timeout_s`) still ends a launch that never succeeds."""

from typing import assert_never

from scheduler import lifecycle
from scheduler.commands import Command, LaunchRetrying
from scheduler.core import Core
from scheduler.events import LaunchFailed
from scheduler.jobs import LaunchRetry
from scheduler.reasons import Ending, EndReason, LaunchFailure
from scheduler.states import JobState


def failed(core: Core, event: LaunchFailed, now: float, out: list[Command]) -> None:
    """A launch raised: the job's failure, or, the node short, tried again later."""
    match event.kind:
        case LaunchFailure.REFUSED:
            failure = Ending(EndReason.LAUNCH_FAILED, said=event.said)
            job_id, exited = event.job_id, event.exited
            lifecycle.ended(core, job_id, JobState.FAILED, now, out, ending=failure, exited=exited)
        case LaunchFailure.SHORT:
            _later(core, event, now, out)
        case _ as unreachable:
            assert_never(unreachable)


def _later(core: Core, event: LaunchFailed, now: float, out: list[Command]) -> None:
    """Try `event.launch` again after a pause that doubles with each failure since the core
    launched the job; a job no longer starting (it ended meanwhile) has nothing to retry."""
    job = core.job(event.job_id)
    if job.state is not JobState.STARTING:
        return
    config = core.config
    job.launch_tries += 1
    pause_s = min(config.launch_retry_max_s, config.launch_retry_s * 2 ** (job.launch_tries - 1))
    job.launch_retry = LaunchRetry(now + pause_s, event.launch)
    out.append(LaunchRetrying(event.job_id, job.launch_tries, pause_s, event.said))


def tick(core: Core, now: float, out: list[Command]) -> None:
    """The launches whose pause is over, tried again, in submission order."""
    for job in sorted(core.watched.values(), key=lambda job: job.seq):
        retry = job.launch_retry
        if retry is None or now < retry.due:
            continue
        job.launch_retry = None
        if job.state is JobState.STARTING:
            out.append(retry.launch)


def deadlines(core: Core) -> list[float]:
    """When the launches waiting are tried again (only a starting job keeps one)."""
    return [job.launch_retry.due for job in core.watched.values() if job.launch_retry is not None]
