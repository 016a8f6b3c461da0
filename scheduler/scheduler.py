"""`Scheduler.handle(event, now) -> commands`: the whole decision loop, with no I/O.

Submissions wait in an arrival buffer and completions in a completion buffer, each with its
own window (paper Sec. III-C). When a window closes, a round starts: plan every job with the
configured policy, pause the running jobs whose allocation changes (those the reallocation
gate lets through), and once they have all reported `paused`, or the pause timeout passed,
launch the new jobs and resume the paused ones. A round serves both buffers, whichever
window closed. Only one round runs at a time; windows that close meanwhile are served when
it ends. Every plan has a generation number that its commands carry; messages from an older
generation are recorded and ignored.

This module is the core's surface: `handle`, the one way in that changes it, and the reads.
The state lives in one `Core` (scheduler/core.py); each concern is a module of functions
over it: a job's way in and out (lifecycle.py), its agent's messages (reports.py), time's
decisions (timers.py), rounds (rounds.py), what the core learns (learning.py), a daemon's
restart (reattach.py), a launch that failed (launches.py), an ended job's processes
(watches.py) and their exit (processes.py).
"""

from collections.abc import Mapping
from typing import assert_never

from allocator import NodeSpec
from scheduler import (
    launches,
    learning,
    lifecycle,
    planning,
    processes,
    reattach,
    reports,
    rounds,
    timers,
    watches,
)
from scheduler.admission import GpuPool
from scheduler.commands import Command, PlanNeeded
from scheduler.config import SchedulerConfig
from scheduler.core import Core
from scheduler.events import (
    AgentHello,
    Alive,
    Event,
    Exited,
    Failed,
    Finished,
    Heartbeat,
    JobCancelled,
    JobSubmitted,
    LaunchFailed,
    ModelRefitted,
    Paused,
    PlanMade,
    ProcessExited,
    Reattached,
    Released,
    Restored,
    Resumed,
    StopRequested,
    Tick,
)
from scheduler.jobs import Job, JobStatus, length
from scheduler.planning import work_out
from scheduler.rates import RateModel
from scheduler.reasons import Waiting, WaitReason
from scheduler.states import JobState
from tpm.joint import measured_loads

__all__ = ["JobStatus", "Scheduler"]


