"""The core's commands carried out on the simulated node, as the daemon's adapters carry them
out on the real one: a placement, a launch (a relaunch from the job's last checkpoint after
a restart; one the node is short for fails, and the core tries it again), a pause, a resume
(in place, or a cold job's relaunch), a live share change, a cancel, a stop of an ended
job's processes, and the records that end a job or send it back for a restart.

The agents' answers are scheduled on the node's clock (`SimNode.after`), drawn from the
job's own streams; nothing here talks to the core.
"""

from typing import assert_never

from scheduler.messages import (
    Cancel,
    Command,
    CurveRefused,
    ExitNoted,
    Gated,
    HelloMissed,
    HelloNoted,
    Launch,
    LaunchRetrying,
    Pause,
    Placed,
    PlanAbandoned,
    Planned,
    PlanNeeded,
    Queued,
    RanUnmanaged,
    Record,
    Replanned,
    Restarting,
    Resume,
    SetShare,
    StaleMessage,
    Stalled,
    StateChanged,
    StepsKept,
    StopProcesses,
)
from scheduler.states import JobState
from workloads.simjob import JobPhase, SimJob, device_share
from workloads.simnode import SimNode


def carry_out(node: SimNode, command: Command) -> None:
    """Apply one of the core's commands to the node's jobs."""
    match command:
        case Placed(job_id=job_id, gpu_indices=gpu_indices):
            job = node.jobs[job_id]
            node.place(job, gpu_indices)
            job.phase = JobPhase.SUBMITTED
        case Launch():
            _launch(node, command)
        case Pause(job_id=job_id, gen=gen):
            job = node.jobs[job_id]
            job.gen, job.pause_started = gen, node.now
            node.paused_gens.add(gen)
            node.pauses += 1
            node.stop(job, JobPhase.PAUSING)
            node.after(node.truth.pause_s, "paused", job_id)
        case Resume():
            _resume(node, command)
        case SetShare(job_id=job_id, decoder_share=share):
            node.jobs[job_id].decoder_share = share  # live: no pause
            node.share_changes += 1
            if job_id in node.running:
                node.rerate()
        case Restarting(job_id=job_id):
            _restarting(node, node.jobs[job_id])
        case StopProcesses(job_id=job_id):
            _stop(node, node.jobs[job_id])
        case (
            (Planned() | Gated() | Cancel() | StateChanged() | Queued() | HelloNoted())
            | (RanUnmanaged() | StaleMessage() | Stalled() | Replanned() | CurveRefused())
            | LaunchRetrying()
            | (StepsKept() | ExitNoted())
            | HelloMissed()  # the restart's, after the others (`Simulation._deliver`)
            | PlanNeeded()  # made after the others, and its plan delivered (the same)
            | PlanAbandoned()  # a simulated plan is made at once: never late
        ):
            _count(node, command)  # a cancel ends the job at its final state
        case _ as unreachable:
            assert_never(unreachable)


def _count(
    node: SimNode,
    record: Cancel | StepsKept | ExitNoted | HelloMissed | PlanNeeded | PlanAbandoned | Record,
) -> None:
    """A job's final state ends it on the node; the node's tally of the core's rounds:
    plans made, changes the gate kept from jobs; the other records change nothing on it."""
    if isinstance(record, StateChanged) and record.new.final:
        _ended(node, node.jobs[record.job_id], record.new)
    elif isinstance(record, Planned):
        node.plans += 1
    elif isinstance(record, Gated):
        node.gated += record.kept


def _launch(node: SimNode, command: Launch) -> None:
    """The job's agent starts, and says hello after the truth's `launch_s`; or, for one of
    its first `launch_short` launches, the node is short for it: the launch raises at once
    (`SimAgents.launch_failed`), as the daemon's does on EMFILE."""
    job = node.jobs[command.job_id]
    job.gen, job.workers_per_gpu = command.gen, command.allocation.workers_per_gpu
    job.decoder_share = device_share(command.allocation)
    job.done_iterations = float(job.checkpoint)  # a relaunch goes on from its checkpoint
    job.phase = JobPhase.STARTING
    job.launch = command
    if job.launches_short < job.spec.launch_short:
        job.launches_short += 1
        node.schedule(node.now, "launch_failed", command.job_id)
        return
    node.after(node.truth.launch_s, "hello", command.job_id)


def _resume(node: SimNode, command: Resume) -> None:
    """In place, or (`cold_paused_at` set: a cold job, whose process left after `paused`) a
    relaunch from its checkpoint: the truth's `resume_s` is either's cost, and the new
    agent's hello comes with its `resumed` (`SimAgents.resumed`)."""
    job = node.jobs[command.job_id]
    job.gen, job.workers_per_gpu = command.gen, command.allocation.workers_per_gpu
    job.decoder_share = device_share(command.allocation)
    job.phase = JobPhase.RESUMING
    node.after(node.truth.resume_s + node.refill_s(job), "resumed", command.job_id)


def _restarting(node: SimNode, job: SimJob) -> None:
    """The core relaunches the job after its back-off: whatever ran of it is gone (a
    crashed script, a hung process the daemon stops), its GPUs still placed."""
    job.in_setup = job.stalled = job.silent = False
    if job.phase is not JobPhase.SUBMITTED:
        node.stop(job, JobPhase.SUBMITTED)


def _stop(node: SimNode, job: SimJob) -> None:
    """The core stops an ended job's processes that run on: they exit now, on a signal."""
    if job.spec.id in node.lingering:
        job.stopped = True
        node.schedule(node.now, "exit", job.spec.id)


def _ended(node: SimNode, job: SimJob, state: JobState) -> None:
    """The core ended a job the node had not ended itself (its own end is `finish`): a
    cancelled one checkpoints and exits; a failed one's processes are gone or stopped."""
    if job.phase is JobPhase.DONE:
        return
    had_processes = job.has_processes
    job.end_s = node.now
    node.stop(job, JobPhase.DONE)
    job.in_setup = job.stalled = job.silent = False
    if had_processes and state is JobState.CANCELLED:
        node.lingering.add(job.spec.id)
        node.after(node.truth.pause_s, "exit", job.spec.id)
    else:
        node.release(job)
