"""A GPU node on a virtual clock, driving the daemon's own scheduler core.

Discrete events: arrivals, agents' hello / heartbeat / alive / paused / resumed / finished /
failed, processes' exits, users' cancels, and the core's deadlines (window closes, pause
timeouts, silence and stall limits). Between events every running job trains at the
constant rate the node's truth gives for the current set of running jobs, so a job's end is
computed, not stepped to (`simnode`). The core plans with a TPM fitted from simulated
profiling (`workloads.profiling`), or in `oracle` mode with the truth itself (`oracle`:
`optimal` on the truth; `oracle:<policy>`: that policy on the truth).

Every decision is the core's: admission (`scheduler/admission.py`, the daemon's rule: a job
takes its `gpu_indices`, or else the least loaded GPUs, once they hold fewer than
`node.max_jobs_per_gpu` jobs, and waits first come, first served while they do not),
restarts, timeouts. The jobs' agents (`simagents`) feed it the events the daemon would, a
workload's incidents included (WorkloadJob.crash_at and the rest), and its commands are
carried out on the node (`simcommands`).
"""

import heapq
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from allocator import ContentionCurve, NodeSpec, ThroughputModel
from scheduler.admission import GpuPool
from scheduler.config import SchedulerConfig
from scheduler.messages import (
    DEFAULT_PIPELINE,
    Command,
    Event,
    Exited,
    HelloMissed,
    JobRequest,
    ModelRefitted,
    PlanMade,
    PlanNeeded,
    Tick,
)
from scheduler.planning import work_out
from scheduler.rates import RateModel
from scheduler.refit import FitQuality
from scheduler.scheduler import Scheduler
from workloads import ORACLE, ORACLE_OF
from workloads.bounds import run_bounds
from workloads.errors import SimulationError, WorkloadError
from workloads.profiling import profile_node
from workloads.results import JobResult, SimulationResult
from workloads.simagents import SimAgents
from workloads.simcommands import carry_out
from workloads.simjob import CRASH, FINISH, SILENT, STALL, Draws, JobPhase, SimJob
from workloads.simnode import SimNode
from workloads.simrestart import SimRestore
from workloads.spec import Workload, WorkloadJob
from workloads.truth import NodeTruth

log = logging.getLogger(__name__)

_MILESTONES = frozenset({FINISH, CRASH, SILENT, STALL})

