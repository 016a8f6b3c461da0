"""A job's way into the core and out of it: submitted, placed by admission, queued in the
arrival buffer; cancelled, finished or failed, with the restart policy deciding whether a
failed job is relaunched (after its back-off, from its last checkpoint) or not, and its
processes watched until they exit (scheduler/watches.py); and their exit, which frees the
GPUs an ended job kept. An end opens the completion
window, whose round gives what the job freed to the others."""

from dataclasses import replace
from typing import assert_never

from scheduler import learning, rounds, watches
from scheduler.commands import Cancel, Command, Placed, Queued, Restarting, StaleMessage
from scheduler.core import Core
from scheduler.errors import SchedulerError
from scheduler.events import EndEvent, Exited, Failed, Finished, JobCancelled
from scheduler.jobs import Job
from scheduler.reasons import (
    Ending,
    EndReason,
    MessageKind,
    NotRelaunched,
    RelaunchRefusal,
    StateReason,
)
from scheduler.request import JobRequest
from scheduler.states import JobState


def end(core: Core, event: EndEvent, now: float, out: list[Command]) -> None:
    """A job's end (cancelled, finished, failed) or its processes' exit after it."""
    match event:
        case JobCancelled(job_id=job_id, by=by, exited=exited):
            cancelled = Ending(EndReason.CANCELLED, by=by or None)
            cancel(core, job_id, now, out, cancelled, exited=exited)
        case Finished(job_id=job_id, exited=exited, how=how):
            ended(core, job_id, JobState.COMPLETED, now, out, ending=Ending(how), exited=exited)
        case Failed(job_id=job_id, said=said, exited=exited, cause=cause):
            failure = Ending(cause, said=said)
            ended(core, job_id, JobState.FAILED, now, out, ending=failure, exited=exited)
        case Exited(job_id=job_id):
            release(core, job_id)
        case _ as unreachable:
            assert_never(unreachable)


def submit(core: Core, request: JobRequest, now: float, out: list[Command]) -> None:
    if request.id in core.jobs:
        raise SchedulerError(f"job {request.id!r} was submitted already")
    spec = learning.prior(core, core.rates, request)
    job = Job(
        request=request,
        spec=spec,
        prior=spec,
        last_heard=now,
        restarts=request.restarts,
        seq=len(core.jobs),
        checkpoint=request.checkpoint,
    )
    core.jobs[request.id] = core.live[request.id] = job
    if core.admission is not None:
        core.admission.enqueue(request)  # placed by `admit`, maybe in this call
    else:
        _queue(core, job, now, out)


def admit(core: Core, now: float, out: list[Command]) -> None:
    """Place waiting jobs while GPUs are free; placed jobs enter the arrival buffer."""
    if core.admission is None:
        return
    for request, gpu_indices in core.admission.admit():
        job = core.jobs[request.id]
        job.gpu_indices = gpu_indices
        out.append(Placed(request.id, gpu_indices))
        _queue(core, job, now, out)


def _queue(core: Core, job: Job, now: float, out: list[Command]) -> None:
    out.append(Queued(job.request.id, job.request.gpus))
    core.arrivals.append(job.request.id)
    if core.arrivals_due is None:
        core.arrivals_due = now + core.config.arrival_window_s


def cancel(
    core: Core,
    job_id: str,
    now: float,
    out: list[Command],
    ending: Ending,
    *,
    exited: bool = True,
) -> None:
    """The job is cancelled, as `ending` says (asked for, or its time limit)."""
    job = core.job(job_id)
    if job.state.final:
        return
    held = job.state.holds_resources
    if held and not exited:
        core.exiting.add(job_id)
        watches.told_to_stop(core, job_id, now)
    if core.admission is not None and core.admission.withdraw(job_id):
        ending = replace(ending, waiting=True)
    core.move(job, JobState.CANCELLED, out, StateReason.ENDED, ending=ending)
    if held:
        out.append(Cancel(job_id))
    if job_id in core.arrivals:
        core.arrivals.remove(job_id)
    core.backing_off.pop(job_id, None)
    rounds.leave_round(core, job_id, now, out, freed=held)
    if held:
        _completed(core, now)


