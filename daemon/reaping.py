"""Processes that ended, and processes that must: each exit of a job's processes becomes what
the core is told (`ProcessExited`: its facts gathered here, with the daemon's account of it
from `daemon/exitreason.py`; the core decides what it means, scheduler/processes.py), and
what the core answers about them is carried out: their stop (`StopProcesses`, when a
cancel's grace or a completed job's `finished_exit_s` is over, or a cancel asks), the steps
their markers said (`StepsKept`), and their note in the job's events (`ExitNoted`); a stop
or a failure after the job's end is also its reason, typed on its row (daemon/store/reasons.py)."""

import logging
import time
from typing import Any, assert_never

from agents.protocol import read_finished_marker, read_last_step_marker, read_stop_signal
from daemon.agentargs import PASSED_ON
from daemon.eventlog import EXITED_EVENT
from daemon.exitreason import exit_reason
from daemon.launcher import Exit, Launcher
from daemon.parts import Parts
from daemon.store.reasons import FailedAfterEnd, StoppedAfterEnd, reason_words
from daemon.wording import stopped_words
from scheduler.exits import ExitFacts
from scheduler.messages import (
    ExitCommand,
    Exited,
    ExitNoted,
    ProcessExited,
    StepsKept,
    StopProcesses,
    StopReason,
)

log = logging.getLogger(__name__)

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
    def __init__(self, parts: Parts) -> None:
        self._parts = parts

    def exits(self) -> None:
        """Agents that exited: their facts and the daemon's account of each go to the core,
        which decides what the exit is (scheduler/processes.py)."""
        parts = self._parts
        for ended in parts.launcher.exited():
            parts.link.forget(ended.job_id)  # its next launch connects under a new identity
            said = self._exit_reason(ended)
            parts.feed(ProcessExited(ended.job_id, self._facts(ended), said))

    def _facts(self, ended: Exit) -> ExitFacts:
        """What the daemon knows of one exit: its code, the SDK's markers (the core adds
        its own state of the job)."""
        parts, job_id = self._parts, ended.job_id
        job_dir = parts.launcher.job_dir(job_id)
        return ExitFacts(
            code=ended.code,
            command=parts.jobs.command_run(job_id) is not None,
            finished=finished_marker(parts.launcher, job_id),
            last_step=last_step_marker(parts.launcher, job_id),
            stop_signal=read_stop_signal(job_dir),
        )

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


def carry_out(parts: Parts, command: ExitCommand) -> None:
    """What the core answers about a job's processes."""
    match command:
        case StopProcesses():
            stop_processes(parts, command)
        case StepsKept():
            keep_steps(parts, command)
        case ExitNoted():
            note_exit(parts, command)
        case _ as unreachable:
            assert_never(unreachable)


def stop_processes(parts: Parts, command: StopProcesses) -> None:
    """Stop the processes of a job that ended, as the core says why."""
    job_id = command.job_id
    match command.reason:
        case StopReason.GRACE_OVER:
            pass
        case StopReason.OVERRAN:
            log.warning(
                "job %s: still running %.0f s after its final step (finished_exit_s); stopped",
                job_id,
                parts.config.scheduler.finished_exit_s,
            )
        case StopReason.ASKED:  # its work after its end, cancelled
            why = stopped_words(command.by)
            log.info("job %s: %s", job_id, why)
            parts.store.update_job(job_id, time.time(), reason=StoppedAfterEnd(command.by))
            parts.store.add_event(job_id, time.time(), "stopped", {"by": command.by, "why": why})
            parts.launcher.stop(job_id, grace_s=1.0)  # the SDK exits at once on SIGTERM then
            return
        case _ as unreachable:
            assert_never(unreachable)
    parts.launcher.stop(job_id, grace_s=0.5)


def keep_steps(parts: Parts, command: StepsKept) -> None:
    """Store the steps an exit's markers said: a cancelled job's stop step (its
    checkpoint's, which `stoker resume` goes on from) only past the stored one, as its last
    heartbeat may be a second behind; a finished one's final step as is."""
    job_id = command.job_id
    stored = parts.store.job(job_id) if command.if_later else None
    if command.if_later and (stored is None or command.iteration <= stored.iteration):
        return
    parts.store.update_job(job_id, time.time(), iteration=command.iteration)


def note_exit(parts: Parts, command: ExitNoted) -> None:
    """Keep how the job's processes exited (`exit_code` in its view). A completed job's
    script that then fails, after its final step (its save, its evaluation), is said so
    in its reason: its training is done, what came after it is not; so is one still
    running `finished_exit_s` after its end, which the daemon stopped. One a cancel
    stopped after its end was stopped, not failed."""
    job_id, since = command.job_id, command.since_s
    if since is not None and since >= _NOTED_AFTER_S:
        log.info(
            "job %s: its processes exited %.0f s after its final step; its GPUs are free",
            job_id,
            since,
        )
    # An adopted agent's code is not this daemon's to read: kept as unknown, so that an
    # earlier attempt's is not taken for it.
    data: dict[str, Any] = {"code": command.code}
    after = command.after_end
    if after is not None:
        data["after_end"] = after.value
        failure = FailedAfterEnd(after, command.said, since, parts.config.scheduler.finished_exit_s)
        why = reason_words(failure)
        if why:  # its work failed or overran; one stopped as asked is no reason
            data["why"] = why
            log.warning("job %s: %s", job_id, why.splitlines()[0])
            parts.store.update_job(job_id, time.time(), reason=failure)
    parts.store.add_event(job_id, time.time(), EXITED_EVENT, data)
