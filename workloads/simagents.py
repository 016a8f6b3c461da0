"""What the simulated jobs' agents and processes say to the core, as the daemon feeds it.

A job's hello, heartbeats, pauses, resumes and end, and the incidents a workload gives it
(WorkloadJob.crash_at and the rest): a crash (its process's exit, `ProcessExited`, its
marker saying its last step), a link gone silent (nothing at all: the core loses it), a
stall (`Alive` without a step), a long setup (`Alive` in phase "setup"), a script that runs
on after its final step (`Finished(exited=False)`, then its `ProcessExited` and `Exited`,
or the core's `StopProcesses` first once `finished_exit_s` is over), a user's cancel
(`JobCancelled`, then `ProcessExited` and `Exited` once it has checkpointed), and a cold
resize (its relaunched agent's hello before its `Resumed`), and a launch the node is short
for (`LaunchFailed`, WorkloadJob.launch_short). Every handler takes the job the
queue named; the core's answers come back through `deliver`.
"""

import errno
import os
from collections.abc import Callable
from signal import SIGTERM

import numpy as np

from scheduler.exits import ExitFacts
from scheduler.messages import (
    AgentHello,
    Alive,
    Event,
    Exited,
    Finished,
    Heartbeat,
    JobCancelled,
    JobRequest,
    JobSubmitted,
    LaunchFailed,
    LaunchFailure,
    Paused,
    ProcessExited,
    Resumed,
)
from workloads.simjob import CRASH, SILENT, STALL, JobPhase, SimJob, loader_processes
from workloads.simnode import SimNode

CANCELLED_BY = "simulation"  # who a workload's cancel says asked (JobCancelled.by)
# The daemon's account of a launch the node was short for (`str` of the OSError it caught).
NODE_SHORT = str(OSError(errno.EMFILE, os.strerror(errno.EMFILE)))


