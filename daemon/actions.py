"""Carrying out the scheduler core's commands: processes started (`daemon/launching.py`),
messages sent to agents, state and events written to the store. No decisions: the core
made them. Exits are `daemon/reaping.py`'s (and so is carrying out what the core answers
about them); the stop's messages `daemon/shutdown.py`'s."""

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import Any, assert_never

from agents.protocol import (
    VERSION,
    CancelMessage,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
    ShareMessage,
)
from daemon import reaping
from daemon.eventlog import event_of
from daemon.launching import Starter, own_checkpoint
from daemon.parts import Parts
from daemon.store.reasons import JobReason, Moved, reason_words
from daemon.wording import (
    curve_refused_words,
    in_brief,
    launch_retry_words,
    stalled_words,
)
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

log = logging.getLogger(__name__)

ToAgent = PauseMessage | ResumeMessage | ShareMessage | CancelMessage


class Actions:
    """The service's hands."""

    def __init__(self, parts: Parts) -> None:
        self._parts = parts
        self._starter = Starter(parts)

    def carry_out_all(self, commands: Sequence[Command]) -> None:
        """Every command, even when one fails (a launch that raised is told to the core:
        `_launch`)."""
        for command in commands:
            try:
                self._carry_out(command)
            except Exception:
                log.exception("carrying out %r", command)

    def pin_cpus(self) -> None:
        self._starter.pin_cpus()

    def _carry_out(self, command: Command) -> None:
        parts = self._parts
        match command:
            case Placed(job_id=job_id, gpu_indices=gpu_indices):
                parts.store.update_job(job_id, time.time(), placement=gpu_indices)
            case Launch():
                self._launch(command)
            case Pause(job_id=job_id, gen=gen):
                parts.counters.pauses += 1
                self._send(PauseMessage(job=job_id, gen=gen))
            case Resume():
                parts.counters.resumes += 1
                self._resume(command)
            case SetShare():
                self._set_share(command)
            case Cancel(job_id=job_id):
                self._send(CancelMessage(job=job_id))
            case StopProcesses() | StepsKept() | ExitNoted():
                reaping.carry_out(parts, command)
            case HelloMissed() | PlanNeeded() | PlanAbandoned():
                pass  # the restorer's and the planner's, after the others (Service.feed)
            case (
                StateChanged()
                | Queued()
                | HelloNoted()
                | RanUnmanaged()
                | StaleMessage()
                | Restarting()
                | LaunchRetrying()
                | Stalled()
                | Planned()
                | Gated()
                | Replanned()
                | CurveRefused()
            ):
                self._record(command)
            case _ as unreachable:
                assert_never(unreachable)

    def _launch(self, command: Launch) -> None:
        """Start the job's processes; a launch that raised goes to the core as it was
        carried out (`LaunchFailed`, its checkpoint filled in), which decides what it means."""
        try:
            self._starter.start(
                command.job_id, command.gen, command.allocation, command.resume_from
            )
        except Exception as error:
            self._starter.launch_failed(command, error)

    def _resume(self, command: Resume) -> None:
        job_id, gen, allocation = command.job_id, command.gen, command.allocation
        if command.cold_paused_at is not None:
            self._starter.resume_cold(job_id, gen, allocation, command.cold_paused_at)
            return
        self._send(
            ResumeMessage(
                job=job_id,
                gen=gen,
                # A job without a loader holds none; its SDK ignores the count
                workers_per_gpu=max(1, allocation.workers_per_gpu),
                decoder_share=allocation.decoder_share,
                decode_mode=allocation.decode_mode,
            )
        )

    def _set_share(self, command: SetShare) -> None:
        parts, job_id, gen, share = self._parts, command.job_id, command.gen, command.decoder_share
        if parts.keys.version(job_id, VERSION) < 2:  # `share` is new in v2
            log.warning("job %s: agent speaks protocol v1; new share waits", job_id)
            return
        self._send(ShareMessage(job=job_id, gen=gen, decoder_share=share))
        parts.store.add_event(job_id, time.time(), "share", {"gen": gen, "share": share})

    def _record(self, record: Record) -> None:
        parts = self._parts
        job_id, kind, data = event_of(record)
        match record:
            case StateChanged(job_id=changed, new=new, iteration=iteration):
                self.set_state(changed, new, Moved.of(record), data)
                stored = parts.store.job(changed) if new.final else None
                # The figure it ended at (heartbeats' are not written as they come), unless
                # its `finished` wrote a later one than the core heard.
                if stored is not None and iteration > stored.iteration:
                    parts.store.update_job(changed, time.time(), iteration=iteration)
                return
            case Restarting(restarts=restarts):
                parts.store.update_job(record.job_id, time.time(), restarts=restarts)
            case Stalled(job_id=stalled_job, stalled=stalled):
                if stalled:
                    log.warning("job %s: %s", stalled_job, stalled_words(record))
            case CurveRefused(job_id=refused_job):  # it runs on, planned on its prior
                log.warning("job %s: %s", refused_job, curve_refused_words(record))
            case LaunchRetrying(job_id=waiting_job):  # the node's lack, not the job's
                log.warning("job %s: %s", waiting_job, launch_retry_words(record))
            case Planned(gen=gen, plan=plan):
                parts.counters.plans += 1
                allocations = plan.to_dict()["allocations"]
                assert isinstance(allocations, dict)
                parts.store.add_plan(gen, time.time(), parts.config.scheduler.policy, allocations)
            case Queued() | HelloNoted() | RanUnmanaged() | StaleMessage() | Gated() | Replanned():
                pass  # the event log's alone
            case _ as unreachable:
                assert_never(unreachable)
        parts.store.add_event(job_id, time.time(), kind, data)

    def set_state(
        self,
        job_id: str,
        state: JobState,
        reason: JobReason | None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Write a lifecycle change (the store checks it against the transition table)
        with why, typed (`reason`, None where nothing is said), in the same UPDATE, then
        its event; a job sent back for a restart leaves nothing running behind (an ended
        job's processes the core stops in time: `StopProcesses`)."""
        parts, held = self._parts, self._parts.held
        why = reason_words(reason)
        parts.store.update_job(job_id, time.time(), state=state.value, reason=reason)
        log.info("job %s: %s%s", job_id, state.value, in_brief(why))
        parts.store.add_event(job_id, time.time(), "state", data or {"to": state.value, "why": why})
        launcher = parts.launcher
        if state is JobState.SUBMITTED and launcher.running(job_id):
            launcher.stop(job_id, grace_s=0.0)  # lost or died: the restart needs it gone
        if state.final:
            held.measured.pop(job_id, None)
            held.pace.forget(job_id)
            held.said.pop(job_id, None)  # what its script last said is stored
            parts.tpm.sampler.forget(job_id)

    # ---- agents' messages that need more than the core ----------------------------------

    def cold_paused_at(self, message: PausedMessage) -> float | None:
        """When a cold-resize job paused (epoch s; its process exits now, and the core's
        `Resume` relaunches it); None for a job that resizes in place."""
        if self._parts.jobs.cold(message.job):
            return message.ts or time.time()
        return None

    def keep_checkpoint(self, message: PausedMessage) -> str:
        """Store the pause's checkpoint and iteration if the checkpoint is the job's own
        (`own_checkpoint`); the checkpoint kept, "" if none."""
        store = self._parts.store
        checkpoint = own_checkpoint(self._parts.launcher, message.job, message.checkpoint)
        if checkpoint:
            store.update_job(
                message.job, time.time(), checkpoint=checkpoint, iteration=message.iteration
            )
        return checkpoint

    def resumed(self, message: ResumedMessage) -> None:
        parts = self._parts
        parts.metrics.pause_gap.observe(message.gap_s)
        parts.store.add_event(
            message.job,
            time.time(),
            "resumed",
            {"gen": message.gen, "workers": message.workers, "gap_s": message.gap_s},
        )

    def _send(self, message: ToAgent) -> None:
        """To the job's agent, in the protocol version its hello spoke."""
        link = self._parts.link
        asyncio.get_running_loop().create_task(link.send(spoken(self._parts, message)))


def spoken(parts: Parts, message: ToAgent) -> ToAgent:
    """`message` in the protocol version the job's agent spoke in its hello: an older
    SDK refuses a version it does not know."""
    version = min(VERSION, parts.keys.version(message.job, VERSION))
    return message.model_copy(update={"v": version})
