"""A GPU node on a virtual clock, driving the daemon's own scheduler core.

Discrete events: arrivals, agents' hello / heartbeat / paused / resumed / finished, and the
core's deadlines (window closes, pause timeouts). Between events every running job trains
at the constant rate the node's truth gives for the current set of running jobs, so a job's
end is computed, not stepped to. The core plans with a TPM fitted from simulated profiling
(`workloads.profiling`), or in `oracle` mode with the truth itself (`oracle`: `optimal` on
the truth; `oracle:<policy>`: that policy on the truth).

Admission is the core's too (`scheduler/admission.py`, the daemon's rule): a job takes its
`gpu_indices`, or else the least loaded GPUs, once they hold fewer than
`node.max_jobs_per_gpu` jobs, and waits first come, first served while they do not.
"""

import heapq
import logging
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum

import numpy as np

from allocator import ContentionCurve, NodeSpec, ThroughputModel
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.messages import (
    DEFAULT_PIPELINE,
    AgentHello,
    Allocation,
    Cancel,
    Command,
    Event,
    Exited,
    Finished,
    Gated,
    Heartbeat,
    JobRequest,
    JobSubmitted,
    Launch,
    Pause,
    Paused,
    Placed,
    Planned,
    Resume,
    Resumed,
    SetShare,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.scheduler import Scheduler
from workloads import ORACLE, ORACLE_OF
from workloads.bounds import run_bounds
from workloads.errors import SimulationError, WorkloadError
from workloads.profiling import profile_node
from workloads.results import JobResult, SimulationResult
from workloads.spec import Knee, Workload, WorkloadJob
from workloads.truth import MeasuredCurve, NodeTruth, RunningJob, iteration_rates

log = logging.getLogger(__name__)


class _Phase(Enum):
    WAITING = "waiting"  # arrived, no GPUs yet
    SUBMITTED = "submitted"  # handed to the core, not launched
    STARTING = "starting"
    RUNNING = "running"
    PAUSING = "pausing"  # stopped at an iteration boundary, writing its checkpoint
    PAUSED = "paused"
    RESUMING = "resuming"
    DONE = "done"


class _Draws:
    """One job's random draws: a stream per kind (its launch, pause and resume costs, its
    heartbeats' noise, its loader timing), each seeded by (run seed, job, kind). A job's
    n-th pause then costs the same under every policy of a seed (common random numbers):
    two policies' runs differ by what they decided, not by which draws of one shared stream
    their events happened to meet."""

    def __init__(self, seed: int, job_id: str) -> None:
        self._key = f"{seed} {job_id}"
        self._streams: dict[str, random.Random] = {}

    def stream(self, kind: str) -> random.Random:
        rng = self._streams.get(kind)
        if rng is None:
            rng = self._streams[kind] = random.Random(f"{kind} {self._key}")
        return rng


@dataclass
class _Job:
    spec: WorkloadJob
    flops: float
    model_params: float
    step_time_s: float  # true, unshared, noise included
    draws: _Draws
    curve: MeasuredCurve | None = None  # the job's own measured curve, when it brings one
    knee: Knee | None = None  # that curve as the planner's knee (what `oracle` plans with)
    gpu_indices: tuple[int, ...] = ()
    phase: _Phase = _Phase.WAITING
    workers_per_gpu: int = 0
    decoder_share: float = 0.0  # > 0: the decoder decodes for it (device mode)
    gen: int = 0
    done_iterations: float = 0.0
    rate: float = 0.0  # iterations per second now
    version: int = 0  # bumps invalidate the job's scheduled finish
    pause_started: float = 0.0
    start_s: float | None = None
    end_s: float | None = None
    busy_gpu_s: float = 0.0  # GPU-seconds of computing, from the truth's step time
    paused_s: float = 0.0
    workers: list[list[float]] = field(default_factory=list)

    @property
    def batch_size_per_gpu(self) -> float:
        return self.spec.batch_size / self.spec.gpus


@dataclass(frozen=True)
class SimulationOptions:
    policy: str
    seed: int = 0
    heartbeat_s: float = 5.0  # agents' heartbeat period (the daemon's is 1 s; coarser is cheaper)
    loader_timing: bool = True  # agents time their loader workers, as the SDK does
    # The contention eta(D) the core starts from, as points (D, eta); None: fitted from the
    # simulated profiles (the truth's for `oracle`). `()`: a node said to have none.
    contention_prior: tuple[tuple[float, float], ...] | None = None


class Simulation:
    """One run of one workload under one policy. `run()` returns the result."""

    def __init__(self, workload: Workload, options: SimulationOptions) -> None:
        self._workload = workload
        self._options = options
        self._truth: NodeTruth = workload.node_truth()
        self._oracle = options.policy == ORACLE or options.policy.startswith(ORACLE_OF)
        planner = options.policy.removeprefix(ORACLE_OF)
        config = workload.scheduler_config("optimal" if planner == ORACLE else planner)
        # Three missed heartbeats make a job lost, whatever the period.
        timeout = max(config.heartbeat_timeout_s, 3 * options.heartbeat_s)
        self._config = replace(config, heartbeat_timeout_s=timeout)
        # Each job's speed off the formula, drawn in workload order; every later draw comes
        # from the job's own streams (_Draws).
        self._rng = random.Random(options.seed)
        self._profile_report: dict[str, object] | None = None
        self._model: ThroughputModel | None = None
        node = workload.node
        self._scheduler = Scheduler(
            self._node_spec(),
            self._rate_model(),
            self._config,
            GpuPool(node.gpus, node.max_jobs_per_gpu),
        )
        self._jobs = {job.id: self._new_job(job) for job in workload.jobs}
        # Kept by hand, so that no step of the loop walks every job of a long trace.
        self._order = {job_id: index for index, job_id in enumerate(self._jobs)}
        self._running: dict[str, _Job] = {}
        self._unfinished = len(self._jobs)
        self._events: list[tuple[float, int, str, str, int]] = []
        self._sequence = 0
        self._now = 0.0
        self._gpu_jobs = [0] * workload.node.gpus
        self._paused_gens: set[int] = set()
        self._gated = 0
        self._plans = 0
        self._pauses = 0
        self._share_changes = 0

    # ---- set-up ---------------------------------------------------------------------------

    def _node_spec(self) -> NodeSpec:
        node = self._workload.node
        if self._options.contention_prior is not None:
            points = self._options.contention_prior
        elif self._oracle:
            points = self._truth.contention_points(2 * node.cpu_workers)
        else:
            points = self._fitted().contention_points()
        truth = self._truth
        decoder = truth.decoder_capacity(DEFAULT_PIPELINE) if truth.decoder_cores > 0 else 0.0
        return NodeSpec(
            cpu_workers=node.cpu_workers,
            contention=ContentionCurve(points),
            decoder_capacity=decoder,
        )

    def _fitted(self) -> ThroughputModel:
        """The TPM fitted from profiling the simulated node (once per run)."""
        if self._model is None:
            node = self._workload.node
            profile = profile_node(self._truth, node.gpus, node.cpu_workers, self._options.seed)
            self._profile_report = profile.report
            self._model = profile.model
        return self._model

    def _rate_model(self) -> RateModel:
        return RateModel(None if self._oracle else self._fitted())

    def _new_job(self, spec: WorkloadJob) -> _Job:
        flops, params = spec.features
        draws = _Draws(self._options.seed, spec.id)
        if spec.curve is not None:  # measured: no formula, no noise
            curve, knee = spec.curve.measured(), spec.curve.knee()
            step = spec.step_time_s(self._truth)
            return _Job(spec, flops, params, step, draws, curve=curve, knee=knee)
        # This job's own speed against the formula, for reasons no feature explains.
        deviation = float(np.exp(self._rng.gauss(0.0, self._truth.step_noise)))
        step_time_s = deviation * spec.step_time_s(self._truth)
        return _Job(spec, flops, params, step_time_s, draws)

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        for job in self._jobs.values():
            self._schedule(job.spec.arrival_s, "arrive", job.spec.id)
        self._schedule(self._options.heartbeat_s, "heartbeat", "")
        stalled_at = -1.0  # a deadline already served once at this instant
        while self._events:
            deadline = self._scheduler.next_deadline()
            if deadline is not None and deadline < self._events[0][0]:
                if deadline <= stalled_at:
                    raise SimulationError(f"the scheduler's deadline {deadline} s does not move")
                stalled_at = deadline if deadline <= self._now else -1.0
                self._advance(max(deadline, self._now))
                self._deliver(Tick())
                continue
            stalled_at = -1.0
            when, _, kind, job_id, version = heapq.heappop(self._events)
            self._advance(when)
            self._on(kind, job_id, version)
            if not self._unfinished:
                break
        return self._result()

    def _schedule(self, when: float, kind: str, job_id: str, version: int = 0) -> None:
        self._sequence += 1
        heapq.heappush(self._events, (when, self._sequence, kind, job_id, version))

    def _advance(self, now: float) -> None:
        elapsed = now - self._now
        if elapsed > 0:
            for job in self._running.values():
                job.done_iterations += job.rate * elapsed
                job.busy_gpu_s += job.rate * elapsed * job.step_time_s * job.spec.gpus
        self._now = now

    def _on(self, kind: str, job_id: str, version: int) -> None:
        handlers: dict[str, Callable[[_Job], None]] = {
            "arrive": self._arrive,
            "hello": self._hello,
            "paused": self._paused,
            "resumed": self._resumed,
        }
        if kind == "heartbeat":
            self._heartbeats()
            return
        job = self._jobs[job_id]
        if kind == "finish":
            if version == job.version and job.phase is _Phase.RUNNING:
                self._finish(job)
            return
        handlers[kind](job)

    # ---- agents ---------------------------------------------------------------------------

    def _arrive(self, job: _Job) -> None:
        self._deliver(JobSubmitted(self._request(job)))

    def _request(self, job: _Job) -> JobRequest:
        step_time_s = sample_cost_s = device_sample_cost_s = knee_sharpness = None
        if self._oracle and job.knee is not None:
            step_time_s = job.batch_size_per_gpu / job.knee.peak_samples_per_s
            step_time_s *= self._sharing_factor(job)
            sample_cost_s, knee_sharpness = job.knee.sample_cost_s, job.knee.sharpness
        elif self._oracle:
            step_time_s = job.step_time_s * self._sharing_factor(job)
            sample_cost_s = self._truth.cost(job.spec.pipeline)
            if self._truth.decoder_cores > 0:
                device_sample_cost_s = self._truth.device_cost(job.spec.pipeline)
        return JobRequest(
            id=job.spec.id,
            gpus=job.spec.gpus,
            batch_size=job.spec.batch_size,
            iterations=job.spec.iterations,
            model_params=job.model_params,
            flops=job.flops,
            pipeline=job.spec.pipeline,
            step_time_s=step_time_s,
            sample_cost_s=sample_cost_s,
            device_sample_cost_s=device_sample_cost_s,
            knee_sharpness=knee_sharpness,
            workers_per_gpu=job.spec.workers_per_gpu,
            gpu_indices=job.spec.gpu_indices,
            hot_resize=self._truth.hot_resize,
        )

    def _sharing_factor(self, job: _Job) -> float:
        """The oracle knows a shared GPU makes every step dearer: on the GPUs admission
        would give the job now (none while it would wait)."""
        place = self._scheduler.placement_for(job.spec.gpus, job.spec.gpu_indices) or ()
        shared = any(self._gpu_jobs[gpu] >= 1 for gpu in place)
        return 1.0 + self._truth.share_overhead if shared else 1.0

    def _hello(self, job: _Job) -> None:
        if job.phase is not _Phase.STARTING:
            return
        job.start_s = self._now
        self._set_running(job)
        self._deliver(AgentHello(job.spec.id, job.gen, iteration=0))

    def _paused(self, job: _Job) -> None:
        if job.phase is not _Phase.PAUSING:
            return
        job.phase = _Phase.PAUSED
        self._deliver(Paused(job.spec.id, job.gen, int(job.done_iterations), "sim://checkpoint"))

    def _resumed(self, job: _Job) -> None:
        if job.phase is not _Phase.RESUMING:
            return
        gap = self._now - job.pause_started
        job.paused_s += gap
        self._set_running(job)
        self._deliver(Resumed(job.spec.id, job.gen, job.workers_per_gpu, gap))

    def _finish(self, job: _Job) -> None:
        job.done_iterations = float(job.spec.iterations)
        job.end_s = self._now
        self._stop(job, _Phase.DONE)
        for gpu in job.gpu_indices:
            self._gpu_jobs[gpu] -= 1
        self._deliver(Finished(job.spec.id))

    def _heartbeats(self) -> None:
        running = self._running_jobs()
        efficiency = self._truth.efficiency(_loader_processes(running))
        for job in running:
            if job.phase is not _Phase.RUNNING:
                continue  # stopped by a command for an earlier heartbeat of this sweep
            noise = float(np.exp(job.draws.stream("rate").gauss(0.0, self._truth.rate_noise)))
            gpu_rate = 1.0 / job.step_time_s
            self._deliver(
                Heartbeat(
                    job.spec.id,
                    job.gen,
                    int(job.done_iterations),
                    samples_per_s=job.rate * job.spec.batch_size * noise,
                    idle_fraction=max(0.0, 1.0 - job.rate / gpu_rate),
                    workers_per_gpu=job.workers_per_gpu,
                    loader_cost_s=self._timed_loader(job, efficiency),
                )
            )
        if self._unfinished:
            self._schedule(self._now + self._options.heartbeat_s, "heartbeat", "")

    def _timed_loader(self, job: _Job, efficiency: float) -> float:
        """What the SDK's clock reads of a worker's seconds per sample (agents/loader.py):
        the truth's cost at the node's contention, with the rates' noise; 0 for a job that
        decodes on the device, or when timing is off. A measured curve has no cost of its
        own: its knee's (the fit `oracle` plans with) stands for it."""
        if not self._options.loader_timing or job.decoder_share > 0.0:
            return 0.0
        cost = (
            job.knee.sample_cost_s if job.knee is not None else self._truth.cost(job.spec.pipeline)
        )
        noise = float(np.exp(job.draws.stream("loader timing").gauss(0.0, self._truth.rate_noise)))
        return cost / efficiency * noise

    # ---- the core and its commands --------------------------------------------------------

    def _deliver(self, event: Event) -> None:
        for command in self._scheduler.handle(event, self._now):
            self._carry_out(command)
        # A simulated job's processes end with it: GPUs the core keeps for a job that ended
        # while its processes might run on (one declared lost) are free at once.
        for job_id in sorted(self._scheduler.exiting):
            self._deliver(Exited(job_id))

    def feed(self, event: Event, now: float) -> list[Command]:
        """Deliver one event at `now` (not before the clock) as a run does, carrying out
        the core's commands on the simulated node; those commands, in order. The twin test
        feeds the daemon's service and this driver the same events."""
        self._advance(max(now, self._now))
        commands = self._scheduler.handle(event, self._now)
        for command in commands:
            self._carry_out(command)
        return commands

    @property
    def config(self) -> SchedulerConfig:
        """The scheduler settings this run plans with."""
        return self._config

    @property
    def model(self) -> ThroughputModel | None:
        """The fitted TPM the core plans with; None for the oracle (the truth's rates)."""
        return None if self._oracle else self._fitted()

    @property
    def planned_node(self) -> NodeSpec:
        """The node as the core plans on it now: its contention learned, once it is."""
        return self._scheduler.node

    @property
    def truth(self) -> NodeTruth:
        return self._truth

    def pause_cost_s(self, job_id: str) -> float:
        """What the core weighs a pause of the job at: its own, else its kind's (in place
        or a restart) measured on the node, else the config's for its kind; in place, with
        the job's own first batch added (Scheduler._pause_cost_s)."""
        return self._scheduler.status(job_id).pause_cost_s

    def measured_loads(self) -> frozenset[int]:
        """The node loads at which jobs' loader timings measured the node's contention."""
        return self._scheduler.measured_loads()

    def _carry_out(self, command: Command) -> None:
        match command:
            case Placed(job_id=job_id, gpu_indices=gpu_indices):
                job = self._jobs[job_id]
                job.gpu_indices = gpu_indices
                for gpu in gpu_indices:
                    self._gpu_jobs[gpu] += 1
                job.phase = _Phase.SUBMITTED
            case Launch(job_id=job_id, gen=gen, allocation=allocation):
                job = self._jobs[job_id]
                job.gen, job.workers_per_gpu = gen, allocation.workers_per_gpu
                job.decoder_share = _device_share(allocation)
                job.phase = _Phase.STARTING
                self._after(self._truth.launch_s, "hello", job_id)
            case Pause(job_id=job_id, gen=gen):
                job = self._jobs[job_id]
                job.gen, job.pause_started = gen, self._now
                self._paused_gens.add(gen)
                self._pauses += 1
                self._stop(job, _Phase.PAUSING)
                self._after(self._truth.pause_s, "paused", job_id)
            case Resume(job_id=job_id, gen=gen, allocation=allocation):
                job = self._jobs[job_id]
                job.gen, job.workers_per_gpu = gen, allocation.workers_per_gpu
                job.decoder_share = _device_share(allocation)
                job.phase = _Phase.RESUMING
                self._after(self._truth.resume_s + self._refill_s(job), "resumed", job_id)
            case SetShare(job_id=job_id, decoder_share=share):
                self._jobs[job_id].decoder_share = share  # live: no pause
                self._share_changes += 1
                if job_id in self._running:
                    self._rerate()
            case Cancel(job_id=job_id):
                job = self._jobs[job_id]
                job.end_s = self._now
                self._stop(job, _Phase.DONE)
            case Planned():
                self._plans += 1
            case Gated():
                self._gated += command.kept

    def _refill_s(self, job: _Job) -> float:
        """A job resized in place waits for its first batch: one of its new workers makes
        all of it (truth.py), beside the workers of the jobs running and of those resuming
        with it, its own new ones included. A restart's resume has it already."""
        if not self._truth.hot_resize:
            return 0.0
        starting = [other for other in self._jobs.values() if other.phase is _Phase.RESUMING]
        efficiency = self._truth.efficiency(_loader_processes([*self._running_jobs(), *starting]))
        batch = job.batch_size_per_gpu
        if job.decoder_share > 0.0:  # the decoder decodes it at its share, the worker augments
            pipeline = job.spec.pipeline
            decoded = batch / (job.decoder_share * self._truth.decoder_capacity(pipeline))
            return max(decoded, batch * self._truth.device_cost(pipeline) / efficiency)
        return batch * self._worker_cost_s(job) / efficiency

    def _worker_cost_s(self, job: _Job) -> float:
        """One loader worker's seconds per sample alone: its curve's rate at one worker per
        GPU, or the truth's c."""
        if job.curve is not None:
            return 1.0 / job.curve.rate(1.0)
        return self._truth.cost(job.spec.pipeline)

    def _after(self, mean_s: float, kind: str, job_id: str) -> None:
        """The agent's answer, after a true cost drawn around `mean_s`."""
        drawn = self._truth.draw(mean_s, self._jobs[job_id].draws.stream(kind))
        self._schedule(self._now + drawn, kind, job_id)

    def _running_jobs(self) -> list[_Job]:
        """The running jobs in workload order, so a sweep meets them in one order whatever
        the timing."""
        return sorted(self._running.values(), key=lambda job: self._order[job.spec.id])

    def _set_running(self, job: _Job) -> None:
        job.phase = _Phase.RUNNING
        self._running[job.spec.id] = job
        job.workers.append([self._now, job.workers_per_gpu])
        self._rerate()

    def _stop(self, job: _Job, phase: _Phase) -> None:
        was_running = job.phase is _Phase.RUNNING
        if phase is _Phase.DONE and job.phase is not _Phase.DONE:
            self._unfinished -= 1
        self._running.pop(job.spec.id, None)
        job.phase = phase
        job.version += 1
        job.workers.append([self._now, 0])
        if was_running:
            self._rerate()

    def _rerate(self) -> None:
        """New true rates for all running jobs, and their new finish times."""
        running = self._running_jobs()
        processes = _loader_processes(running)
        rates = iteration_rates(
            self._truth,
            [
                RunningJob(
                    job_id=job.spec.id,
                    gpu_indices=job.gpu_indices,
                    step_time_s=job.step_time_s,
                    batch_size_per_gpu=job.batch_size_per_gpu,
                    workers_per_gpu=job.workers_per_gpu,
                    sample_cost_s=(
                        self._truth.device_cost(job.spec.pipeline)
                        if job.decoder_share > 0.0
                        else job.knee.sample_cost_s
                        if job.knee is not None  # fitted once, at the job's start
                        else self._truth.cost(job.spec.pipeline)
                    ),
                    decoder_share=job.decoder_share,
                    curve=job.curve,
                )
                for job in running
            ],
            processes,
        )
        for job in running:
            job.rate = rates[job.spec.id]
            job.version += 1
            left = max(0.0, job.spec.iterations - job.done_iterations)
            self._schedule(self._now + left / job.rate, "finish", job.spec.id, job.version)

    # ---- the result -----------------------------------------------------------------------

    def _result(self) -> SimulationResult:
        unfinished = [job.spec.id for job in self._jobs.values() if job.end_s is None]
        if unfinished:
            raise WorkloadError("simulation", f"jobs never finished: {', '.join(unfinished)}")
        jobs = [
            JobResult(
                id=job.spec.id,
                arrival_s=job.spec.arrival_s,
                start_s=job.start_s if job.start_s is not None else job.end_s or 0.0,
                end_s=job.end_s or 0.0,
                samples=job.spec.iterations * job.spec.batch_size,
                gpus=job.spec.gpus,
                gpu_indices=job.gpu_indices,
                busy_gpu_s=job.busy_gpu_s,
                paused_s=job.paused_s,
                workers=job.workers,
                step_time_s=job.step_time_s,
            )
            for job in self._jobs.values()
        ]
        return SimulationResult.from_jobs(
            policy=self._options.policy,
            seed=self._options.seed,
            workload=self._workload.name,
            jobs=jobs,
            reallocations=len(self._paused_gens),
            pauses=self._pauses,
            plans=self._plans,
            gated_changes=self._gated,
            tpm=self._profile_report,
            bounds=run_bounds(
                self._truth,
                self._workload.node.cpu_workers,
                self._workload.jobs,
                {job.spec.id: job.step_time_s for job in self._jobs.values()},
            ),
        )


def _device_share(allocation: Allocation) -> float:
    return allocation.decoder_share if allocation.decode_mode == "device" else 0.0


def simulate(workload: Workload, policy: str, seed: int = 0) -> SimulationResult:
    """Run `workload` under `policy` (any allocator policy, or `oracle`)."""
    return Simulation(workload, SimulationOptions(policy=policy, seed=seed)).run()


def _loader_processes(jobs: Iterable[_Job]) -> int:
    """The loader processes `jobs` run: their GPUs times their workers per GPU."""
    return sum(job.spec.gpus * job.workers_per_gpu for job in jobs)
