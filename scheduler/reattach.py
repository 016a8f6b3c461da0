"""A daemon's restart, as the core sees it: a job that outlived the last daemon is taken
over running (`Reattached`), GPUs are kept for a job whose agent may yet say hello or whose
processes run on after its end (`Restored`), and given back when it is no longer awaited
(`Released`). A job held for its agent's hello has until `Restored.hello_within_s`: a `Tick`
past it answers `HelloMissed` (its deadline in `Scheduler.next_deadline`). No round follows
these at once; the next event serves what they changed."""

from typing import assert_never

from scheduler import learning, lifecycle, watches
from scheduler.commands import Command, HelloMissed, RanUnmanaged, StateChanged
from scheduler.core import Core
from scheduler.errors import SchedulerError
from scheduler.events import Reattached, Released, Restored, RestoreEvent
from scheduler.jobs import Job
from scheduler.reasons import StateReason
from scheduler.states import JobState


def restore(core: Core, event: RestoreEvent, now: float, out: list[Command]) -> None:
    """One step of the daemon's restore."""
    match event:
        case Reattached():
            core.restored.pop(event.request.id, None)
            out.extend(_adopt(core, event, now))
        case Restored(job_id=job_id, gpu_indices=gpu_indices, exiting=exiting):
            _hold(core, job_id, gpu_indices, exiting=exiting)
            if exiting:  # completed, its script runs on: `finished_exit_s` bounds it
                watches.finished(core, job_id, now)
            if event.hello_within_s is not None:
                core.restored[job_id] = now + event.hello_within_s
        case Released(job_id=job_id):
            core.restored.pop(job_id, None)
            lifecycle.release(core, job_id)
        case _ as unreachable:
            assert_never(unreachable)


def _adopt(core: Core, event: Reattached, now: float) -> list[Command]:
    """Take over a job that is already running: its agent outlived the daemon that
    launched it and said hello to this one, or, `unmanaged`, a command running without
    the SDK outlived it (no hello will come). It runs on with its allocation and its
    placement, and the next round plans it with the others."""
    request, iteration, unmanaged = event.request, event.iteration, event.unmanaged
    if request.id in core.jobs:
        raise SchedulerError(f"job {request.id!r} is known already")
    if core.admission is not None:
        core.admission.hold(request.id, event.gpu_indices, request.tenant)
    spec = learning.prior(core, core.rates, request)
    job = Job(
        request=request,
        spec=spec,
        prior=spec,
        state=JobState.RUNNING,
        allocation=event.allocation,
        iteration=iteration,
        last_heard=now,
        restarts=request.restarts,
        gpu_indices=event.gpu_indices,
        seq=len(core.jobs),
        reported=iteration,
        started_at=iteration,
        unmanaged=unmanaged,
        fixed=unmanaged,
        progressed_at=now,
        first_ran=now,
    )
    core.jobs[request.id] = core.live[request.id] = job
    if not unmanaged:
        core.watched[request.id] = job  # its heartbeats come again
        reason = StateReason.REATTACHED
        return [StateChanged(request.id, None, JobState.RUNNING, reason, iteration)]
    reason = StateReason.REATTACHED_UNMANAGED
    # Kept for the next restart: one that had said no hello yet is now known unmanaged.
    return [
        StateChanged(request.id, None, JobState.RUNNING, reason, iteration),
        RanUnmanaged(request.id),
    ]


def _hold(core: Core, job_id: str, gpu_indices: tuple[int, ...], *, exiting: bool) -> None:
    """Keep GPUs for a job this core does not plan: one whose agent may have outlived
    the daemon, until it is adopted or relaunched; or, `exiting`, one that ended before
    the daemon restarted while its processes ran on, until they have `Exited`."""
    if core.admission is not None:
        core.admission.hold(job_id, gpu_indices)
    if exiting:
        core.exiting.add(job_id)


def tick(core: Core, now: float, out: list[Command]) -> None:
    """The restored jobs whose agent's hello is overdue, in the order they were restored:
    each answered once; awaited still until the daemon gives it back (`Released`)."""
    for job_id, due in core.restored.items():
        if due is not None and now >= due:
            core.restored[job_id] = None
            out.append(HelloMissed(job_id))


def deadlines(core: Core) -> list[float]:
    """When the restored jobs' hellos are due."""
    return [due for due in core.restored.values() if due is not None]
