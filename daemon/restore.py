"""Bringing back the jobs an earlier daemon left unfinished. What to do with each is the
core's decision (`scheduler/restore.py`); this module reads the facts it needs from the
state dir and the process table, and carries the decision out.

A running job whose agent may have outlived the old daemon holds its GPUs while the core
waits `reattach_timeout_s` for the agent's hello (`Restored.hello_within_s`; past it the
core answers `HelloMissed`, carried out by `hello_missed`); adopted, it runs on with the
allocation it reports. A command running without the SDK is adopted as it runs, or, gone,
taken as ended. Any other job is stopped and queued again, to be relaunched from its last
checkpoint, or fails when it has no restarts left.
"""

import logging
import time

from agents.protocol import AgentMessage, Hello
from daemon.actions import Actions
from daemon.eventlog import UNMANAGED_EVENT
from daemon.parts import Parts
from daemon.processes import is_agent, stop_group
from daemon.reaping import finished_marker, last_step_marker
from daemon.restorereasons import Relaunch, RelaunchCause, RestoreEnd, Restoring
from daemon.store import JobRecord
from daemon.wording import relaunch_words
from scheduler.messages import Allocation, JobSubmitted, Reattached, Released, Restored
from scheduler.restore import (
    AgentReport,
    RestoreAction,
    StoredJob,
    adopts,
    after_silence,
    may_relaunch,
    restarts_after_relaunch,
    restore_action,
)
from scheduler.states import JobState

log = logging.getLogger(__name__)