class Scheduler:
    """The decision loop. Feed it events in time order; carry out the commands it returns."""

    def __init__(
        self,
        node: NodeSpec,
        rates: RateModel,
        config: SchedulerConfig,
        gpus: GpuPool | None = None,
        *,
        plans_inline: bool = True,
    ) -> None:
        """`gpus`: admission places jobs on this pool; None admits every job at once
        (placement left to someone else, as in the core's own tests). `plans_inline`: each
        plan the core asks for (`PlanNeeded`) is made within the same `handle` and taken
        at once; False where the caller makes it and feeds it back (`PlanMade`), as the
        daemon (in a worker thread) and the simulator do (scheduler/planning.py)."""
        self._core = Core(node, rates, config, gpus)
        self._plans_inline = plans_inline

    # ---- the one entry point -------------------------------------------------------------

    def handle(self, event: Event, now: float, out: list[Command] | None = None) -> list[Command]:
        """Apply one event at time `now`; return what the adapters must do. Given `out`, the
        commands go there as they are decided: where the event raises part way, the caller
        still has those of what the core changed, to carry out (the store then agrees)."""
        out = [] if out is None else out
        asked = len(out)
        self._take(event, now, out)
        while self._plans_inline and (needed := _plan_needed(out, asked)) is not None:
            asked = len(out)
            self._take(PlanMade(needed.ticket, work_out(needed.work)), now, out)
        return out

    def _take(self, event: Event, now: float, out: list[Command]) -> None:
        core = self._core
        match event:
            case JobSubmitted(job=request):
                lifecycle.submit(core, request, now, out)
            case AgentHello() | Heartbeat() | Alive() | Paused() | Resumed():
                reports.hear(core, event, now, out)
            case JobCancelled() | Finished() | Failed() | Exited():
                lifecycle.end(core, event, now, out)
            case LaunchFailed():
                launches.failed(core, event, now, out)
            case ProcessExited() | StopRequested():
                processes.hear(core, event, now, out)
            case Tick():
                timers.tick(core, now, out)
                reattach.tick(core, now, out)
            case Reattached() | Restored() | Released():
                # As a daemon restores its jobs: what these change waits for the next event.
                reattach.restore(core, event, now, out)
                return
            case PlanMade():
                rounds.plan_made(core, event, now, out)
            case ModelRefitted():  # allocations change at the next round
                learning.use_model(core, event)
                return
            case _ as unreachable:
                assert_never(unreachable)
        lifecycle.end_back_offs(core, now)
        lifecycle.admit(core, now, out)
        rounds.maybe_start_round(core, now, out)

    # ---- reading -------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._core.generation

    @property
    def planning(self) -> int:
        """Jobs in the plan being made (`PlanNeeded` not yet answered); 0: none is."""
        pending = self._core.planning
        return len(pending.jobs) if pending is not None else 0

    def status(self, job_id: str) -> JobStatus:
        core = self._core
        job = core.job(job_id)
        return JobStatus(
            id=job_id,
            state=job.state,
            allocation=job.allocation,
            iteration=job.iteration,
            predicted_samples_per_s=job.predicted_samples_per_s,
            measured_samples_per_s=job.measured_samples_per_s,
            pause_cost_s=learning.pause_cost_s(core, job),
            restarts=job.restarts,
            checkpoint=job.checkpoint,
            gpu_indices=job.gpu_indices,
            unmanaged=job.unmanaged,
            curve=job.spec,
            exiting=job_id in core.exiting,
            total_iterations=length(job),
            script_batch_size=job.said_batch,
            phase=job.phase,
            stalled=job.stalled,
            planned=job.planned if job.planned != job.allocation else None,
        )

    def jobs(self) -> Mapping[str, JobStatus]:
        return {job_id: self.status(job_id) for job_id in self._core.jobs}

    @property
    def waiting_for_gpus(self) -> tuple[str, ...]:
        """Jobs admission has not placed yet, first in line first."""
        admission = self._core.admission
        return admission.waiting if admission is not None else ()

    def waiting(self, job_id: str, now: float) -> Waiting | None:
        """Why a job has not started running, with the setting that times it: GPUs, the
        arrival window, or a round's pauses (its window closed while a round was open) for
        one not launched; its agent's hello for one launched; None for a job waiting for
        none of these. The daemon words it (daemon/wording.py)."""
        core = self._core
        job = core.jobs.get(job_id)
        if job is not None and job.state is JobState.STARTING and job_id in core.watched:
            return self._starting(job, now)
        queue = self.waiting_for_gpus
        if job_id in queue:
            request = core.jobs[job_id].request
            holding = tuple(self._exiting_on(request.gpu_indices))
            return Waiting(
                WaitReason.GPUS, gpus=request.gpus, ahead=queue.index(job_id), holding=holding
            )
        if core.planning is not None and job_id in core.planning.arriving:
            return Waiting(WaitReason.PLANNING)
        if job_id in core.arrivals and core.arrivals_due is not None:
            if core.round is not None or now >= core.arrivals_due:
                return Waiting(WaitReason.ROUND_PAUSES)
            window, left = core.config.arrival_window_s, core.arrivals_due - now
            return Waiting(WaitReason.ARRIVAL_WINDOW, seconds_left=left, setting_s=window)
        return None

    def awaiting_hello(self, job_id: str) -> bool:
        """Whether the job is held for its agent's hello after a daemon's restart
        (`Restored` with `hello_within_s`), until it is `Reattached` or `Released`."""
        return job_id in self._core.restored

    def cold_paused(self, job_id: str) -> bool:
        """Whether the job paused cold and waits for its relaunch: its processes have
        left, or leave now (a `Resume` with `cold_paused_at` relaunches them)."""
        job = self._core.jobs.get(job_id)
        return job is not None and job.cold_paused_at is not None

    @property
    def exiting(self) -> frozenset[str]:
        """Jobs that ended while their processes ran on: their GPUs wait for `Exited`."""
        return frozenset(self._core.exiting)

    def exiting_gpus(self) -> dict[str, tuple[int, ...]]:
        """The GPUs each exiting job keeps (empty when this core places nothing)."""
        core = self._core
        placement = core.admission.placement if core.admission is not None else {}
        return {job_id: placement[job_id] for job_id in core.exiting if job_id in placement}

    def _exiting_on(self, pinned: tuple[int, ...] | None) -> list[str]:
        """The exiting jobs holding GPUs a waiting job could take (any, unless `pinned`)."""
        core = self._core
        if core.admission is None:
            return []
        placement = core.admission.placement
        return sorted(
            job_id
            for job_id in core.exiting
            if pinned is None or set(placement.get(job_id, ())) & set(pinned)
        )

    def placement_for(
        self, gpus: int, pinned: tuple[int, ...] | None = None
    ) -> tuple[int, ...] | None:
        """Where admission would place a job of `gpus` GPUs now; None while it would wait
        (or when this core places nothing)."""
        admission = self._core.admission
        return admission.place(gpus, pinned) if admission is not None else None

    @property
    def node(self) -> NodeSpec:
        """The node as plans see it: its contention learned from jobs timed together, once
        they were (`contention_learned`)."""
        return self._core.node

    @property
    def contention_learned(self) -> bool:
        return self._core.contention_learned

    def measured_loads(self) -> frozenset[int]:
        """The node loads (loader processes) at which the kept timings measure the node's
        contention (tpm/joint.py)."""
        return measured_loads(tuple(self._core.timings))

    @property
    def config(self) -> SchedulerConfig:
        return self._core.config

    def loader_processes(self) -> int:
        """Loader processes the jobs holding resources have now (or are about to have):
        workers per GPU times GPUs, the count the plan's capacity is checked against."""
        return self._core.loader_processes()

    def next_deadline(self) -> float | None:
        """The earliest time at which a Tick would change something, if any."""
        core = self._core
        times: list[float] = []
        if core.round is None:
            times.extend(core.backing_off.values())
        if core.round is None and core.planning is None:
            due = (core.arrivals_due, core.completions_due, core.held_until)
            times.extend(t for t in due if t is not None)
        elif core.round is not None and core.round.waiting:
            times.append(core.round.deadline)
        # Else windows that closed are served when the round ends or the plan in flight
        # comes, not by a Tick (a round waiting for no pause waits for its replan).
        watched = core.watched.values()
        times.extend(job.last_heard + timers.silence_allowed(core, job) for job in watched)
        times.extend(
            job.progressed_at + timers.stall_limit(core, job)
            for job in watched
            if job.state is JobState.RUNNING and not job.stalled
        )
        times.extend(
            job.first_ran + job.request.time_limit_s - job.request.ran_before_s
            for job in core.live.values()
            if job.first_ran is not None and job.request.time_limit_s is not None
        )
        times.extend(watches.deadlines(core))
        plan_due = planning.deadline(core)
        if plan_due is not None:
            times.append(plan_due)
        times.extend(launches.deadlines(core))
        times.extend(reattach.deadlines(core))
        return min(times, default=None)

    def _starting(self, job: Job, now: float) -> Waiting:
        """What a launched job waits for: its SDK's hello, and, for a command, how soon it
        is taken to run without the SDK (it then runs on with the workers it has)."""
        config = self._core.config
        left = max(0.0, job.last_heard + timers.silence_allowed(self._core, job) - now)
        unmanaged = config.unmanaged_after_s
        if job.request.command and unmanaged < config.launch_timeout_s:
            return Waiting(WaitReason.SDK_HELLO, seconds_left=left, setting_s=unmanaged)
        return Waiting(WaitReason.HELLO, seconds_left=left, setting_s=config.launch_timeout_s)


def _plan_needed(out: list[Command], start: int) -> PlanNeeded | None:
    """The plan asked for in `out` from `start` on, if one was (one at a time)."""
    return next((c for c in out[start:] if isinstance(c, PlanNeeded)), None)
