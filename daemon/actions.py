"""Carrying out the scheduler core's commands: processes started and stopped, messages sent
to agents, state and events written to the store. No decisions: the core made them."""

import asyncio
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agents.protocol import (
    LAST_STEP_MARKER,
    SECRET_VARIABLE,
    VERSION,
    CancelMessage,
    MetricsMessage,
    PausedMessage,
    PauseMessage,
    ResumedMessage,
    ResumeMessage,
    ShareMessage,
    read_finished_marker,
    read_last_step_marker,
    read_stop_signal,
)
from daemon import continuing
from daemon.agentargs import (
    PASSED_ON,
    AgentLaunch,
    agent_argv,
    agent_env,
    command_ranks,
    job_path,
)
from daemon.exitreason import exit_reason, launch_failure, zoo_launch_failure
from daemon.launcher import Exit
from daemon.relaunch import Retries
from daemon.spawn import daemons_own
from scheduler.errors import UnknownJob
from scheduler.messages import (
    Allocation,
    Cancel,
    Command,
    Exited,
    Failed,
    Finished,
    Gated,
    Heartbeat,
    HelloNoted,
    Launch,
    Pause,
    Placed,
    Planned,
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
)
from scheduler.restore import stop_leaves_running
from scheduler.states import JobState

if TYPE_CHECKING:
    from daemon.service import Service

log = logging.getLogger(__name__)

_CANCEL_GRACE_S = 5.0
UNMANAGED_EVENT = "unmanaged"  # the kind of event that says a job runs without the SDK
EXITED_EVENT = "exited"  # a job's processes exited: their code, and why when that failed it


class AfterEnd(StrEnum):
    """How a completed job's work after its final step ended, when not with exit 0."""

    FAILED = "failed"  # its script exited non-zero: its save, its evaluation did not finish
    OVERRAN = "overran"  # still running `finished_exit_s` after its final step: stopped
    STOPPED = "stopped"  # a cancel stopped it: asked for, no failure


# An SDK script's own exit 0 without `job.epochs(n)` ending: a `for epoch in range(n)` loop,
# or a step-counting one. The job did what it was written to; a relaunch would run it again.
_ENDED_OUTSIDE_EPOCHS = (
    "exited with code 0 outside `job.epochs(n)`, so taken as completed at its last step;"
    " loop with `for epoch in job.epochs(n)` to have stoker know its length and resume it"
    " mid-run after a relaunch"
)
# A command without the SDK that an earlier daemon started: this one is not its parent, so
# its exit code is lost with it. Nothing says it failed; its logs say how it ended.
_ADOPTED_UNMANAGED_ENDED = (
    "its process ended; started by an earlier daemon and running without the SDK, it left"
    " no exit code this daemon could read (not its parent): taken as completed, its logs say"
    " how it ended"
)
# Nor when it ended before a restarted daemon took it back (while none ran, or while the
# new one waited for it): the new one finds it gone.
ENDED_UNSEEN = (
    "its process, started by an earlier daemon, ended before this one took it back; running"
    " without the SDK, it left no word of how (its exit code reaches only the daemon that"
    " started it): taken as completed, its logs say how it ended (not run again: it has no"
    " checkpoint to go on from)"
)
# A script's work after its final step (it keeps its GPUs meanwhile) is logged once it took
# this long: every script takes a moment to exit after `finished`.
_NOTED_AFTER_S = 5.0
ToAgent = PauseMessage | ResumeMessage | ShareMessage | CancelMessage


def _in_brief(why: str) -> str:
    """A reason for the daemon's log: its first line and, for a failure, its last (where
    a refusal to relaunch is said; the stderr between stays in the job's reason), printable
    characters only (what a script wrote is not the log's to format)."""
    lines = [line for line in why.splitlines() if line.strip()]
    if not lines:
        return ""
    brief = lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"
    return " (" + "".join(c if c.isprintable() else "?" for c in brief)[:300] + ")"