def ended(
    core: Core,
    job_id: str,
    state: JobState,
    now: float,
    out: list[Command],
    *,
    ending: Ending,
    exited: bool = True,
) -> None:
    """The job completed or failed, as `ending` says; `exited`: its processes are gone,
    else its GPUs stay placed until they have `Exited`."""
    job = core.job(job_id)
    if job.state.final:
        late = MessageKind.COMPLETED if state is JobState.COMPLETED else MessageKind.FAILED
        out.append(StaleMessage(job_id, late))
        return
    held = job.state.holds_resources
    if state is JobState.FAILED and held:
        refused = _relaunch_refused(job)
        job.failed_at = job.reported
        if refused is None:
            _restart(core, job, now, out, ending)
            return
        ending = replace(ending, not_relaunched=refused)
    if held and not exited:
        core.exiting.add(job_id)
        if state is JobState.COMPLETED:  # its script goes on after training, as it may
            watches.finished(core, job_id, now)
        else:  # lost or failed: make sure it is gone
            watches.told_to_stop(core, job_id, now)
    core.move(job, state, out, StateReason.ENDED, ending=ending)
    rounds.leave_round(core, job_id, now, out, freed=held)
    _completed(core, now)


def _relaunch_refused(job: Job) -> NotRelaunched | None:
    """Why a failed job is not relaunched, or None when it is: it has restarts left and
    made progress since this attempt started (a job that fails before its first step,
    or twice at the same iteration, would only fail again)."""
    if job.restarts >= job.request.max_restarts:
        return NotRelaunched(RelaunchRefusal.NONE_LEFT)  # the policy allows none (more)
    if job.unmanaged:
        return NotRelaunched(RelaunchRefusal.UNMANAGED)
    if job.started_at is None or job.reported <= job.started_at:
        return NotRelaunched(RelaunchRefusal.BEFORE_FIRST_STEP, started_at=job.started_at)
    if job.failed_at is not None and job.reported <= job.failed_at:
        # Its relaunch got no further than the failure before (wherever it started
        # from: a relaunch with no checkpoint starts from the top): it would only fail
        # there again.
        if job.reported == job.failed_at:
            return NotRelaunched(RelaunchRefusal.FAILED_TWICE, step=job.reported)
        return NotRelaunched(
            RelaunchRefusal.FAILED_AGAIN_BEFORE, step=job.reported, failed_at=job.failed_at
        )
    return None


def _restart(core: Core, job: Job, now: float, out: list[Command], ending: Ending) -> None:
    """The job's agent died: after its back-off, back to the arrival buffer, to be
    launched again from its last checkpoint (Launch.resume_from) by the next round. It
    keeps its GPUs meanwhile."""
    job.restarts += 1
    job.started_at = None
    job.phase = ""
    job.stalled = False
    job.fixed = False  # its relaunch says again whether its loader can be resized
    config = core.config
    wait_s = min(config.restart_backoff_max_s, config.restart_backoff_s * 2 ** (job.restarts - 1))
    reason = StateReason.RESTARTING
    core.move(job, JobState.SUBMITTED, out, reason, ending=ending, wait_s=wait_s)
    out.append(Restarting(job.request.id, job.restarts, ending))
    job.allocation = job.planned = None
    rounds.leave_round(core, job.request.id, now, out)
    core.backing_off[job.request.id] = now + wait_s


def _completed(core: Core, now: float) -> None:
    """A job ended: a round once the completion window has passed, or sooner when one is
    due sooner (another completion's window, or the replan window, already open). A
    replan window longer than the completion window (`stoker serve --window 2` keeps
    its 15 s) must not hold back what a job's end freed."""
    due = now + core.config.completion_window_s
    if core.completions_due is None or due < core.completions_due:
        core.completions_due = due


def end_back_offs(core: Core, now: float) -> None:
    """Jobs whose back-off is over join the arrival buffer."""
    for job_id, due in list(core.backing_off.items()):
        if now >= due:
            del core.backing_off[job_id]
            core.arrivals.append(job_id)
            if core.arrivals_due is None:
                core.arrivals_due = now + core.config.arrival_window_s


def release(core: Core, job_id: str) -> None:
    """Give back what `Restored` kept, or the GPUs of a job that ended before its
    processes did (`Exited`); admission places waiting jobs at the next event."""
    core.exiting.discard(job_id)
    watches.gone(core, job_id)
    if core.admission is not None and job_id not in core.live:
        core.admission.release(job_id)
