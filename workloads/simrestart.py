"""A simulated daemon's restart (`node.restart_at_s`, a kill -9 and a start at once): the new
daemon's fresh core is fed what the daemon's restore feeds it (daemon/restore.py), on the
same decisions (scheduler/restore.py), with the last core's view of each job standing for
the daemon's store, and the simulated node for its process table.

A job whose agent outlived the daemon holds its GPUs (`Restored`) until its agent's hello
comes (at once: the SDK reconnects), then is taken over running (`Reattached`), or, not
running (`adopts`), relaunched; a hung one says none, and once the core's `HelloMissed` comes
(`REATTACH_TIMEOUT_S` on) it is relaunched (`after_silence`).
A job running without the SDK is taken over as it runs (`Reattached(unmanaged=True)`). Any
other unfinished job has its processes stopped, its hold given back (`Released`) and is
submitted again from its checkpoint, one restart counted, or fails with none left. A job
that completed while its script runs on is held until it exits (`Restored(exiting=True)`);
the processes of one cancelled or failed are stopped.
"""

import dataclasses
from collections.abc import Callable

from scheduler.jobs import JobStatus
from scheduler.messages import (
    Allocation,
    Event,
    JobRequest,
    JobSubmitted,
    Reattached,
    Released,
    Restored,
)
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
from workloads.simjob import JobPhase, SimJob
from workloads.simnode import SimNode

# How long a restored job's agent has to say hello: the daemon's default `reattach_timeout_s`.
REATTACH_TIMEOUT_S = 10.0


class SimRestore:
    """One restart's restore: `restore` the jobs the last core knew (`last`), then `hellos`
    from the agents that outlived it. `request` is a job's request as first submitted."""

    def __init__(
        self,
        node: SimNode,
        last: dict[str, JobStatus],
        deliver: Callable[[Event], None],
        request: Callable[[SimJob], JobRequest],
    ) -> None:
        self._node = node
        self._last = last
        self._deliver = deliver
        self._request = request
        self._awaiting: list[str] = []  # restored for their hello, in the order restored

    def restore(self) -> None:
        """Every job the last core knew, in the workload's order; relaunches last, as the
        daemon does (a relaunched job must not be placed on GPUs a restored one holds)."""
        relaunches: list[str] = []
        for job_id, status in self._last.items():
            job = self._node.jobs[job_id]
            if status.state.final:
                self._after_end(job, status)
                continue
            action = restore_action(self._facts(job, status), clean_stop=False)
            if action is RestoreAction.AWAIT_HELLO:
                hello_s = REATTACH_TIMEOUT_S
                self._deliver(Restored(job_id, status.gpu_indices, hello_within_s=hello_s))
                self._awaiting.append(job_id)
            elif action is RestoreAction.ADOPT_UNMANAGED:
                self._adopt(job, status, _planned(status), unmanaged=True)
            elif action is RestoreAction.RELAUNCH:
                relaunches.append(job_id)
            else:  # COMPLETE, ENDED_UNSEEN: no simulated job ends while no core listens
                raise AssertionError(f"job {job_id}: {action} after a simulated restart")
        for job_id in relaunches:
            self._relaunch(self._node.jobs[job_id])

    def hellos(self) -> None:
        """The agents that outlived the daemon say hello to the new one: taken over running,
        or relaunched; a hung agent says none: the core's `HelloMissed` comes for it."""
        for job_id in self._awaiting:
            job, status = self._node.jobs[job_id], self._last[job_id]
            if job.silent:  # hung: no hello within the reattach timeout
                continue
            state = "running" if job.phase is JobPhase.RUNNING else job.phase.value
            if not adopts(AgentReport(state, job.workers_per_gpu, pid=0), recorded_pid=0):
                self._relaunch(job)
                continue
            self._adopt(job, status, Allocation(job.workers_per_gpu, job.decoder_share))

    def hello_missed(self, job_id: str) -> None:
        """A restored job whose agent said no hello in time (the core's `HelloMissed`, as
        daemon/restore.py `hello_missed` carries it out)."""
        job, status = self._node.jobs[job_id], self._last[job_id]
        if after_silence(self._facts(job, status)) is RestoreAction.ADOPT_UNMANAGED:
            self._deliver(Released(job.spec.id))  # held for its hello: adopted instead
            self._adopt(job, status, _planned(status), unmanaged=True)
        else:  # no simulated job ends unseen: the agent of one that did still runs
            self._relaunch(job)

    def _facts(self, job: SimJob, status: JobStatus) -> StoredJob:
        return StoredJob(
            state=status.state,
            finished=False,
            agent_alive=job.has_processes,
            placement_fits=True,
            unmanaged=status.unmanaged,
            command=self._request(job).command,
        )

    def _adopt(
        self, job: SimJob, status: JobStatus, allocation: Allocation, *, unmanaged: bool = False
    ) -> None:
        request = dataclasses.replace(self._request(job), restarts=status.restarts)
        iteration = int(job.done_iterations)
        self._deliver(Reattached(request, allocation, iteration, status.gpu_indices, unmanaged))

    def _relaunch(self, job: SimJob) -> None:
        """Stop what is left of the job's processes and submit it again, to start from its
        checkpoint (the launch's), counting one restart (daemon/restore.py `relaunch`)."""
        node, status = self._node, self._last[job.spec.id]
        self._deliver(Released(job.spec.id))
        if job.phase is not JobPhase.DONE:
            node.stop(job, JobPhase.SUBMITTED)
        node.release(job)
        job.in_setup = job.stalled = job.silent = False
        request = self._request(job)
        restarts = restarts_after_relaunch(status.state, status.restarts, count=True)
        if not may_relaunch(restarts, request.max_restarts):
            job.end_s = node.now
            node.stop(job, JobPhase.DONE)
            return
        self._deliver(JobSubmitted(dataclasses.replace(request, restarts=restarts)))

    def _after_end(self, job: SimJob, status: JobStatus) -> None:
        """A job that ended before the restart, its processes running on: a completed one's
        GPUs are held until they exit; those of one cancelled or failed are stopped."""
        if job.spec.id not in self._node.lingering:
            return
        if status.state is JobState.COMPLETED:
            self._deliver(Restored(job.spec.id, status.gpu_indices, exiting=True))
            return
        self._node.lingering.discard(job.spec.id)
        self._node.release(job)


def _planned(status: JobStatus) -> Allocation:
    """What the last plan gave a job taken over running without the SDK (one worker per GPU
    where none did, as the daemon's restore says)."""
    return status.allocation or Allocation(1)