def event_of(record: Record) -> tuple[str | None, str, dict[str, Any]]:  # noqa: PLR0911 (one return a type)
    """(job, kind, data) of a record as the event log keeps it (`GET /v1/events`)."""
    match record:
        case StateChanged(job_id=job_id, old=old, new=new, why=why):
            data: dict[str, Any] = {"from": old.value if old else "restored", "to": new.value}
            return job_id, "state", {**data, "why": why} if why else data
        case Queued(job_id=job_id, gpus=gpus):
            return job_id, "submitted", {"gpus": gpus}
        case HelloNoted(job_id=job_id, gen=gen, state=state):
            return job_id, "hello", {"gen": gen, "state": state.value}
        case RanUnmanaged(job_id=job_id, unmanaged=unmanaged):
            return job_id, UNMANAGED_EVENT, {"unmanaged": unmanaged}
        case StaleMessage(job_id=job_id, message=message, gen=gen):
            stale: dict[str, Any] = {"message": message}
            return job_id, "stale", stale if gen is None else {**stale, "gen": gen}
        case Restarting(job_id=job_id, restarts=restarts, why=why):
            return job_id, "restart", {"restarts": restarts, "why": why}
        case Stalled(job_id=job_id, stalled=stalled, silent_s=silent_s, phase=phase):
            said: dict[str, Any] = {"stalled": stalled, "phase": phase}
            return job_id, "stall", {**said, "silent_s": round(silent_s, 1)} if stalled else said
        case Planned(gen=gen, plan=plan):
            return None, "plan", {"gen": gen, **plan.to_dict()}
        case Gated(gen=gen, verdicts=verdicts):
            return None, "gate", {"gen": gen, **{job: str(v) for job, v in verdicts.items()}}
        case Replanned(gen=gen, plan=plan):
            return None, "replan", {"gen": gen, **plan.to_dict()}


