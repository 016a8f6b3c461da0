"""Processes that ended, and processes that must: each exit of a job's processes becomes what
the core is told (its facts gathered here, their meaning decided by `scheduler/exits.py`, a
failure's exit worded by `daemon/exitreason.py`), and the stops whose time came (a cancel's
grace, a completed job's `finished_exit_s`) are carried out."""

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, assert_never

from agents.protocol import read_finished_marker, read_last_step_marker, read_stop_signal
from daemon.agentargs import PASSED_ON
from daemon.eventlog import EXITED_EVENT
from daemon.exitreason import after_end_why, exit_reason
from daemon.launcher import Exit, Launcher
from daemon.parts import Parts
from scheduler.exits import AfterEnd, ExitFacts, ExitKind, ExitVerdict, after_end, classify_exit
from scheduler.messages import Command, EndReason, Exited, Failed, Finished, Heartbeat
from scheduler.states import JobState

log = logging.getLogger(__name__)

_CANCEL_GRACE_S = 5.0
# A script's work after its final step (it keeps its GPUs meanwhile) is logged once it took
# this long: every script takes a moment to exit after `finished`.
_NOTED_AFTER_S = 5.0


def finished_marker(launcher: Launcher, job_id: str) -> int | None:
    """The final iteration an agent wrote when it finished, if it did."""
    return read_finished_marker(launcher.jobs_dir / job_id)


def last_step_marker(launcher: Launcher, job_id: str) -> int | None:
    """The steps the job's last agent said it completed as it exited unfinished (the
    SDK's marker), or None: none exited so since its launch, or it ran without the SDK."""
    return read_last_step_marker(launcher.job_dir(job_id))