# An observer of the core's inputs: each event, when, and the commands it answered.
Observer = Callable[[Event, float, list[Command]], None]


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
        # from the job's own streams (Draws).
        self._rng = random.Random(options.seed)
        self._profile_report: dict[str, object] | None = None
        self._model: ThroughputModel | None = None
        node = workload.node
        self._scheduler = self._new_scheduler()
        self._restore: SimRestore | None = None  # the last restart's, for its `HelloMissed`
        jobs = {job.id: self._new_job(job) for job in workload.jobs}
        self._node = SimNode(self._truth, node.gpus, jobs)
        self._agents = SimAgents(
            self._node,
            self._deliver,
            self._request,
            lambda: self._scheduler.exiting,
            loader_timing=options.loader_timing,
        )
        self._heartbeat_s = options.heartbeat_s
        self.observer: Observer | None = None  # sees every event fed, as the daemon's does

    # ---- set-up ---------------------------------------------------------------------------

    def _new_scheduler(self) -> Scheduler:
        """A core as the daemon's start builds one: the node, the model, no jobs."""
        node = self._workload.node
        gpus = GpuPool(node.gpus, node.max_jobs_per_gpu)
        return Scheduler(
            self._node_spec(), self._rate_model(), self._config, gpus, plans_inline=False
        )

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

    def _new_job(self, spec: WorkloadJob) -> SimJob:
        flops, params = spec.features
        draws = Draws(self._options.seed, spec.id)
        hot = self._truth.hot_resize if spec.hot_resize is None else spec.hot_resize
        if spec.curve is not None:  # measured: no formula, no noise
            curve, knee = spec.curve.measured(), spec.curve.knee()
            step = spec.step_time_s(self._truth)
            return SimJob(spec, flops, params, step, draws, hot, curve=curve, knee=knee)
        # This job's own speed against the formula, for reasons no feature explains.
        deviation = float(np.exp(self._rng.gauss(0.0, self._truth.step_noise)))
        step_time_s = deviation * spec.step_time_s(self._truth)
        return SimJob(spec, flops, params, step_time_s, draws, hot)

    # ---- the loop -------------------------------------------------------------------------

    def run(self) -> SimulationResult:
        node = self._node
        for job in node.jobs.values():
            node.schedule(job.spec.arrival_s, "arrive", job.spec.id)
            if job.spec.cancel_at_s is not None:
                node.schedule(job.spec.cancel_at_s, "cancel", job.spec.id)
        node.schedule(self._heartbeat_s, "heartbeat", "")
        daemon = self._workload.node
        for kind, when in (("restart", daemon.restart_at_s), ("refit", daemon.refit_at_s)):
            if when is not None:
                node.schedule(when, kind, "")
        stalled_at = -1.0  # a deadline already served once at this instant
        while node.events:
            deadline = self._scheduler.next_deadline()
            if deadline is not None and deadline < node.events[0][0]:
                if deadline <= stalled_at:
                    raise SimulationError(f"the scheduler's deadline {deadline} s does not move")
                stalled_at = deadline if deadline <= node.now else -1.0
                node.advance(max(deadline, node.now))
                self._deliver(Tick())
                continue
            stalled_at = -1.0
            when, _, kind, job_id, version = heapq.heappop(node.events)
            node.advance(when)
            self._on(kind, job_id, version)
            if not node.unfinished and not node.lingering:
                break
        return self._result()

    def _on(self, kind: str, job_id: str, version: int) -> None:
        if kind == "heartbeat":
            self._agents.heartbeats()
            if self._node.unfinished:
                self._node.schedule(self._node.now + self._heartbeat_s, "heartbeat", "")
            return
        if kind == "restart":
            self._restart()
            return
        if kind == "refit":
            self._refit()
            return
        job = self._node.jobs[job_id]
        if kind in _MILESTONES:
            if version == job.version and job.phase is JobPhase.RUNNING:
                self._agents.milestone(kind, job)
            return
        self._agents.handler(kind)(job)

    def _request(self, job: SimJob) -> JobRequest:
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
            max_restarts=job.spec.max_restarts,
            workers_per_gpu=job.spec.workers_per_gpu,
            gpu_indices=job.spec.gpu_indices,
            hot_resize=job.hot_resize,
        )

    def _sharing_factor(self, job: SimJob) -> float:
        """The oracle knows a shared GPU makes every step dearer: on the GPUs admission
        would give the job now (none while it would wait)."""
        place = self._scheduler.placement_for(job.spec.gpus, job.spec.gpu_indices) or ()
        shared = any(self._node.gpu_jobs[gpu] >= 1 for gpu in place)
        return 1.0 + self._truth.share_overhead if shared else 1.0

    # ---- the daemon's restarts and refits --------------------------------------------------

    def new_core(self) -> None:
        """The daemon restarted: from now on a fresh core, as its start builds one, takes the
        events (the twin test's, the restore's first)."""
        self._scheduler = self._new_scheduler()

    def _restart(self) -> None:
        """A kill -9 and a start: a fresh core, fed the daemon's restore (simrestart.py)."""
        last = dict(self._scheduler.jobs())
        self.new_core()
        restore = self._restore = SimRestore(self._node, last, self._deliver, self._request)
        restore.restore()
        restore.hellos()

    def _refit(self) -> None:
        """A refit of the model on the profiles' samples (the same model again, judged by
        its held-out R^2), fed as the daemon's model keeper feeds one."""
        report = self._profile_report
        quality = FitQuality.of_report(report) if report is not None else None
        self._deliver(ModelRefitted(self._rate_model(), self._node_spec(), quality))

    # ---- the core -------------------------------------------------------------------------

    def _deliver(self, event: Event) -> None:
        commands = self.feed(event, self._node.now)
        for command in commands:  # the restart's and the plans', after the rest
            if isinstance(command, HelloMissed) and self._restore is not None:
                self._restore.hello_missed(command.job_id)
            elif isinstance(command, PlanNeeded):  # made at once, as a hand-held daemon's
                self._deliver(PlanMade(command.ticket, work_out(command.work)))
        # A simulated job's processes end with it unless it says otherwise (a script that
        # runs on after its end, a cancelled job checkpointing): GPUs the core keeps for a
        # job that ended while its processes might run on (one declared lost) are free.
        for job_id in sorted(self._scheduler.exiting - self._node.lingering):
            self._node.release(self._node.jobs[job_id])
            self._deliver(Exited(job_id))

    def feed(self, event: Event, now: float) -> list[Command]:
        """Deliver one event at `now` (not before the clock) as a run does, carrying out
        the core's commands on the simulated node; those commands, in order. The twin test
        feeds the daemon's service and this driver the same events."""
        self._node.advance(max(now, self._node.now))
        commands = self._scheduler.handle(event, self._node.now)
        if self.observer is not None:
            self.observer(event, self._node.now, list(commands))
        for command in commands:
            carry_out(self._node, command)
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

    # ---- the result -----------------------------------------------------------------------

    def _result(self) -> SimulationResult:
        unfinished = [job.spec.id for job in self._node.jobs.values() if job.end_s is None]
        if unfinished:
            raise WorkloadError("simulation", f"jobs never finished: {', '.join(unfinished)}")
        jobs = [
            JobResult(
                id=job.spec.id,
                arrival_s=job.spec.arrival_s,
                start_s=job.start_s if job.start_s is not None else job.end_s or 0.0,
                end_s=job.end_s or 0.0,
                samples=int(job.done_iterations) * job.spec.batch_size,  # a cancelled job's: part
                gpus=job.spec.gpus,
                gpu_indices=job.gpu_indices,
                busy_gpu_s=job.busy_gpu_s,
                paused_s=job.paused_s,
                workers=job.workers,
                step_time_s=job.step_time_s,
            )
            for job in self._node.jobs.values()
        ]
        return SimulationResult.from_jobs(
            policy=self._options.policy,
            seed=self._options.seed,
            workload=self._workload.name,
            jobs=jobs,
            reallocations=len(self._node.paused_gens),
            pauses=self._node.pauses,
            plans=self._node.plans,
            gated_changes=self._node.gated,
            tpm=self._profile_report,
            bounds=run_bounds(
                self._truth,
                self._workload.node.cpu_workers,
                self._workload.jobs,
                {job.spec.id: job.step_time_s for job in self._node.jobs.values()},
            ),
        )


def simulate(workload: Workload, policy: str, seed: int = 0) -> SimulationResult:
    """Run `workload` under `policy` (any allocator policy, or `oracle`)."""
    return Simulation(workload, SimulationOptions(policy=policy, seed=seed)).run()
