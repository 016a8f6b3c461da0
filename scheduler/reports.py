"""What a job's agent says over its link, applied: its hello (the job runs, or reconnected),
its heartbeats (progress, and the rates the core learns from), its `alive` (liveness and
the phase its script is in, never punished), and the `paused` and `resumed` that carry a
round's pauses through. Messages of an older generation, or for a job that ended, are
recorded as stale and change nothing."""

from dataclasses import replace
from typing import assert_never

from scheduler import learning, rounds
from scheduler.commands import (
    Cancel,
    Command,
    HelloNoted,
    RanUnmanaged,
    StaleMessage,
    Stalled,
)
from scheduler.core import Core
from scheduler.events import AgentEvent, AgentHello, Alive, Heartbeat, Paused, Resumed
from scheduler.jobs import Job
from scheduler.reasons import MessageKind
from scheduler.states import JobState


def hear(core: Core, event: AgentEvent, now: float, out: list[Command]) -> None:
    """One message of a job's agent."""
    match event:
        case AgentHello():
            _hello(core, event, now, out)
        case Heartbeat():
            _heartbeat(core, event, now, out)
        case Alive():
            _alive(core, event, now, out)
        case Paused():
            _paused(core, event, now, out)
        case Resumed():
            _resumed(core, event, now, out)
        case _ as unreachable:
            assert_never(unreachable)


def _hello(core: Core, event: AgentHello, now: float, out: list[Command]) -> None:
    job = core.job(event.job_id)
    job.last_heard = now
    job.iteration = max(job.iteration, event.iteration)
    job.reported = event.iteration
    job.fixed = not event.resizable
    if job.fixed and event.workers == 0:  # no loader at all: it holds no loader process
        for held in ("allocation", "planned"):
            if (allocation := getattr(job, held)) is not None:
                setattr(job, held, replace(allocation, workers_per_gpu=0))
    if job.state is JobState.STARTING:
        job.started_at = event.iteration
        job.allocation = job.planned
        _ran(job, now)
        core.move(job, JobState.RUNNING, out)
    elif job.unmanaged and job.state is JobState.RUNNING:  # a slow start, after all
        job.unmanaged = False
        job.started_at = event.iteration
        _ran(job, now)
        core.watched[job.request.id] = job
        out.append(HelloNoted(job.request.id, event.gen, job.state))
        out.append(RanUnmanaged(job.request.id, unmanaged=False))
    else:
        out.append(HelloNoted(job.request.id, event.gen, job.state))
        if job.state.final and job.request.id in core.exiting:
            # Ended (cancelled while it started) before its agent could be told: told
            # now, it checkpoints and leaves, rather than be stopped by a signal mid-step.
            out.append(Cancel(job.request.id))


def _heartbeat(core: Core, event: Heartbeat, now: float, out: list[Command]) -> None:
    job = core.job(event.job_id)
    if job.state.final:
        out.append(StaleMessage(event.job_id, MessageKind.HEARTBEAT, event.gen))
        return
    job.last_heard = now
    if event.iteration > job.iteration:
        _progressed(job, now, out)
    job.iteration = max(job.iteration, event.iteration)
    job.reported = event.iteration
    if event.total_iterations:
        job.said_iterations = event.total_iterations
    if event.batch_samples:
        job.said_batch = event.batch_samples
    if event.last:
        return  # how far it got, as it exits: no rate to take from it
    job.measured_samples_per_s = event.samples_per_s
    allocation = job.allocation
    if (
        job.state is not JobState.RUNNING
        or allocation is None
        or event.workers_per_gpu != allocation.workers_per_gpu  # a stale one
    ):
        return
    if job.warming:  # it waited for workers that were starting: not its steady rate
        job.warming = False
        return
    learning.heard_rate(core, job, allocation, event, now)


def _alive(core: Core, event: Alive, now: float, out: list[Command]) -> None:
    """Its link says the process lives: heard, however long since its last step; a new
    step or a new phase is progress (a stalled job that moved on is not stalled any
    more)."""
    job = core.job(event.job_id)
    if job.state.final:
        return  # a process that runs on after its end: nothing to hear
    job.last_heard = now
    if event.phase != job.phase or event.iteration > job.iteration:
        job.phase = event.phase
        _progressed(job, now, out)
    if event.iteration > job.iteration:
        job.iteration = job.reported = event.iteration


def _progressed(job: Job, now: float, out: list[Command]) -> None:
    job.progressed_at = now
    if job.stalled:
        job.stalled = False
        out.append(Stalled(job.request.id, False, phase=job.phase))


def _ran(job: Job, now: float) -> None:
    """The job runs (again): its stall clock starts, and its time limit's at its first."""
    job.progressed_at = now
    job.stalled = False
    if job.first_ran is None:
        job.first_ran = now


def _paused(core: Core, event: Paused, now: float, out: list[Command]) -> None:
    job = core.job(event.job_id)
    job.last_heard = now
    job.iteration = max(job.iteration, event.iteration)
    job.reported = event.iteration
    job.checkpoint = event.checkpoint or job.checkpoint
    if event.cold_paused_at is not None:  # its processes exit now; its resume relaunches
        job.cold_paused_at = event.cold_paused_at
    current = core.round
    if job.state is JobState.PAUSING and current is not None and event.gen == current.gen:
        core.move(job, JobState.PAUSED, out)
        current.waiting.discard(job.request.id)
        current.paused.append(job.request.id)
        if not current.waiting:
            rounds.finish_round(core, now, out)
        return
    out.append(StaleMessage(job.request.id, MessageKind.PAUSED, event.gen))
    if job.state is JobState.RUNNING and job.allocation is not None:
        # A straggler that paused after its round gave up on it: resume it as it was.
        core.move(job, JobState.RESUMING, out)
        out.append(job.resume(core.generation, job.allocation))


def _resumed(core: Core, event: Resumed, now: float, out: list[Command]) -> None:
    job = core.job(event.job_id)
    job.last_heard = now
    if job.state is not JobState.RESUMING:
        out.append(StaleMessage(job.request.id, MessageKind.RESUMED, event.gen))
        return
    job.allocation = job.planned or job.allocation
    learning.measured_pause(core, job, event.gap_s)
    _ran(job, now)
    core.move(job, JobState.RUNNING, out)