class Reaper:
    def __init__(self, parts: Parts, carry_out_all: Callable[[Sequence[Command]], None]) -> None:
        self._parts = parts
        self._carry_out_all = carry_out_all

    def exits(self) -> None:
        """Agents that exited become the core's Finished or Failed."""
        parts, held = self._parts, self._parts.held
        for ended in parts.launcher.exited():
            job_id = ended.job_id
            held.cancelled_at.pop(job_id, None)
            finished_at = held.finished_at.pop(job_id, None)
            if finished_at is not None and parts.now() - finished_at >= _NOTED_AFTER_S:
                log.info(
                    "job %s: its processes exited %.0f s after its final step; its GPUs are free",
                    job_id,
                    parts.now() - finished_at,
                )
            parts.link.forget(job_id)  # its next launch connects under a new identity
            verdict = classify_exit(self._facts(ended))
            self._end(ended, verdict)
            if verdict.noted:
                now = parts.scheduler.jobs().get(job_id)  # as its end made it
                self._note_exit(ended, now.state if now is not None else None, finished_at)

    def _facts(self, ended: Exit) -> ExitFacts:
        """What is known of one exit: its code, the core's state, the SDK's markers."""
        parts, job_id = self._parts, ended.job_id
        status = parts.scheduler.jobs().get(job_id)
        job_dir = parts.launcher.job_dir(job_id)
        return ExitFacts(
            code=ended.code,
            state=status.state if status is not None else None,
            unmanaged=status is not None and status.unmanaged,
            command=parts.jobs.command_run(job_id) is not None,
            cold_paused=job_id in parts.held.cold_pauses,
            finished=finished_marker(parts.launcher, job_id),
            last_step=last_step_marker(parts.launcher, job_id),
            stop_signal=read_stop_signal(job_dir),
        )

    def _end(self, ended: Exit, verdict: ExitVerdict) -> None:
        """Tell the core what the exit is, as `verdict` says."""
        parts, job_id = self._parts, ended.job_id
        if verdict.stopped_at is not None:
            self._stopped_at(job_id, verdict.stopped_at)
        if verdict.last_word is not None:
            gen = parts.scheduler.generation
            parts.feed(Heartbeat.last_word(job_id, gen, verdict.last_word))
        match verdict.kind:
            case ExitKind.COLD_RESIZE | ExitKind.ENDED_BEFORE:
                return  # asked for; or ended before: `free_exited` gives its GPUs back
            case ExitKind.FINISHED:
                parts.store.update_job(job_id, time.time(), iteration=verdict.final_iteration)
                parts.feed(Finished(job_id))
            case ExitKind.FINISHED_WITHOUT_SDK:
                parts.feed(Finished(job_id))  # without the SDK, exit 0 is its only word
            case ExitKind.ADOPTED_UNMANAGED_ENDED:
                parts.feed(Finished(job_id, how=EndReason.UNMANAGED_ENDED))
            case ExitKind.ENDED_OUTSIDE_EPOCHS:
                parts.feed(Finished(job_id, how=EndReason.ENDED_OUTSIDE_EPOCHS))
            case ExitKind.FAILED:
                parts.feed(Failed(job_id, self._exit_reason(ended), cause=EndReason.EXITED))
            case _ as unreachable:
                assert_never(unreachable)

    def _stopped_at(self, job_id: str, completed: int) -> None:
        """A cancelled job's processes exited: keep the step its agent stopped at (its
        checkpoint's, which `stoker resume` goes on from), as its marker says; its last
        heartbeat may be a second behind."""
        stored = self._parts.store.job(job_id)
        if stored is not None and completed > stored.iteration:
            self._parts.store.update_job(job_id, time.time(), iteration=completed)

    def _note_exit(self, ended: Exit, state: JobState | None, finished_at: float | None) -> None:
        """Keep how the job's processes exited (`exit_code` in its view). A completed job's
        script that then fails, after its final step (its save, its evaluation), is said so
        in its reason: its training is done, what came after it is not; so is one still
        running `finished_exit_s` after its end, which the daemon stopped. One a cancel
        stopped after its end was stopped, not failed."""
        parts = self._parts
        # An adopted agent's code is not this daemon's to read: kept as unknown, so that an
        # earlier attempt's is not taken for it.
        data: dict[str, Any] = {"code": ended.code}
        stopped = parts.held.stopped_after_end.pop(ended.job_id, None)
        after = after_end(ended.code, state, stopped)
        if after is not None:
            data["after_end"] = after.value
            failure = self._exit_reason(ended) if after is AfterEnd.FAILED else ""
            since = None if finished_at is None else parts.now() - finished_at
            why = after_end_why(after, failure, since, parts.config.finished_exit_s)
            if why:
                data["why"] = why
                log.warning("job %s: %s", ended.job_id, why.splitlines()[0])
        parts.store.add_event(ended.job_id, time.time(), EXITED_EVENT, data)

    def timers(self) -> None:
        """Launches to try again; jobs told to stop that did not, and completed jobs
        running past `finished_exit_s`, are stopped; GPUs of exited jobs freed."""
        parts, held = self._parts, self._parts.held
        self._carry_out_all(held.retries.due(parts.now(), parts.scheduler))
        for job_id, since in list(held.cancelled_at.items()):
            if parts.now() - since >= _CANCEL_GRACE_S:
                del held.cancelled_at[job_id]
                parts.launcher.stop(job_id, grace_s=0.5)
        limit = parts.config.finished_exit_s
        for job_id, since in list(held.finished_at.items()):
            if parts.now() - since >= limit:
                del held.finished_at[job_id]
                held.stopped_after_end[job_id] = AfterEnd.OVERRAN  # its exit says so
                log.warning(
                    "job %s: still running %.0f s after its final step (finished_exit_s); stopped",
                    job_id,
                    limit,
                )
                parts.launcher.stop(job_id, grace_s=0.5)
        self.free_exited()

    def stop_after_end(self, job_id: str, by: str) -> None:
        """Cancel a job that ended while its processes run on (a script still saving after
        its final step): they are stopped, and its GPUs go to the next job."""
        parts, held = self._parts, self._parts.held
        held.finished_at.pop(job_id, None)
        held.cancelled_at.pop(job_id, None)
        why = f"its processes, running on after its end, were stopped by {by}"
        held.stopped_after_end[job_id] = AfterEnd.STOPPED
        log.info("job %s: %s", job_id, why)
        parts.store.add_event(job_id, time.time(), "stopped", {"by": by, "why": why})
        parts.launcher.stop(job_id, grace_s=1.0)  # the SDK exits at once on SIGTERM then
        self.free_exited()

    def free_exited(self) -> None:
        """The GPUs the core keeps for jobs that ended while their processes ran (a
        script's work after its final step, a cancelled or lost job stopping) go to the next
        job once none of those processes runs: reaped, stopped, or gone before the end."""
        parts = self._parts
        for job_id in sorted(parts.scheduler.exiting):
            if not parts.launcher.running(job_id):
                parts.feed(Exited(job_id))

    def _exit_reason(self, ended: Exit) -> str:
        """`exit_reason` of a job's processes, told the command and the PATH it ran with."""
        parts = self._parts
        job_dir = parts.launcher.job_dir(ended.job_id)
        command, search_path = parts.jobs.command_run(ended.job_id) or ((), None)
        variables = parts.jobs.env_given(ended.job_id) | set(PASSED_ON)  # stoker's own too
        return exit_reason(
            ended.code,
            job_dir,
            ended.failures,
            command=command,
            search_path=search_path,
            variables=variables,
            workdir=parts.jobs.workdir(ended.job_id, job_dir) if command else None,
        )
