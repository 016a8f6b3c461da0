"""The core's timers over ended jobs' processes: those told to stop (a cancel, a failure, a
job lost) are stopped once `cancel_grace_s` has passed; a completed job's, which may go on
after its final step (an evaluation, a save), once `finished_exit_s` has; a cancel of that
work stops them at once. Each watch is a `ProcessWatch` in `Core.processes`, set as the
job ends (scheduler/lifecycle.py, reattach.py), served on a `Tick`, its deadline in
`Scheduler.next_deadline`, and read by their exit (scheduler/processes.py)."""

from scheduler.commands import Command, StopProcesses
from scheduler.core import Core
from scheduler.exits import AfterEnd
from scheduler.jobs import ProcessWatch
from scheduler.reasons import StopReason


def told_to_stop(core: Core, job_id: str, now: float) -> None:
    """The job ended (cancelled, failed, lost) while its processes may run: they are
    stopped once the grace has passed, unless they are gone."""
    deadline = now + core.config.cancel_grace_s
    core.processes[job_id] = ProcessWatch(deadline, StopReason.GRACE_OVER)


def finished(core: Core, job_id: str, now: float) -> None:
    """The job completed while its processes run on (its script's work after its final
    step): they are stopped once `finished_exit_s` has passed, unless they exit first."""
    deadline = now + core.config.finished_exit_s
    core.processes[job_id] = ProcessWatch(deadline, StopReason.OVERRAN, finished_at=now)


def stop_asked(core: Core, job_id: str, by: str, out: list[Command]) -> None:
    """A cancel of a job that ended while its processes run on: they are stopped now, and
    their exit is said stopped, not failed."""
    if job_id not in core.exiting:
        return  # gone already: nothing runs to stop
    watch = core.processes.setdefault(job_id, ProcessWatch())
    watch.deadline = watch.finished_at = None
    watch.stopped = AfterEnd.STOPPED
    out.append(StopProcesses(job_id, StopReason.ASKED, by))


def gone(core: Core, job_id: str) -> None:
    """The job's processes are gone (`Exited`): nothing is left to stop. What their exit
    needs is kept until it comes."""
    watch = core.processes.get(job_id)
    if watch is None:
        return
    watch.deadline = None
    if watch.finished_at is None and watch.stopped is None:
        del core.processes[job_id]


def tick(core: Core, now: float, out: list[Command]) -> None:
    """Stop the processes whose time is up."""
    for job_id, watch in core.processes.items():
        if watch.deadline is None or now < watch.deadline:
            continue
        watch.deadline = None
        if watch.reason is StopReason.OVERRAN:  # its exit says it overran
            watch.stopped, watch.finished_at = AfterEnd.OVERRAN, None
        out.append(StopProcesses(job_id, watch.reason))


def deadlines(core: Core) -> list[float]:
    """When the watched processes are to be stopped."""
    return [watch.deadline for watch in core.processes.values() if watch.deadline is not None]