class SimAgents:
    """The agents of every job of a run, on `node`, speaking through `deliver`."""

    def __init__(
        self,
        node: SimNode,
        deliver: Callable[[Event], None],
        request: Callable[[SimJob], JobRequest],
        exiting: Callable[[], frozenset[str]],
        *,
        loader_timing: bool,
    ) -> None:
        self._node = node
        self._deliver = deliver
        self._request = request
        self._exiting = exiting  # the jobs whose GPUs the core keeps until they have Exited
        self._loader_timing = loader_timing

    def handler(self, kind: str) -> Callable[[SimJob], None]:
        """What the queue's event `kind` does to its job."""
        handlers: dict[str, Callable[[SimJob], None]] = {
            "arrive": self.arrive,
            "hello": self.hello,
            "launch_failed": self.launch_failed,
            "setup_done": self.setup_done,
            "paused": self.paused,
            "resumed": self.resumed,
            "unstall": self.unstall,
            "cancel": self.cancel,
            "exit": self.exit,
        }
        return handlers[kind]

    def milestone(self, kind: str, job: SimJob) -> None:
        """The running job reached the step of its end or of one of its incidents."""
        _, at = job.next_milestone()
        job.done_iterations = max(job.done_iterations, float(at))  # not a rounding short
        if kind == CRASH:
            self.crash(job)
        elif kind == SILENT:
            job.happened.add(SILENT)
            job.silent = True  # hung: no step, no word, until the core gives up on it
            self._node.rerate()
        elif kind == STALL:
            job.happened.add(STALL)
            job.stalled = True
            self._node.rerate()
            self._node.schedule(self._node.now + job.spec.stall_s, "unstall", job.spec.id)
        else:
            self.finish(job)

    # ---- a job's life ---------------------------------------------------------------------

    def arrive(self, job: SimJob) -> None:
        self._deliver(JobSubmitted(self._request(job)))

    def hello(self, job: SimJob) -> None:
        if job.phase is not JobPhase.STARTING:
            return
        node = self._node
        if job.start_s is None:
            job.start_s = node.now
        job.in_setup = job.spec.setup_s > 0.0
        if job.in_setup:
            job.setup_until = node.now + job.spec.setup_s
            node.schedule(job.setup_until, "setup_done", job.spec.id)
        node.set_running(job)
        self._deliver(AgentHello(job.spec.id, job.gen, iteration=int(job.done_iterations)))

    def launch_failed(self, job: SimJob) -> None:
        """The node was short for the job's launch (WorkloadJob.launch_short): nothing of it
        runs; the core tries it again, as the daemon's does for an EMFILE."""
        if job.phase is not JobPhase.STARTING or job.launch is None:
            return  # ended meanwhile
        short = LaunchFailed(job.spec.id, job.launch, LaunchFailure.SHORT, NODE_SHORT)
        self._deliver(short)

    def setup_done(self, job: SimJob) -> None:
        # (one of an earlier launch's setups ends earlier than this one's)
        if job.in_setup and job.phase is JobPhase.RUNNING and self._node.now >= job.setup_until:
            job.in_setup = False
            self._node.rerate()

    def paused(self, job: SimJob) -> None:
        if job.phase is not JobPhase.PAUSING:
            return
        job.phase = JobPhase.PAUSED
        job.checkpoint = int(job.done_iterations)
        cold_at = None if job.hot_resize else self._node.now  # its process leaves now
        self._deliver(Paused(job.spec.id, job.gen, job.checkpoint, "sim://checkpoint", cold_at))

    def resumed(self, job: SimJob) -> None:
        if job.phase is not JobPhase.RESUMING:
            return
        node = self._node
        gap = node.now - job.pause_started
        job.paused_s += gap
        node.set_running(job)
        if not job.hot_resize:  # its process left after `paused`: a new one says hello first
            self._deliver(AgentHello(job.spec.id, job.gen, iteration=int(job.done_iterations)))
        self._deliver(Resumed(job.spec.id, job.gen, job.workers_per_gpu, gap))

    def unstall(self, job: SimJob) -> None:
        if job.stalled and job.phase is JobPhase.RUNNING:
            job.stalled = False
            self._node.rerate()

    def finish(self, job: SimJob) -> None:
        node = self._node
        job.done_iterations = float(job.spec.iterations)
        job.end_s = node.now
        node.stop(job, JobPhase.DONE)
        runs_on = job.spec.exit_after_s > 0.0
        if runs_on:  # its script evaluates or saves on the GPUs it holds
            node.lingering.add(job.spec.id)
            node.schedule(node.now + job.spec.exit_after_s, "exit", job.spec.id)
        else:
            node.release(job)
        job.finished_at_step = job.spec.iterations  # its SDK's finished marker
        self._deliver(Finished(job.spec.id, exited=not runs_on))

    def crash(self, job: SimJob) -> None:
        """Its script raised: its process exits non-zero, its SDK's marker saying the steps
        it completed (the core fails it; its restart policy is the core's)."""
        job.happened.add(CRASH)
        completed = int(job.done_iterations)
        self._node.stop(job, JobPhase.SUBMITTED)
        said = f"simulated crash after step {completed}"
        facts = ExitFacts(code=1, last_step=completed)
        self._deliver(ProcessExited(job.spec.id, facts, said))

    def cancel(self, job: SimJob) -> None:
        """A user's cancel: the core hears it while the job's processes still run, if they
        do (they checkpoint and exit: `simcommands`)."""
        if job.phase is not JobPhase.DONE:
            self._deliver(JobCancelled(job.spec.id, CANCELLED_BY, exited=not job.has_processes))

    def exit(self, job: SimJob) -> None:
        """The processes of a job that ended exit (by themselves, or stopped: the core's
        `StopProcesses`), and are gone."""
        node = self._node
        if job.spec.id not in node.lingering:
            return  # gone already (stopped, or a restart stopped them)
        node.lingering.discard(job.spec.id)
        node.release(job)
        code = -SIGTERM if job.stopped else 0
        completed = None if job.finished_at_step is not None else int(job.done_iterations)
        facts = ExitFacts(code=code, finished=job.finished_at_step, last_step=completed)
        self._deliver(ProcessExited(job.spec.id, facts))
        if job.spec.id in self._exiting():
            self._deliver(Exited(job.spec.id))

    # ---- what running agents say every heartbeat period -----------------------------------

    def heartbeats(self) -> None:
        node = self._node
        running = node.running_jobs()
        efficiency = node.truth.efficiency(loader_processes(running))
        for job in running:
            if job.phase is not JobPhase.RUNNING or job.silent:
                continue  # stopped by a command for an earlier heartbeat of this sweep, or hung
            if job.idle:  # its link speaks for it: alive, in its phase
                phase = "setup" if job.in_setup else "training"
                self._deliver(Alive(job.spec.id, phase, int(job.done_iterations)))
                continue
            self._deliver(self._heartbeat(job, efficiency))

    def _heartbeat(self, job: SimJob, efficiency: float) -> Heartbeat:
        truth = self._node.truth
        noise = float(np.exp(job.draws.stream("rate").gauss(0.0, truth.rate_noise)))
        gpu_rate = 1.0 / job.step_time_s
        return Heartbeat(
            job.spec.id,
            job.gen,
            int(job.done_iterations),
            samples_per_s=job.rate * job.spec.batch_size * noise,
            idle_fraction=max(0.0, 1.0 - job.rate / gpu_rate),
            workers_per_gpu=job.workers_per_gpu,
            loader_cost_s=self._timed_loader(job, efficiency),
        )

    def _timed_loader(self, job: SimJob, efficiency: float) -> float:
        """What the SDK's clock reads of a worker's seconds per sample (agents/loader.py):
        the truth's cost at the node's contention, with the rates' noise; 0 for a job that
        decodes on the device, or when timing is off. A measured curve has no cost of its
        own: its knee's (the fit `oracle` plans with) stands for it."""
        if not self._loader_timing or job.decoder_share > 0.0:
            return 0.0
        truth = self._node.truth
        cost = job.knee.sample_cost_s if job.knee is not None else truth.cost(job.spec.pipeline)
        noise = float(np.exp(job.draws.stream("loader timing").gauss(0.0, truth.rate_noise)))
        return cost / efficiency * noise
