"""What a restarted daemon does with the jobs an earlier one left unfinished, and how many
relaunches a job may have: decisions on data the daemon reads from its state dir.

A running job whose agent outlived the old daemon keeps running: the daemon waits for the
agent's hello and adopts it with the allocation it reports. A command running without the
SDK is adopted as it runs (it says no hello, and it has no checkpoint to go on from: a
daemon stopping cleanly leaves it running too); one that ended while no daemon watched is
not run again. A command that had not said hello yet when the old daemon left may be
one without the SDK in its first seconds: its hello is awaited, and its silence then taken
as running unmanaged, not as a reason to start it over (gone with no word of the SDK's, it
ran once and ended). Any other job, and a running one
whose agent does not say hello in time, has its process stopped and is relaunched from its
last checkpoint, which counts as one of its restarts unless the daemon was stopped cleanly
(it paused its jobs and took their checkpoints on the way down).
"""

from dataclasses import dataclass
from enum import StrEnum

from scheduler.states import JobState


class RestoreAction(StrEnum):
    COMPLETE = "complete"  # its agent wrote the finished marker while no daemon listened
    AWAIT_HELLO = "await_hello"  # its agent may still be training: wait for it
    ADOPT_UNMANAGED = "adopt_unmanaged"  # a command without the SDK runs on: take it as it is
    ENDED_UNSEEN = "ended_unseen"  # one that ended while no daemon watched: it ran, once
    RELAUNCH = "relaunch"  # start it again from its checkpoint


@dataclass(frozen=True)
class StoredJob:
    """What the state dir says of an unfinished job, and what the node says of its agent."""

    state: JobState
    finished: bool  # its agent's finished marker is there
    agent_alive: bool  # the recorded pid runs this job's agent
    placement_fits: bool  # its GPUs still exist on the node as configured now
    unmanaged: bool = False  # it ran without the SDK (`RanUnmanaged`)
    command: bool = False  # a user's command, which may not use the SDK
    # Its agent left the SDK's last-step marker: it ran on the SDK and exited unfinished.
    left_last_step: bool = False


def stop_leaves_running(state: JobState, *, command: bool, unmanaged: bool) -> bool:
    """Whether a daemon stopping cleanly leaves a job's processes running for the next one
    to adopt: a command without the SDK (no checkpoint to go on from: stopped, it would
    start over), and a command that has not said hello yet (it may be one)."""
    if unmanaged:
        return state is JobState.RUNNING
    return command and state is JobState.STARTING


def _may_be_unmanaged(job: StoredJob) -> bool:
    """A command started and still running that never said hello: without the SDK, or
    slow to start."""
    return job.command and job.state is JobState.STARTING and job.agent_alive


def _ended_unseen_before_hello(job: StoredJob) -> bool:
    """A command that had said no hello and is gone, leaving no SDK marker: one without the
    SDK that ran and ended while no daemon watched (run again, it would run twice)."""
    return (
        job.command
        and job.state is JobState.STARTING
        and not job.agent_alive
        and not job.left_last_step
    )


def restore_action(job: StoredJob, clean_stop: bool) -> RestoreAction:
    if job.finished:
        return RestoreAction.COMPLETE
    if job.unmanaged and job.state is JobState.RUNNING:
        # No checkpoint to go on from: run again, it would start over.
        if not job.agent_alive:
            return RestoreAction.ENDED_UNSEEN
        if job.placement_fits:
            return RestoreAction.ADOPT_UNMANAGED
    running = job.state is JobState.RUNNING and job.agent_alive and not clean_stop
    if (running or _may_be_unmanaged(job)) and job.placement_fits:
        return RestoreAction.AWAIT_HELLO  # a command never heard from: then `after_silence`
    if _ended_unseen_before_hello(job):
        return RestoreAction.ENDED_UNSEEN
    return RestoreAction.RELAUNCH


def after_silence(job: StoredJob) -> RestoreAction:
    """A restored job whose agent said no hello in time: a command that had said none
    before either and still runs is taken to run without the SDK (started again, it would
    start over); one that is gone without the SDK's marker ran once and ended; any other is
    relaunched from its checkpoint."""
    if _may_be_unmanaged(job):
        return RestoreAction.ADOPT_UNMANAGED
    if _ended_unseen_before_hello(job):  # it ended while the daemon waited for its hello
        return RestoreAction.ENDED_UNSEEN
    return RestoreAction.RELAUNCH


def restarts_after_relaunch(state: JobState, restarts: int, *, count: bool) -> int:
    """The job's restarts once relaunched: a job that never started, or one stopped
    cleanly (`count` False), uses none."""
    started = state not in (JobState.SUBMITTED, JobState.PENDING)
    return restarts + (started and count)


def may_relaunch(restarts: int, max_restarts: int) -> bool:
    """Whether a job that has used `restarts` relaunches may run again."""
    return restarts <= max_restarts


@dataclass(frozen=True)
class AgentReport:
    """An agent's hello to a restarted daemon."""

    state: str  # the agent's own word: running, paused, starting
    workers_per_gpu: int
    pid: int


def adopts(report: AgentReport, recorded_pid: int | None) -> bool:
    """Whether a restored running job's agent is adopted as it runs. A paused or starting
    agent holds no checkpoint we could trust more than ours, and a hello from another pid
    is not the agent we recorded: those jobs are relaunched."""
    return report.state == "running" and report.workers_per_gpu >= 1 and report.pid == recorded_pid