class Restorer:
    def __init__(self, parts: Parts, actions: Actions) -> None:
        self._parts = parts
        self._actions = actions
        self._clean = False  # the last daemon stopped cleanly: its relaunches count none

    def restore(self) -> None:
        """Bring back every job a previous daemon left unfinished. A job that cannot come
        back (its model left the zoo, the new model cannot predict it) is marked failed
        with the reason; the others come back regardless."""
        store = self._parts.store
        clean = self._clean = store.take_clean_stop()
        relaunches: list[tuple[str, Relaunch]] = []
        for record in store.jobs():
            if record.job_state.final:
                self._watch_if_running(record)
                continue
            try:
                why = self._restore_one(record, clean)
            except Exception as error:  # one job's problem must not keep the rest out
                self._cannot(record.id, error)
                continue
            if why is not None:
                relaunches.append((record.id, why))
        # Last: a relaunched job is placed at once, and must not be placed on GPUs that a
        # job restored after it (its agent alive, or its script still saving) holds.
        for job_id, why in relaunches:
            try:
                self.relaunch(job_id, why, count=not clean)
            except Exception as error:
                self._cannot(job_id, error)

    def _cannot(self, job_id: str, error: Exception) -> None:
        log.exception("job %s: cannot be restored", job_id)
        self._end(job_id, JobState.FAILED, Restoring(RestoreEnd.UNRESTORABLE, said=str(error)))

    def _end(self, job_id: str, state: JobState, reason: Restoring) -> None:
        self._actions.set_state(job_id, state, reason)

    def _restore_one(self, record: JobRecord, clean: bool) -> Relaunch | None:
        """Bring one unfinished job back; why it must be relaunched, if it must."""
        parts = self._parts
        parts.jobs.records[record.id] = record
        if record.agent_secret:  # its agent, if it outlived the last daemon, carries it
            parts.keys.secrets[record.id] = record.agent_secret
        parts.tpm.rates.job_spec(parts.jobs.request(record))  # still plannable?
        finished = finished_marker(parts.launcher, record.id)
        facts = self._facts(record, finished)
        action = restore_action(facts, clean_stop=clean)
        if action is RestoreAction.COMPLETE:  # it ended while no daemon listened
            saving = facts.agent_alive  # its script goes on after its final step
            pid = record.pid if saving else None
            parts.store.update_job(record.id, time.time(), iteration=finished, pid=pid)
            if saving and record.pid is not None:
                self._watch_finishing(record.id, record.pid, record.placement)
            self._end(record.id, JobState.COMPLETED, Restoring(RestoreEnd.FINISHED_WHILE_DOWN))
            return None
        if action is RestoreAction.ADOPT_UNMANAGED and record.pid is not None:
            self._adopt_unmanaged(record, record.pid)
            return None
        if action is RestoreAction.ENDED_UNSEEN:
            self._end(record.id, JobState.COMPLETED, Restoring(RestoreEnd.ENDED_UNSEEN))
            return None
        if action is RestoreAction.AWAIT_HELLO:
            hello_s = parts.config.reattach_timeout_s
            parts.feed(Restored(record.id, record.placement, hello_within_s=hello_s))
            parts.store.add_event(record.id, time.time(), "restored", {"was": record.state})
            return None
        cause = RelaunchCause.DAEMON_STOPPED if clean else RelaunchCause.DAEMON_RESTARTED
        return Relaunch(cause, record.state)

    def _facts(self, record: JobRecord, finished: int | None) -> StoredJob:
        parts = self._parts
        return StoredJob(
            state=record.job_state,
            finished=finished is not None,
            agent_alive=self._agent_alive(record.id, record.pid),
            placement_fits=all(index < parts.node.slots for index in record.placement),
            unmanaged=self._unmanaged(record.id),
            command=record.settings.is_command,
            left_last_step=last_step_marker(parts.launcher, record.id) is not None,
        )

    def _unmanaged(self, job_id: str) -> bool:
        """Whether the job ran without the SDK when the last daemon left it, as its newest
        `unmanaged` event says (a slow script's hello clears it)."""
        last = self._parts.store.last_event(job_id, UNMANAGED_EVENT)
        return last is not None and bool(last.get("unmanaged", True))

    def _adopt_unmanaged(self, record: JobRecord, pid: int) -> None:
        """A command running without the SDK outlived the last daemon: it runs on, with the
        workers it was launched with and its GPUs, as if this daemon had started it."""
        parts = self._parts
        parts.launcher.adopt(record.id, pid)
        planned = parts.store.last_allocation(record.id)
        allocation = Allocation(
            int(planned["workers_per_gpu"]) if planned else 1,
            float(planned["decoder_share"]) if planned else 0.0,
        )
        request = parts.jobs.request(record)
        event = Reattached(request, allocation, record.iteration, record.placement, unmanaged=True)
        refusal = parts.feed(event)
        if refusal is not None:  # `restore` marks it failed, saying why
            raise refusal

    def _watch_if_running(self, record: JobRecord) -> None:
        """A completed job whose script still runs after its final step (an evaluation, a
        save, when the last daemon went away) is watched as any: its logs are followed to
        its exit, its GPUs kept from the next job until then, and `finished_exit_s` bounds
        it (the core's watch, from `Restored`). A failed or cancelled one the last daemon
        was stopping is stopped."""
        pid = record.pid
        if pid is None or not self._agent_alive(record.id, pid):
            return
        if record.job_state is JobState.COMPLETED:
            self._watch_finishing(record.id, pid, record.placement)
            return
        log.warning(
            "job %s: %s, but its processes (group %d) outlived the last daemon; stopping them",
            record.id,
            record.state,
            pid,
        )
        stop_group(pid, grace_s=2.0)

    def _watch_finishing(self, job_id: str, pid: int, placement: tuple[int, ...]) -> None:
        """Adopt a completed job's agent that runs on; its GPUs wait for its exit."""
        self._parts.launcher.adopt(job_id, pid)
        self._parts.feed(Restored(job_id, placement, exiting=True))

    def _agent_alive(self, job_id: str, pid: int | None) -> bool:
        """Whether `pid` is this state dir's agent of `job_id` (launcher.is_agent)."""
        jobs_dir = self._parts.launcher.jobs_dir
        return pid is not None and is_agent(pid, job_id, jobs_dir / job_id)

    def awaiting(self, job_id: str) -> bool:
        """Whether the job is restored, held for its agent's hello (the core's read)."""
        return self._parts.scheduler.awaiting_hello(job_id)

    def cancel(self, job_id: str, by: str) -> bool:
        """Cancel a restored job whose agent has not said hello (`by` a tenant); whether
        it was one."""
        parts = self._parts
        if not parts.scheduler.awaiting_hello(job_id):
            return False
        parts.feed(Released(job_id))
        stored = parts.store.job(job_id)
        if stored is not None and stored.pid is not None:
            stop_group(stored.pid, grace_s=2.0)
        self._end(job_id, JobState.CANCELLED, Restoring(RestoreEnd.CANCELLED, by=by))
        return True

    def hello_missed(self, job_id: str) -> None:
        """A restored job whose agent did not say hello in time (the core's `HelloMissed`):
        adopted as running without the SDK, found ended, or relaunched (`after_silence`)."""
        parts = self._parts
        record = parts.store.job(job_id)
        assert record is not None
        facts = self._facts(record, finished_marker(parts.launcher, job_id))
        action = after_silence(facts)
        if action is RestoreAction.ADOPT_UNMANAGED and record.pid is not None:
            parts.feed(Released(job_id))  # held for its hello: adopted instead
            self._adopt_unmanaged(record, record.pid)
            return
        if action is RestoreAction.ENDED_UNSEEN:
            parts.feed(Released(job_id))
            self._end(job_id, JobState.COMPLETED, Restoring(RestoreEnd.ENDED_UNSEEN))
            return
        self.relaunch(job_id, Relaunch(RelaunchCause.NO_HELLO), count=not self._clean)

    def reattach(self, message: AgentMessage) -> None:
        """The first word from a restored running job's agent: adopt it if it runs."""
        parts = self._parts
        job_id = message.job
        record = parts.jobs.records[job_id]
        if not isinstance(message, Hello):
            return  # sent before the reconnect; its hello follows
        report = AgentReport(message.state, message.workers, message.pid)
        if not adopts(report, record.pid):
            came_back = Relaunch(RelaunchCause.CAME_BACK, message.state)
            self.relaunch(job_id, came_back, count=not self._clean)
            return
        parts.launcher.adopt(job_id, message.pid)
        allocation = Allocation(message.workers, message.share)
        request = parts.jobs.request(record)
        parts.feed(Reattached(request, allocation, message.iteration, record.placement))

    def relaunch(self, job_id: str, why: Relaunch, *, count: bool = True) -> None:
        """Stop whatever is left of the job's agent and submit it to the core again, to
        start from its last checkpoint; `count` it against its restarts unless it was
        stopped cleanly."""
        parts = self._parts
        parts.feed(Released(job_id))
        record = parts.store.job(job_id)
        assert record is not None
        if record.pid is not None and self._agent_alive(job_id, record.pid):
            stop_group(record.pid, grace_s=2.0)
        restarts = restarts_after_relaunch(record.job_state, record.restarts, count=count)
        if not may_relaunch(restarts, parts.jobs.request(record).max_restarts):
            parts.store.update_job(job_id, time.time(), pid=None, placement=())
            self._end(job_id, JobState.FAILED, Restoring(RestoreEnd.NO_RESTARTS_LEFT, why))
            return
        parts.store.update_job(
            job_id, time.time(), state="submitted", pid=None, restarts=restarts, placement=()
        )
        said = {"was": record.state, "why": relaunch_words(why)}
        parts.store.add_event(job_id, time.time(), "restored", said)
        parts.jobs.records[job_id] = record
        parts.feed(JobSubmitted(parts.jobs.request(record)))
