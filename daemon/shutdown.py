"""The daemon's way out: every running agent asked to pause (so that it writes a
checkpoint) and given `shutdown_grace_s`, those that paused told to leave, and the commands
without the SDK left running for the next daemon to adopt. `Service.shutdown` calls these
in order."""

import asyncio
import logging

from agents.protocol import CancelMessage, MetricsMessage, PausedMessage, PauseMessage
from daemon.actions import Actions, spoken
from daemon.agentinput import AgentInput
from daemon.parts import Parts
from scheduler.restore import stop_leaves_running
from scheduler.states import JobState

log = logging.getLogger(__name__)

# On the way out, how long the agents that paused get to leave by themselves (stopping
# their loader workers), before their process groups are stopped.
LEAVE_WAIT_S = 5.0


async def leave(parts: Parts, actions: Actions, agents: AgentInput) -> None:
    """Pause the running agents (`pause_all`), let those that paused go (`let_go`), stop
    what is left of their processes but the commands without the SDK (`left_running`), and
    mark the stop clean (the next start counts no restart for it)."""
    paused = await pause_all(parts, actions, agents, parts.config.shutdown_grace_s)
    await let_go(parts, agents, paused, LEAVE_WAIT_S)
    # A command without the SDK has no checkpoint to go on from: stopped, it would
    # start over. It runs on, and the next daemon adopts it (`scheduler/restore.py`).
    unmanaged = left_running(parts)
    await asyncio.to_thread(parts.launcher.stop_all, 2.0, unmanaged)


def left_running(parts: Parts) -> set[str]:
    """The jobs a stopping daemon leaves running: commands without the SDK, which have
    no checkpoint to go on from, and commands that have not said hello yet (which may
    be such). Each is logged, with how to stop it."""
    kept = {
        job_id
        for job_id, status in parts.scheduler.jobs().items()
        if stop_leaves_running(
            status.state,
            command=parts.jobs.command_run(job_id) is not None,
            unmanaged=status.unmanaged,
        )
        and parts.launcher.running(job_id)
    }
    for job_id in sorted(kept):
        log.info(
            "job %s: runs without the SDK (or has not said hello yet), so it has no"
            " checkpoint; left running for the next daemon to adopt (`stoker cancel %s`"
            " stops it)",
            job_id,
            job_id,
        )
    return kept


async def pause_all(parts: Parts, actions: Actions, agents: AgentInput, grace_s: float) -> set[str]:
    """Ask every running agent to pause (it writes a checkpoint) and record the
    checkpoints of the `paused` replies until all came or `grace_s` is up; the jobs
    that paused, those a round had paused already among them."""
    states = {
        job_id: status.state
        for job_id, status in parts.scheduler.jobs().items()
        if not status.unmanaged  # it cannot pause: it is stopped with the others
        and parts.launcher.running(job_id)
        and not parts.scheduler.cold_paused(job_id)  # paused cold: its process has left
    }
    # Resuming ones run their first step: they see the pause at its end, as running ones.
    told = (JobState.RUNNING, JobState.RESUMING)
    waiting = {job_id for job_id, state in states.items() if state in told}
    for job_id in sorted(waiting):
        pause = PauseMessage(job=job_id, gen=parts.scheduler.generation + 1)
        await _send_on_the_way_out(parts, pause)
    # A round's own pauses: those told already pause (or have) and wait for a resume.
    waiting |= {job_id for job_id, state in states.items() if state is JobState.PAUSING}
    paused = {job_id for job_id, state in states.items() if state is JobState.PAUSED}
    deadline = parts.now() + grace_s
    while waiting and parts.now() < deadline:
        message = await parts.link.receive(timeout_s=deadline - parts.now())
        if isinstance(message, MetricsMessage):  # the SDK sends them before it checkpoints
            agents.keep_metrics(message)
        elif (
            isinstance(message, PausedMessage)
            and message.job in waiting
            and parts.keys.authentic(message)
        ):
            waiting.discard(message.job)
            paused.add(message.job)
            actions.keep_checkpoint(message)
            log.info(
                "job %s: paused for the stop at step %d, checkpoint kept; the next start"
                " goes on from it",
                message.job,
                message.iteration,
            )
    for job_id in sorted(waiting):  # no checkpoint: stopped with the rest
        log.warning(
            "job %s: no checkpoint within shutdown_grace_s (%g s); stopped, it goes on"
            " from its last checkpoint at the next start",
            job_id,
            grace_s,
        )
    return paused


async def let_go(parts: Parts, agents: AgentInput, job_ids: set[str], wait_s: float) -> None:
    """Tell agents paused on the way out to leave (as a cancel does: each stops its
    loader workers and exits), and wait up to `wait_s` for them to end. Stopped by a
    SIGTERM to their process group instead, their loader workers die first, and PyTorch
    writes a crash's traceback into a job's log that is none."""
    for job_id in sorted(job_ids):
        await _send_on_the_way_out(parts, CancelMessage(job=job_id))
    left, deadline = set(job_ids), parts.now() + wait_s
    while left and parts.now() < deadline:
        left -= {ended.job_id for ended in await asyncio.to_thread(parts.launcher.exited)}
        message = await parts.link.receive(timeout_s=0.05)
        if isinstance(message, MetricsMessage):  # what they report as they exit
            agents.keep_metrics(message)
    if left:
        log.warning("jobs %s did not leave on the way out: stopping them", sorted(left))


async def _send_on_the_way_out(parts: Parts, message: PauseMessage | CancelMessage) -> None:
    """`message` in the version the agent spoke, given a second at most: an agent that
    reads nothing must not hold the stop up."""
    try:
        await asyncio.wait_for(parts.link.send(spoken(parts, message)), timeout=1.0)
    except TimeoutError:
        log.warning("job %s: agent did not take its %s on the way out", message.job, message.type)
