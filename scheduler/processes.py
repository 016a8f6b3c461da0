"""A job's processes exited (`ProcessExited`), or a cancel asks those that run on after its
end to stop (`StopRequested`). The daemon gathers an exit's facts (its code, its SDK's
markers); here the core adds its own state of the job, asks `classify_exit`
(scheduler/exits.py) what the exit is, and acts as the verdict says: the job's end (the same
`Finished` or `Failed` handling as those events), the steps its markers say kept for the
store, and a note of the exit for its event log (`after_end`: how its work after its final
step ended, as its watch in scheduler/watches.py saw it)."""

from dataclasses import replace
from typing import assert_never

from scheduler import lifecycle, reports, watches
from scheduler.commands import Command, ExitNoted, StepsKept
from scheduler.core import Core
from scheduler.events import Heartbeat, ProcessEvent, ProcessExited, StopRequested
from scheduler.exits import AfterEnd, ExitKind, ExitVerdict, after_end, classify_exit
from scheduler.reasons import Ending, EndReason
from scheduler.states import JobState


def hear(core: Core, event: ProcessEvent, now: float, out: list[Command]) -> None:
    """What a job's processes did, or are to do."""
    match event:
        case ProcessExited():
            exited(core, event, now, out)
        case StopRequested(job_id=job_id, by=by):
            watches.stop_asked(core, job_id, by, out)
        case _ as unreachable:
            assert_never(unreachable)


def exited(core: Core, event: ProcessExited, now: float, out: list[Command]) -> None:
    """The exit as its facts say, and its note for the job's events."""
    job_id = event.job_id
    job = core.jobs.get(job_id)
    facts = replace(
        event.facts,
        state=job.state if job is not None else None,
        unmanaged=job is not None and job.unmanaged,
        cold_paused=job is not None and job.cold_paused_at is not None,
    )
    watch = core.processes.pop(job_id, None)
    verdict = classify_exit(facts)
    _end(core, event, verdict, now, out)
    if not verdict.noted:
        return
    state = job.state if job is not None else None  # as its end made it
    after = after_end(facts.code, state, watch.stopped if watch is not None else None)
    since = None if watch is None or watch.finished_at is None else now - watch.finished_at
    said = event.said if after is AfterEnd.FAILED else ""
    out.append(ExitNoted(job_id, facts.code, after, since, said))


def _end(
    core: Core, event: ProcessExited, verdict: ExitVerdict, now: float, out: list[Command]
) -> None:
    """The job's end, as `verdict` says."""
    job_id = event.job_id
    if verdict.stopped_at is not None:  # a cancelled job's stop step: its checkpoint's
        out.append(StepsKept(job_id, verdict.stopped_at, if_later=True))
    if verdict.last_word is not None:
        last = Heartbeat.last_word(job_id, core.generation, verdict.last_word)
        reports.hear(core, last, now, out)
    completed = JobState.COMPLETED
    match verdict.kind:
        case ExitKind.COLD_RESIZE | ExitKind.ENDED_BEFORE:
            return  # asked for; or ended before: its `Exited` gives its GPUs back
        case ExitKind.FINISHED:
            if verdict.final_iteration is not None:
                out.append(StepsKept(job_id, verdict.final_iteration))
            lifecycle.ended(core, job_id, completed, now, out, ending=Ending(EndReason.FINISHED))
        case ExitKind.FINISHED_WITHOUT_SDK:  # without the SDK, exit 0 is its only word
            lifecycle.ended(core, job_id, completed, now, out, ending=Ending(EndReason.FINISHED))
        case ExitKind.ADOPTED_UNMANAGED_ENDED:
            ending = Ending(EndReason.UNMANAGED_ENDED)
            lifecycle.ended(core, job_id, completed, now, out, ending=ending)
        case ExitKind.ENDED_OUTSIDE_EPOCHS:
            ending = Ending(EndReason.ENDED_OUTSIDE_EPOCHS)
            lifecycle.ended(core, job_id, completed, now, out, ending=ending)
        case ExitKind.FAILED:
            failure = Ending(EndReason.EXITED, said=event.said)
            lifecycle.ended(core, job_id, JobState.FAILED, now, out, ending=failure)
        case _ as unreachable:
            assert_never(unreachable)