class Actions:
    """The service's hands."""

    def __init__(self, service: "Service") -> None:
        self._service = service
        self._resume_from: dict[str, str] = {}  # restored job -> its stored checkpoint
        self._cancelled_at: dict[str, float] = {}  # job told to stop -> when
        self._finished_at: dict[str, float] = {}  # completed, its processes still up -> when
        # Ended, its processes running on, stopped by the daemon: by whom (a cancel), or ""
        # when they overran `finished_exit_s`.
        self._stopped_after_end: dict[str, str] = {}
        self._cold_pauses: dict[str, float] = {}  # cold-resize job paused -> when (epoch s)
        self._pinned: dict[str, tuple[int, ...]] = {}  # `node.cpu_sets`: job -> its CPUs
        self._retries = Retries()  # launches that failed for the daemon's reasons

    def carry_out_all(self, commands: Sequence[Command]) -> None:
        """Every command, even when one fails: a launch that fails is the job's failure."""
        for command in commands:
            try:
                self._carry_out(command)
            except Exception as error:
                if isinstance(command, Launch):
                    self._launch_failed(command.job_id, error)
                else:
                    log.exception("carrying out %r", command)

    def _launch_failed(self, job_id: str, error: Exception) -> None:
        """A launch that raised is the job's failure. A command whose program could not be
        executed is the user's to fix, said in its reason; anything else is the daemon's,
        logged with its traceback."""
        run = self._command_run(job_id)
        if isinstance(error, OSError) and run is not None:
            user = self._service.job_user(job_id)
            why = launch_failure(error, *run, self._workdir(job_id), user)
            log.warning("job %s: %s", job_id, why)
        elif isinstance(error, OSError) and (said := zoo_launch_failure(error, sys.executable)):
            why = said  # the operator's to fix: where stoker is installed
            log.warning("job %s: %s", job_id, why)
        else:
            log.exception("job %s: launch failed", job_id)
            why = f"launch failed: {error}"
        self._service.feed(Failed(job_id, why))

    def _carry_out(self, command: Command) -> None:
        service = self._service
        match command:
            case Placed(job_id=job_id, gpu_indices=gpu_indices):
                service.store.update_job(job_id, time.time(), placement=gpu_indices)
            case Launch(job_id=job_id, gen=gen, allocation=allocation):
                resume_from = command.resume_from or self._resume_from.pop(job_id, "")
                self._retries.replaced(job_id)
                try:
                    self._start_agent(job_id, gen, allocation, resume_from)
                except OSError as error:  # the node's lack is no failure of the job's
                    if not daemons_own(error):
                        raise
                    again = replace(command, resume_from=resume_from)
                    self._retries.later(again, error, service.now(), service.store, time.time())
                    return
                self._retries.started(job_id)
            case Pause(job_id=job_id, gen=gen):
                service.counters.pauses += 1
                self._send(PauseMessage(job=job_id, gen=gen))
            case Resume(job_id=job_id, gen=gen, allocation=allocation):
                service.counters.resumes += 1
                if job_id in self._cold_pauses:
                    self._resume_cold(job_id, gen, allocation)
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
            case SetShare(job_id=job_id, gen=gen, decoder_share=share):
                if service.agent_version(job_id, VERSION) < 2:  # `share` is new in v2
                    log.warning("job %s: agent speaks protocol v1; new share waits", job_id)
                    return
                self._send(ShareMessage(job=job_id, gen=gen, decoder_share=share))
                service.store.add_event(job_id, time.time(), "share", {"gen": gen, "share": share})
            case Cancel(job_id=job_id):
                self._send(CancelMessage(job=job_id))
                self._cancelled_at[job_id] = service.now()
            case _:
                self._record(command)

    def _record(self, record: Record) -> None:
        service = self._service
        job_id, kind, data = event_of(record)
        match record:
            case StateChanged(job_id=changed, new=new, why=why, iteration=iteration):
                self.set_state(changed, new, why, data)
                stored = service.store.job(changed) if new.final else None
                # The figure it ended at (heartbeats' are not written as they come), unless
                # its `finished` wrote a later one than the core heard.
                if stored is not None and iteration > stored.iteration:
                    service.store.update_job(changed, time.time(), iteration=iteration)
                return
            case Restarting(restarts=restarts):
                service.store.update_job(record.job_id, time.time(), restarts=restarts)
            case Stalled(job_id=stalled_job, stalled=True, silent_s=silent_s, phase=phase):
                doing = f" in its {phase} phase" if phase else ""
                log.warning(
                    "job %s: stalled: no step and no new phase for %.0f s%s",
                    stalled_job, silent_s, doing,
                )  # fmt: skip
            case Planned(gen=gen, plan=plan):
                service.counters.plans += 1
                allocations = plan.to_dict()["allocations"]
                assert isinstance(allocations, dict)
                service.store.add_plan(
                    gen, time.time(), service.config.scheduler.policy, allocations
                )
        service.store.add_event(job_id, time.time(), kind, data)

    def set_state(
        self, job_id: str, state: JobState, why: str, data: dict[str, Any] | None = None
    ) -> None:
        """Write a lifecycle change (the store checks it against the transition table)
        and its event; a job that left leaves nothing running behind."""
        service = self._service
        service.store.update_job(job_id, time.time(), state=state.value)
        log.info("job %s: %s%s", job_id, state.value, _in_brief(why))
        service.store.add_event(
            job_id, time.time(), "state", data or {"to": state.value, "why": why}
        )
        launcher = service.launcher
        if state is JobState.SUBMITTED and launcher.running(job_id):
            launcher.stop(job_id, grace_s=0.0)  # lost or died: the restart needs it gone
        if state.final:
            service.measured.pop(job_id, None)
            service.pace.forget(job_id)
            service.forget_said(job_id)
            service.tpm.sampler.forget(job_id)
            if not launcher.running(job_id) or job_id in self._cancelled_at:
                return
            if state is JobState.COMPLETED:  # its script goes on after training, as it may
                self.watch_finished(job_id)
            else:
                self._cancelled_at[job_id] = service.now()  # lost or failed: make sure it is gone

    def watch_finished(self, job_id: str) -> None:
        """A completed job's processes run on (after its final step): stopped once
        `finished_exit_s` has passed, unless they exit first."""
        self._finished_at[job_id] = self._service.now()

    def resume_from(self, job_id: str, checkpoint: str) -> None:
        """Start the job's next launch from `checkpoint` (a job restored after a restart)."""
        self._resume_from[job_id] = checkpoint

    # ---- agents' messages that need more than the core ----------------------------------

    def paused(self, message: PausedMessage) -> str:
        """Record a pause; the checkpoint kept (`own_checkpoint`), "" if none."""
        if self._cold(message.job):  # its process exits now; Resume relaunches it
            self._cold_pauses[message.job] = message.ts or time.time()
        return self._keep_checkpoint(message)

    def _keep_checkpoint(self, message: PausedMessage) -> str:
        """Store the pause's checkpoint and iteration if the checkpoint is the job's own
        (`own_checkpoint`); the checkpoint kept, "" if none."""
        checkpoint = self.own_checkpoint(message.job, message.checkpoint)
        if checkpoint:
            self._service.store.update_job(
                message.job, time.time(), checkpoint=checkpoint, iteration=message.iteration
            )
        return checkpoint

    def own_checkpoint(self, job_id: str, path: str) -> str:
        """`path` if it lies in the job's own folder (links resolved), else "" and a
        warning: the daemon never keeps, nor starts a job from, a file that another process
        chose for it (issue 17, finding 4: a forged `paused` named /tmp/evil.pt)."""
        if not path:
            return ""
        own = self._service.launcher.job_dir(job_id).resolve()
        if Path(path).resolve().is_relative_to(own):
            return path
        log.warning("job %s: checkpoint %r is outside %s: ignored", job_id, path[:200], own)
        return ""

    def resumed(self, message: ResumedMessage) -> None:
        service = self._service
        service.metrics.pause_gap.observe(message.gap_s)
        service.store.add_event(
            message.job,
            time.time(),
            "resumed",
            {"gen": message.gen, "workers": message.workers, "gap_s": message.gap_s},
        )

    # ---- processes ------------------------------------------------------------------------

    def _resume_cold(self, job_id: str, gen: int, allocation: Allocation) -> None:
        """A cold-resize job's agent exited after `paused`: start a new one from the
        checkpoint with the new allocation; it says `resumed` after its first step."""
        paused_at = self._cold_pauses.pop(job_id)
        stored = self._service.store.job(job_id)
        checkpoint = stored.checkpoint if stored is not None else ""
        self._start_agent(job_id, gen, allocation, checkpoint, paused_at=paused_at)

    def _start_agent(
        self,
        job_id: str,
        gen: int,
        allocation: Allocation,
        resume_from: str,
        paused_at: float | None = None,
    ) -> None:
        service = self._service
        record = service.records[job_id]
        settings = record.settings
        service.counters.launches += 1
        if service.launcher.running(job_id):
            service.launcher.stop(job_id, grace_s=2.0)
        # An earlier attempt's last word is not this one's.
        (service.launcher.job_dir(job_id) / LAST_STEP_MARKER).unlink(missing_ok=True)
        simulated = service.simulated(settings)
        stored = service.store.job(job_id)
        placed = service.scheduler.status(job_id).gpu_indices
        launch = AgentLaunch(
            job_id=job_id,
            settings=settings,
            gen=gen,
            allocation=allocation,
            resume_from=self.own_checkpoint(job_id, resume_from),  # a state dir's older rows too
            secret=service.new_agent_secret(job_id),
            job_dir=service.launcher.job_dir(job_id),
            dataset=None if simulated or settings.is_command else service.dataset(settings),
            predicted=service.tpm.rates.job_spec(service.request(record)) if simulated else None,
            paused_at=paused_at,
            attempt=stored.restarts if stored is not None else 0,
            gpu_indices=placed,
            uses_gpus=service.uses_gpus,
            threads=service.node.threads_per_slot,
            user=service.job_user(job_id),
            cpus=service.node.job_cpus(placed, _occupied(self._placed())),
            lineage_root=continuing.lineage(service.store, job_id)[0].id
            if settings.continue_from
            else "",
        )
        if launch.cpus:
            self._pinned[job_id] = launch.cpus
        if simulated:
            # its tenant's socket, as a process agent's (issue 37, finding 13)
            endpoint = service.link.endpoint_for(service.job_user_name(job_id))
            argv = agent_argv(service.config, launch, endpoint, service.decoder_endpoint)
            indices = ",".join(str(index) for index in launch.gpu_indices)
            slot = "CUDA_VISIBLE_DEVICES" if service.uses_gpus else "STOKER_CPU_SLOTS"
            own = {slot: indices, "STOKER_JOB_ID": job_id, "STOKER_JOB_DIR": str(launch.job_dir)}
            own[SECRET_VARIABLE] = launch.secret
            pid = service.launcher.launch(job_id, argv, agent_env(os.environ, own))
        else:  # a command, or a zoo job's command: the built-in trainer on the SDK
            endpoint = service.link.endpoint_for(service.job_user_name(job_id))
            decoder = service.decoder_endpoint
            ranks = command_ranks(service.config, launch, endpoint, os.environ, decoder)
            pid = service.launcher.launch_ranks(job_id, ranks)
        service.store.update_job(job_id, time.time(), pid=pid)

    def _cold(self, job_id: str) -> bool:
        """Whether the job resizes cold: its processes exit after each pause (a simulated
        agent resizes hot)."""
        record = self._service.records.get(job_id)
        if record is None or record.settings.resize != "cold":
            return False
        return not self._service.simulated(record.settings)

    def _send(self, message: ToAgent) -> None:
        """To the job's agent, in the protocol version its hello spoke."""
        asyncio.get_running_loop().create_task(self._service.link.send(self._spoken(message)))

    def _spoken(self, message: ToAgent) -> ToAgent:
        """`message` in the protocol version the job's agent spoke in its hello: an older
        SDK refuses a version it does not know."""
        spoken = min(VERSION, self._service.agent_version(message.job, VERSION))
        return message.model_copy(update={"v": spoken})

    def finished_marker(self, job_id: str) -> int | None:
        """The final iteration an agent wrote when it finished, if it did."""
        return read_finished_marker(self._service.launcher.jobs_dir / job_id)

    def reap(self) -> None:
        """Agents that exited become the core's Finished or Failed; jobs told to stop that
        did not are stopped."""
        service = self._service
        for ended in service.launcher.exited():
            job_id, code = ended.job_id, ended.code
            self._cancelled_at.pop(job_id, None)
            finished_at = self._finished_at.pop(job_id, None)
            if finished_at is not None and service.now() - finished_at >= _NOTED_AFTER_S:
                log.info(
                    "job %s: its processes exited %.0f s after its final step; its GPUs are free",
                    job_id,
                    service.now() - finished_at,
                )
            service.link.forget(job_id)  # its next launch connects under a new identity
            status = service.scheduler.jobs().get(job_id)
            if status is not None and status.state is JobState.CANCELLED:
                self._stopped_at(job_id)
            if status is None or not status.state.holds_resources:
                # It ended before: `_free_exited` gives its GPUs back.
                self._note_exit(ended, status.state if status else None, finished_at)
                continue
            if code == 0 and job_id in self._cold_pauses:
                continue  # a cold resize: it checkpointed and left, as asked
            self._ended(ended, status.state, status.unmanaged)
            now = service.scheduler.jobs().get(job_id)  # as its end made it
            self._note_exit(ended, now.state if now is not None else None, finished_at)
        service.restorer.expire()
        self.carry_out_all(self._retries.due(service.now(), service.scheduler))
        for job_id, since in list(self._cancelled_at.items()):
            if service.now() - since >= _CANCEL_GRACE_S:
                del self._cancelled_at[job_id]
                service.launcher.stop(job_id, grace_s=0.5)
        limit = service.config.finished_exit_s
        for job_id, since in list(self._finished_at.items()):
            if service.now() - since >= limit:
                del self._finished_at[job_id]
                self._stopped_after_end[job_id] = ""  # overran: its exit says so
                log.warning(
                    "job %s: still running %.0f s after its final step (finished_exit_s); stopped",
                    job_id,
                    limit,
                )
                service.launcher.stop(job_id, grace_s=0.5)
        self._free_exited()

    def _ended(self, ended: Exit, state: JobState, unmanaged: bool) -> None:
        """A running job's processes exited: its end, as its markers and exit code say."""
        service, job_id, code = self._service, ended.job_id, ended.code
        final = self.finished_marker(job_id)
        # It exited before its `finished` was read, and may have failed after it (in its
        # save): its exit is noted as such then (`_note_exit`).
        if final is not None:
            service.store.update_job(job_id, time.time(), iteration=final)
            service.feed(Finished(job_id))
        elif code == 0 and self._without_sdk(job_id, state, unmanaged):
            service.feed(Finished(job_id))  # without the SDK, exit 0 is its only word
        elif code is None and unmanaged:  # adopted: no word, nor an exit code
            service.feed(Finished(job_id, why=_ADOPTED_UNMANAGED_ENDED))
        elif code == 0 and state is JobState.RUNNING and self._stop_signal(job_id) is None:
            # Its script ended by itself, outside `job.epochs(n)`: its end. (In a round, an
            # exit may be a cold resize's whose `paused` is not read yet; after a signal,
            # one that left its loop on `job.should_stop()`: stopped, not done.)
            self._last_word(job_id)
            service.feed(Finished(job_id, why=_ENDED_OUTSIDE_EPOCHS))
        else:
            self._last_word(job_id)
            service.feed(Failed(job_id, self._exit_reason(ended)))

    def _note_exit(self, ended: Exit, state: JobState | None, finished_at: float | None) -> None:
        """Keep how the job's processes exited (`exit_code` in its view). A completed job's
        script that then fails, after its final step (its save, its evaluation), is said so
        in its reason: its training is done, what came after it is not; so is one still
        running `finished_exit_s` after its end, which the daemon stopped. One a cancel
        stopped after its end was stopped, not failed."""
        # An adopted agent's code is not this daemon's to read: kept as unknown, so that an
        # earlier attempt's is not taken for it.
        data: dict[str, Any] = {"code": ended.code}
        stopped_by = self._stopped_after_end.pop(ended.job_id, None)
        if state is JobState.COMPLETED and ended.code not in (0, None):
            if stopped_by:  # a cancel of its work after training: stopped, not failed
                data["after_end"] = AfterEnd.STOPPED.value
            elif stopped_by is None:
                after = (
                    "after it"
                    if finished_at is None
                    else (f"{self._service.now() - finished_at:.0f} s after it")
                )
                data["after_end"] = AfterEnd.FAILED.value
                data["why"] = (
                    f"completed its final step; then, {after}, its script failed:"
                    f" {self._exit_reason(ended)}"
                )
            else:  # overran: still running `finished_exit_s` after its final step
                limit = self._service.config.finished_exit_s
                data["after_end"] = AfterEnd.OVERRAN.value
                data["why"] = (
                    f"completed its final step; then, still running {limit:g} s after it"
                    " (finished_exit_s), it was stopped"
                )
            if "why" in data:
                log.warning("job %s: %s", ended.job_id, data["why"].splitlines()[0])
        self._service.store.add_event(ended.job_id, time.time(), EXITED_EVENT, data)

    def stop_after_end(self, job_id: str, by: str) -> None:
        """Cancel a job that ended while its processes run on (a script still saving after
        its final step): they are stopped, and its GPUs go to the next job."""
        service = self._service
        self._finished_at.pop(job_id, None)
        self._cancelled_at.pop(job_id, None)
        why = f"its processes, running on after its end, were stopped by {by}"
        self._stopped_after_end[job_id] = by
        log.info("job %s: %s", job_id, why)
        service.store.add_event(job_id, time.time(), "stopped", {"by": by, "why": why})
        service.launcher.stop(job_id, grace_s=1.0)  # the SDK exits at once on SIGTERM then
        self._free_exited()

    def _free_exited(self) -> None:
        """The GPUs the core keeps for jobs that ended while their processes ran (a
        script's work after its final step, a cancelled or lost job stopping) go to the next
        job once none of those processes runs: reaped, stopped, or gone before the end."""
        service = self._service
        for job_id in sorted(service.scheduler.exiting):
            if not service.launcher.running(job_id):
                service.feed(Exited(job_id))

    def _stop_signal(self, job_id: str) -> int | None:
        """The stop signal the job's script caught before it exited, as its marker says."""
        return read_stop_signal(self._service.launcher.job_dir(job_id))

    def _stopped_at(self, job_id: str) -> None:
        """A cancelled job's processes exited: keep the step its agent stopped at (its
        checkpoint's, which `stoker resume` goes on from), as its marker says; its last
        heartbeat may be a second behind."""
        completed = self.last_step_marker(job_id)
        stored = self._service.store.job(job_id)
        if completed is not None and stored is not None and completed > stored.iteration:
            self._service.store.update_job(job_id, time.time(), iteration=completed)

    def last_step_marker(self, job_id: str) -> int | None:
        """The steps the job's last agent said it completed as it exited unfinished (the
        SDK's marker), or None: none exited so since its launch, or it ran without the SDK."""
        return read_last_step_marker(self._service.launcher.job_dir(job_id))

    def _last_word(self, job_id: str) -> None:
        """The steps a failed agent completed, from the marker it left as it exited: its
        last heartbeat, which says the same, may not have been read yet (a later one is
        then stale), and without it a crash in the first second reads as no progress."""
        completed = self.last_step_marker(job_id)
        if completed is not None:
            gen = self._service.scheduler.generation
            self._service.feed(Heartbeat.last_word(job_id, gen, completed))

    def _exit_reason(self, ended: Exit) -> str:
        """`exit_reason` of a job's processes, told the command and the PATH it ran with."""
        job_dir = self._service.launcher.job_dir(ended.job_id)
        command, search_path = self._command_run(ended.job_id) or ((), None)
        record = self._service.records.get(ended.job_id)
        given = {name for name, _ in record.settings.env} if record is not None else set()
        variables = given | set(PASSED_ON)  # and stoker's own, which no script misses
        return exit_reason(
            ended.code,
            job_dir,
            ended.failures,
            command=command,
            search_path=search_path,
            variables=variables,
            workdir=self._workdir(ended.job_id) if command else None,
        )

    def _workdir(self, job_id: str) -> str:
        """The folder a command job runs in: its `workdir`, else its job folder (as
        `command_ranks` sets it)."""
        record = self._service.records.get(job_id)
        given = record.settings.workdir if record is not None else None
        return given or str(self._service.launcher.job_dir(job_id))

    def _command_run(self, job_id: str) -> tuple[Sequence[str], str | None] | None:
        """A command job's argv and the PATH it runs with; None for a zoo job (the daemon's
        own python runs it)."""
        record = self._service.records.get(job_id)
        if record is None or record.settings.command is None:
            return None
        return record.settings.command, job_path(record.settings, os.environ)

    def pin_cpus(self) -> None:
        """With `node.cpu_sets`, keep each running job on its share of the CPUs as jobs
        come and go (`NodeResources.job_cpus`): moved only when its share changes."""
        service = self._service
        if not service.node.cpu_sets:
            return
        placed = self._placed()
        occupied = _occupied(placed)
        for job_id in set(self._pinned) - set(placed):
            del self._pinned[job_id]
        for job_id, slots in placed.items():
            cpus = service.node.job_cpus(slots, occupied)
            if self._pinned.get(job_id) != cpus:
                service.launcher.pin(job_id, cpus)
                self._pinned[job_id] = cpus

    def _placed(self) -> dict[str, tuple[int, ...]]:
        """The slots of each job whose processes run."""
        return {job_id: self._slots(job_id) for job_id in self._service.launcher.job_ids()}

    def _slots(self, job_id: str) -> tuple[int, ...]:
        """The job's GPUs (or CPU slots); none for a process the core does not know."""
        try:
            return self._service.scheduler.status(job_id).gpu_indices
        except UnknownJob:
            return ()

    def _without_sdk(self, job_id: str, state: JobState, unmanaged: bool) -> bool:
        """Whether a job's process ran without the SDK: a command run unmanaged, or one that
        ended before it would have been (it never said hello)."""
        record = self._service.records.get(job_id)
        command = record is not None and record.settings.command is not None
        return unmanaged or (command and state is JobState.STARTING)

    def left_running(self) -> set[str]:
        """The jobs a stopping daemon leaves running: commands without the SDK, which have
        no checkpoint to go on from, and commands that have not said hello yet (which may
        be such). Each is logged, with how to stop it."""
        service = self._service
        kept = {
            job_id
            for job_id, status in service.scheduler.jobs().items()
            if stop_leaves_running(
                status.state,
                command=self._command_run(job_id) is not None,
                unmanaged=status.unmanaged,
            )
            and service.launcher.running(job_id)
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

    async def pause_all(self, grace_s: float) -> set[str]:
        """Ask every running agent to pause (it writes a checkpoint) and record the
        checkpoints of the `paused` replies until all came or `grace_s` is up; the jobs
        that paused, those a round had paused already among them."""
        service = self._service
        states = {
            job_id: status.state
            for job_id, status in service.scheduler.jobs().items()
            if not status.unmanaged  # it cannot pause: it is stopped with the others
            and service.launcher.running(job_id)
            and job_id not in self._cold_pauses  # paused cold: its process has left
        }
        # Resuming ones run their first step: they see the pause at its end, as running ones.
        told = (JobState.RUNNING, JobState.RESUMING)
        waiting = {job_id for job_id, state in states.items() if state in told}
        for job_id in sorted(waiting):
            await self._send_on_the_way_out(
                PauseMessage(job=job_id, gen=service.scheduler.generation + 1)
            )
        # A round's own pauses: those told already pause (or have) and wait for a resume.
        waiting |= {job_id for job_id, state in states.items() if state is JobState.PAUSING}
        paused = {job_id for job_id, state in states.items() if state is JobState.PAUSED}
        deadline = service.now() + grace_s
        while waiting and service.now() < deadline:
            message = await service.link.receive(timeout_s=deadline - service.now())
            if isinstance(message, MetricsMessage):  # the SDK sends them before it checkpoints
                service.keep_metrics(message)
            elif (
                isinstance(message, PausedMessage)
                and message.job in waiting
                and service.authentic(message)
            ):
                waiting.discard(message.job)
                paused.add(message.job)
                self._keep_checkpoint(message)
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

    async def let_go(self, job_ids: set[str], wait_s: float) -> None:
        """Tell agents paused on the way out to leave (as a cancel does: each stops its
        loader workers and exits), and wait up to `wait_s` for them to end. Stopped by a
        SIGTERM to their process group instead, their loader workers die first, and PyTorch
        writes a crash's traceback into a job's log that is none."""
        service = self._service
        for job_id in sorted(job_ids):
            await self._send_on_the_way_out(CancelMessage(job=job_id))
        left, deadline = set(job_ids), service.now() + wait_s
        while left and service.now() < deadline:
            left -= {ended.job_id for ended in await asyncio.to_thread(service.launcher.exited)}
            message = await service.link.receive(timeout_s=0.05)
            if isinstance(message, MetricsMessage):  # what they report as they exit
                service.keep_metrics(message)
        if left:
            log.warning("jobs %s did not leave on the way out: stopping them", sorted(left))

    async def _send_on_the_way_out(self, message: PauseMessage | CancelMessage) -> None:
        """`message` in the version the agent spoke, given a second at most: an agent that
        reads nothing must not hold the stop up."""
        try:
            await asyncio.wait_for(self._service.link.send(self._spoken(message)), timeout=1.0)
        except TimeoutError:
            log.warning(
                "job %s: agent did not take its %s on the way out", message.job, message.type
            )


def _occupied(placed: Mapping[str, Sequence[int]]) -> list[int]:
    """The slots that hold a running job."""
    return sorted({slot for slots in placed.values() for slot in slots})
