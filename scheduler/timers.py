"""What time alone decides, on a `Tick`: a round's pause timeout, a job's time limit, a
running job's link silent too long (lost), a running job without progress past its stall
limit (stalled), and a launched job that never said hello (a command then runs unmanaged,
anything else has failed). The limits themselves are here too, for the deadlines and the
words that name them."""

from scheduler import lifecycle, rounds
from scheduler.commands import Command, RanUnmanaged, Stalled
from scheduler.core import Core
from scheduler.jobs import Job
from scheduler.states import JobState


def tick(core: Core, now: float, out: list[Command]) -> None:
    current = core.round
    if current is not None and now >= current.deadline and current.waiting:
        rounds.give_up_on_stragglers(core, current, now, out)
    # In submission order, as the jobs were given: what ends first is recorded first.
    for job in list(core.live.values()):
        limit, ran = job.request.time_limit_s, job.first_ran
        if limit is not None and ran is not None and now - ran + job.request.ran_before_s >= limit:
            why = (
                f"time limit: it ran {limit:g} s (time_limit_s); told to stop as a cancel"
                " is (the SDK checkpoints at its next step), `stoker resume` goes on from"
                " its newest checkpoint"
            )
            lifecycle.cancel(core, job.request.id, now, out, exited=False, why=why)
    for job in sorted(core.watched.values(), key=lambda job: job.seq):
        silent, allowed = now - job.last_heard, silence_allowed(core, job)
        if job.state is JobState.RUNNING and silent >= allowed:
            # A hung process may still hold its GPUs: they wait until it has Exited.
            lost = (
                f"lost: its link to the daemon was silent for {silent:.0f} s"
                f" (heartbeat_timeout_s = {allowed:g} s), its process hung or gone"
            )
            lifecycle.ended(core, job.request.id, JobState.FAILED, now, out, why=lost, exited=False)
        elif job.state is JobState.RUNNING and not job.stalled:
            _check_stall(core, job, now, out)
        elif job.state is JobState.STARTING and silent >= allowed:
            if job.request.command and silent < core.config.launch_timeout_s:
                _run_unmanaged(core, job, out)
            else:
                why = "never said hello"
                lifecycle.ended(
                    core, job.request.id, JobState.FAILED, now, out, why=why, exited=False
                )


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
        doing = f" in its {job.phase} phase" if job.phase else ""
        why = (
            f"stalled: no step and no new phase for {idle:.0f} s{doing}"
            f" (stall_timeout_s = {limit:g} s, scheduler.stall_action = fail)"
        )
        lifecycle.ended(core, job.request.id, JobState.FAILED, now, out, why=why, exited=False)


def _run_unmanaged(core: Core, job: Job, out: list[Command]) -> None:
    """A command that has not said hello runs without the SDK: it keeps the workers it
    was launched with, is never paused, and no heartbeat is awaited from it."""
    job.unmanaged = job.fixed = True
    job.allocation = job.planned
    job.started_at = 0
    if job.first_ran is None:
        job.first_ran = job.last_heard  # when it was launched
    why = "no hello from the SDK: runs unmanaged, its workers fixed, never paused"
    core.move(job, JobState.RUNNING, out, why)
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
