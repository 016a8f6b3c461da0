"""Bringing back the jobs an earlier daemon left unfinished. What to do with each is the
core's decision (`scheduler/restore.py`); this module reads the facts it needs from the
state dir and the process table, and carries the decision out.

A running job whose agent may have outlived the old daemon holds its GPUs while the daemon
waits `reattach_timeout_s` for the agent's hello; adopted, it runs on with the allocation
it reports. A command running without the SDK is adopted as it runs, or, gone, taken as
ended. Any other job is stopped and queued again, to be relaunched from its last
checkpoint, or fails when it has no restarts left.
"""

import logging
import time
from typing import TYPE_CHECKING

from agents.protocol import AgentMessage, Hello
from daemon.actions import ENDED_UNSEEN, UNMANAGED_EVENT
from daemon.processes import is_agent, stop_group
from daemon.store import JobRecord
from scheduler.messages import Allocation, JobSubmitted
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

if TYPE_CHECKING:
    from daemon.service import Service

log = logging.getLogger(__name__)


class Restorer:
    def __init__(self, service: "Service") -> None:
        self._service = service
        self._awaiting: dict[str, float] = {}  # restored running job -> hello deadline
        self._clean = False  # the last daemon stopped cleanly: its relaunches count none

    def restore(self) -> None:
        """Bring back every job a previous daemon left unfinished. A job that cannot come
        back (its model left the zoo, the new model cannot predict it) is marked failed
        with the reason; the others come back regardless."""
        store = self._service.store
        clean = self._clean = store.take_clean_stop()
        relaunches: list[tuple[str, str]] = []
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
        self._service.actions.set_state(job_id, JobState.FAILED, f"cannot be restored: {error}")

    def _restore_one(self, record: JobRecord, clean: bool) -> str | None:
        """Bring one unfinished job back; why it must be relaunched, if it must."""
        service = self._service
        service.records[record.id] = record
        if record.agent_secret:  # its agent, if it outlived the last daemon, carries it
            service.agent_secrets[record.id] = record.agent_secret
        service.tpm.rates.job_spec(service.request(record))  # still plannable?
        finished = service.actions.finished_marker(record.id)
        facts = self._facts(record, finished)
        action = restore_action(facts, clean_stop=clean)
        if action is RestoreAction.COMPLETE:  # it ended while no daemon listened
            saving = facts.agent_alive  # its script goes on after its final step
            pid = record.pid if saving else None
            service.store.update_job(record.id, time.time(), iteration=finished, pid=pid)
            if saving and record.pid is not None:
                self._watch_finishing(record.id, record.pid, record.placement)
            service.actions.set_state(
                record.id, JobState.COMPLETED, "finished while the daemon was down"
            )
            return None
        if action is RestoreAction.ADOPT_UNMANAGED and record.pid is not None:
            self._adopt_unmanaged(record, record.pid)
            return None
        if action is RestoreAction.ENDED_UNSEEN:
            service.actions.set_state(record.id, JobState.COMPLETED, ENDED_UNSEEN)
            return None
        if record.checkpoint:
            service.actions.resume_from(record.id, record.checkpoint)
        if action is RestoreAction.AWAIT_HELLO:
            service.scheduler.hold(record.id, record.placement)
            self._awaiting[record.id] = service.now() + service.config.reattach_timeout_s
            service.store.add_event(record.id, time.time(), "restored", {"was": record.state})
            return None
        why = "the daemon was stopped" if clean else "the daemon restarted"
        return f"{why} while it was {record.state}"

    def _facts(self, record: JobRecord, finished: int | None) -> StoredJob:
        service = self._service
        return StoredJob(
            state=record.job_state,
            finished=finished is not None,
            agent_alive=self._agent_alive(record.id, record.pid),
            placement_fits=all(index < service.slots for index in record.placement),
            unmanaged=self._unmanaged(record.id),
            command=record.settings.is_command,
            left_last_step=service.actions.last_step_marker(record.id) is not None,
        )

    def _unmanaged(self, job_id: str) -> bool:
        """Whether the job ran without the SDK when the last daemon left it, as its newest
        `unmanaged` event says (a slow script's hello clears it)."""
        last = self._service.store.last_event(job_id, UNMANAGED_EVENT)
        return last is not None and bool(last.get("unmanaged", True))

    def _adopt_unmanaged(self, record: JobRecord, pid: int) -> None:
        """A command running without the SDK outlived the last daemon: it runs on, with the
        workers it was launched with and its GPUs, as if this daemon had started it."""
        service = self._service
        service.launcher.adopt(record.id, pid)
        planned = service.store.last_allocation(record.id)
        allocation = Allocation(
            int(planned["workers_per_gpu"]) if planned else 1,
            float(planned["decoder_share"]) if planned else 0.0,
        )
        commands = service.scheduler.adopt(
            service.request(record),
            allocation,
            record.iteration,
            service.now(),
            record.placement,
            unmanaged=True,
        )
        service.actions.carry_out_all(commands)

    def _watch_if_running(self, record: JobRecord) -> None:
        """A completed job whose script still runs after its final step (an evaluation, a
        save, when the last daemon went away) is watched as any: its logs are followed to
        its exit, its GPUs kept from the next job until then, and `finished_exit_s` bounds
        it. A failed or cancelled one the last daemon was stopping is stopped."""
        pid = record.pid
        if pid is None or not self._agent_alive(record.id, pid):
            return
        if record.job_state is JobState.COMPLETED:
            self._watch_finishing(record.id, pid, record.placement)
            self._service.actions.watch_finished(record.id)
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
        self._service.launcher.adopt(job_id, pid)
        self._service.scheduler.hold(job_id, placement, exiting=True)

    def _agent_alive(self, job_id: str, pid: int | None) -> bool:
        """Whether `pid` is this state dir's agent of `job_id` (launcher.is_agent)."""
        jobs_dir = self._service.launcher.jobs_dir
        return pid is not None and is_agent(pid, job_id, jobs_dir / job_id)

    def awaiting(self, job_id: str) -> bool:
        return job_id in self._awaiting

    def cancel(self, job_id: str, by: str) -> bool:
        """Cancel a restored job whose agent has not said hello (`by` a tenant); whether
        it was one."""
        if job_id not in self._awaiting:
            return False
        del self._awaiting[job_id]
        service = self._service
        service.scheduler.release(job_id)
        stored = service.store.job(job_id)
        if stored is not None and stored.pid is not None:
            stop_group(stored.pid, grace_s=2.0)
        service.actions.set_state(job_id, JobState.CANCELLED, f"cancelled by {by} while restoring")
        return True

    def expire(self) -> None:
        """Restored jobs whose agent did not say hello in time: adopted as running without
        the SDK, or relaunched (`after_silence`)."""
        service = self._service
        for job_id, deadline in list(self._awaiting.items()):
            if service.now() < deadline:
                continue
            record = service.store.job(job_id)
            assert record is not None
            facts = self._facts(record, service.actions.finished_marker(job_id))
            action = after_silence(facts)
            if action is RestoreAction.ADOPT_UNMANAGED and record.pid is not None:
                del self._awaiting[job_id]
                service.scheduler.release(job_id)  # held for its hello: adopted instead
                self._adopt_unmanaged(record, record.pid)
                continue
            if action is RestoreAction.ENDED_UNSEEN:
                del self._awaiting[job_id]
                service.scheduler.release(job_id)
                service.actions.set_state(job_id, JobState.COMPLETED, ENDED_UNSEEN)
                continue
            why = "its agent did not say hello to the restarted daemon"
            self.relaunch(job_id, why, count=not self._clean)

    def reattach(self, message: AgentMessage) -> None:
        """The first word from a restored running job's agent: adopt it if it runs."""
        service = self._service
        job_id = message.job
        record = service.records[job_id]
        if not isinstance(message, Hello):
            return  # sent before the reconnect; its hello follows
        del self._awaiting[job_id]
        report = AgentReport(message.state, message.workers, message.pid)
        if not adopts(report, record.pid):
            self.relaunch(job_id, f"its agent came back {message.state}", count=not self._clean)
            return
        service.launcher.adopt(job_id, message.pid)
        allocation = Allocation(message.workers, message.share)
        commands = service.scheduler.adopt(
            service.request(record), allocation, message.iteration, service.now(), record.placement
        )
        service.actions.carry_out_all(commands)

    def relaunch(self, job_id: str, why: str, *, count: bool = True) -> None:
        """Stop whatever is left of the job's agent and submit it to the core again, to
        start from its last checkpoint; `count` it against its restarts unless it was
        stopped cleanly."""
        service = self._service
        self._awaiting.pop(job_id, None)
        service.scheduler.release(job_id)
        record = service.store.job(job_id)
        assert record is not None
        if record.pid is not None and self._agent_alive(job_id, record.pid):
            stop_group(record.pid, grace_s=2.0)
        restarts = restarts_after_relaunch(record.job_state, record.restarts, count=count)
        if not may_relaunch(restarts, service.request(record).max_restarts):
            service.store.update_job(job_id, time.time(), pid=None, placement=())
            service.actions.set_state(job_id, JobState.FAILED, f"{why}; no restarts left")
            return
        service.store.update_job(
            job_id, time.time(), state="submitted", pid=None, restarts=restarts, placement=()
        )
        service.store.add_event(job_id, time.time(), "restored", {"was": record.state, "why": why})
        service.records[job_id] = record
        service.feed(JobSubmitted(service.request(record)))
