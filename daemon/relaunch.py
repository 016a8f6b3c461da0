"""Launches that failed for the daemon's own reasons (no file descriptors, memory or
processes left on the node: `daemon.spawn.daemons_own`), tried again after a pause that
doubles, up to `_LONGEST_S`. Such a failure is not the job's: it is neither its failure
nor one of its restarts. The core keeps the job starting meanwhile; its launch timeout
(`scheduler.launch_timeout_s`) still ends a launch that never succeeds."""

import logging
from dataclasses import replace

from daemon.store import Store
from scheduler.messages import Launch
from scheduler.scheduler import Scheduler

log = logging.getLogger(__name__)

_FIRST_S = 0.5
_LONGEST_S = 10.0
RETRY_EVENT = "launch_retry"  # the kind of a job's event that says its launch waits


class Retries:
    """The launches waiting to be tried again, and how often each was tried."""

    def __init__(self) -> None:
        self._waiting: dict[str, tuple[float, Launch]] = {}  # job -> (when, its launch)
        self._tries: dict[str, int] = {}

    def later(self, command: Launch, error: OSError, now: float, store: Store, at: float) -> None:
        """Try `command` again after a pause; said in the log and in the job's events
        (`at`: the wall clock's time)."""
        job_id = command.job_id
        tries = self._tries.get(job_id, 0)
        pause = min(_LONGEST_S, _FIRST_S * 2**tries)
        self._tries[job_id] = tries + 1
        self._waiting[job_id] = (now + pause, command)
        why = f"the daemon could not start it ({error}); tried again in {pause:g} s"
        log.warning("job %s: %s", job_id, why)
        store.add_event(job_id, at, RETRY_EVENT, {"why": why, "tries": tries + 1})

    def replaced(self, job_id: str) -> None:
        """A new launch of the job is being carried out: the waiting one is not needed."""
        self._waiting.pop(job_id, None)

    def started(self, job_id: str) -> None:
        self._waiting.pop(job_id, None)
        self._tries.pop(job_id, None)

    def due(self, now: float, scheduler: Scheduler) -> list[Launch]:
        """The launches to try now, of jobs the core still has starting or running; the
        others are forgotten (cancelled meanwhile, or lost at the launch timeout)."""
        ready = [job_id for job_id, (when, _) in self._waiting.items() if when <= now]
        commands = []
        for job_id in ready:
            _, command = self._waiting.pop(job_id)
            status = scheduler.jobs().get(job_id)
            if status is None or not status.state.holds_resources:
                self._tries.pop(job_id, None)
                continue
            commands.append(replace(command))
        return commands
