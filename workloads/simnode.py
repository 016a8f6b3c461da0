"""The simulated node's state and its virtual clock: the jobs, the queue of what happens next
(agents' answers, jobs' milestones), and the true rates of the jobs running now.

Between events every running job trains at the constant rate the node's truth gives for the
current set of running jobs, so the step at which something happens to a job (its end, an
incident) is computed, not stepped to: `rerate` schedules it, and a job's `version` bump
cancels it. `SimNode` decides nothing for the core; `simagents` and `simcommands` move its
jobs, the core's commands in hand.
"""

import heapq
from collections.abc import Mapping

from workloads.simjob import JobPhase, SimJob, loader_processes
from workloads.truth import NodeTruth, RunningJob, iteration_rates


class SimNode:
    """The jobs of one run on the node, and the clock their events wait on."""

    def __init__(self, truth: NodeTruth, gpus: int, jobs: Mapping[str, SimJob]) -> None:
        self.truth = truth
        self.jobs = dict(jobs)
        # Kept by hand, so that no step of the loop walks every job of a long trace.
        self.order = {job_id: index for index, job_id in enumerate(self.jobs)}
        self.running: dict[str, SimJob] = {}
        self.unfinished = len(self.jobs)
        self.events: list[tuple[float, int, str, str, int]] = []
        self._sequence = 0
        self.now = 0.0
        self.gpu_jobs = [0] * gpus  # the jobs placed on each GPU whose processes may run
        # Jobs that ended while their processes run on (a script's work after its final
        # step, a cancelled job checkpointing): the core hears `Exited` when they are gone.
        self.lingering: set[str] = set()
        self.paused_gens: set[int] = set()
        self.gated = 0
        self.plans = 0
        self.pauses = 0
        self.share_changes = 0

    # ---- the clock ------------------------------------------------------------------------

    def schedule(self, when: float, kind: str, job_id: str, version: int = 0) -> None:
        self._sequence += 1
        heapq.heappush(self.events, (when, self._sequence, kind, job_id, version))

    def after(self, mean_s: float, kind: str, job_id: str) -> None:
        """The agent's answer, after a true cost drawn around `mean_s`."""
        drawn = self.truth.draw(mean_s, self.jobs[job_id].draws.stream(kind))
        self.schedule(self.now + drawn, kind, job_id)

    def advance(self, now: float) -> None:
        elapsed = now - self.now
        if elapsed > 0:
            for job in self.running.values():
                job.done_iterations += job.rate * elapsed
                job.busy_gpu_s += job.rate * elapsed * job.step_time_s * job.spec.gpus
        self.now = now

    # ---- jobs -----------------------------------------------------------------------------

    def running_jobs(self) -> list[SimJob]:
        """The running jobs in workload order, so a sweep meets them in one order whatever
        the timing."""
        return sorted(self.running.values(), key=lambda job: self.order[job.spec.id])

    def set_running(self, job: SimJob) -> None:
        job.phase = JobPhase.RUNNING
        self.running[job.spec.id] = job
        job.workers.append([self.now, job.workers_per_gpu])
        self.rerate()

    def stop(self, job: SimJob, phase: JobPhase) -> None:
        was_running = job.phase is JobPhase.RUNNING
        if phase is JobPhase.DONE and job.phase is not JobPhase.DONE:
            self.unfinished -= 1
        self.running.pop(job.spec.id, None)
        job.phase = phase
        job.version += 1
        job.workers.append([self.now, 0])
        if was_running:
            self.rerate()

    def place(self, job: SimJob, gpu_indices: tuple[int, ...]) -> None:
        if job.placed:  # placed again (a relaunch): off its old GPUs first
            self.release(job)
        job.gpu_indices, job.placed = gpu_indices, True
        for gpu in gpu_indices:
            self.gpu_jobs[gpu] += 1

    def release(self, job: SimJob) -> None:
        """The job's processes are gone: its GPUs count one job fewer."""
        if job.placed:
            job.placed = False
            for gpu in job.gpu_indices:
                self.gpu_jobs[gpu] -= 1

    # ---- rates ----------------------------------------------------------------------------

    def rerate(self) -> None:
        """New true rates for all running jobs, and the steps they reach next."""
        running = self.running_jobs()
        rates = iteration_rates(
            self.truth,
            [
                RunningJob(
                    job_id=job.spec.id,
                    gpu_indices=job.gpu_indices,
                    step_time_s=job.step_time_s,
                    batch_size_per_gpu=job.batch_size_per_gpu,
                    workers_per_gpu=job.workers_per_gpu,
                    sample_cost_s=self.sample_cost_s(job),
                    decoder_share=job.decoder_share,
                    curve=job.curve,
                )
                for job in running
            ],
            loader_processes(running),
        )
        for job in running:
            job.version += 1
            job.rate = 0.0 if job.idle else rates[job.spec.id]
            if job.rate > 0.0:
                kind, at = job.next_milestone()
                left = max(0.0, at - job.done_iterations)
                self.schedule(self.now + left / job.rate, kind, job.spec.id, job.version)

    def sample_cost_s(self, job: SimJob) -> float:
        """A loader worker's true seconds per sample for the job, alone."""
        if job.decoder_share > 0.0:
            return self.truth.device_cost(job.spec.pipeline)
        if job.knee is not None:  # fitted once, at the job's start
            return job.knee.sample_cost_s
        return self.truth.cost(job.spec.pipeline)

    def refill_s(self, job: SimJob) -> float:
        """A job resized in place waits for its first batch: one of its new workers makes
        all of it (truth.py), beside the workers of the jobs running and of those resuming
        with it, its own new ones included. A restart's resume has it already."""
        if not job.hot_resize:
            return 0.0
        starting = [other for other in self.jobs.values() if other.phase is JobPhase.RESUMING]
        efficiency = self.truth.efficiency(loader_processes([*self.running_jobs(), *starting]))
        batch = job.batch_size_per_gpu
        if job.decoder_share > 0.0:  # the decoder decodes it at its share, the worker augments
            pipeline = job.spec.pipeline
            decoded = batch / (job.decoder_share * self.truth.decoder_capacity(pipeline))
            return max(decoded, batch * self.truth.device_cost(pipeline) / efficiency)
        return batch * self.worker_cost_s(job) / efficiency

    def worker_cost_s(self, job: SimJob) -> float:
        """One loader worker's seconds per sample alone: its curve's rate at one worker per
        GPU, or the truth's c."""
        if job.curve is not None:
            return 1.0 / job.curve.rate(1.0)
        return self.truth.cost(job.spec.pipeline)
