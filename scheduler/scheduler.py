"""`Scheduler.handle(event, now) -> commands`: the whole decision loop, with no I/O.

Submissions wait in an arrival buffer and completions in a completion buffer, each with its
own window (paper Sec. III-C). When a window closes, a round starts: plan every job with the
configured policy, pause the running jobs whose allocation changes (those the reallocation
gate lets through), and once they have all reported `paused`, or the pause timeout passed,
launch the new jobs and resume the paused ones. A round serves both buffers, whichever
window closed. Only one round runs at a time; windows that close meanwhile are served when
it ends. Every plan has a generation number that its commands carry; messages from an older
generation are recorded and ignored.
"""

import statistics
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from allocator import AllocationPlan, AllocationRequest, InvalidRequest, JobSpec, NodeSpec, allocate
from allocator.contention import ContentionCurve
from allocator.throughput import job_samples_per_s
from scheduler.admission import Admission, GpuPool
from scheduler.config import SchedulerConfig
from scheduler.curves import SHARPEST, JobCurve, Observation
from scheduler.errors import RefitRejected, SchedulerError, UnknownJob
from scheduler.gate import RunningJob, decide
from scheduler.guard import Refusal, plan_surviving
from scheduler.messages import (
    DEFAULT_PIPELINE,
    AgentHello,
    Alive,
    Allocation,
    Cancel,
    Command,
    Event,
    Exited,
    Failed,
    Finished,
    Gated,
    Heartbeat,
    HelloNoted,
    JobCancelled,
    JobRequest,
    JobSubmitted,
    Launch,
    Pause,
    Paused,
    Placed,
    Planned,
    Queued,
    RanUnmanaged,
    Replanned,
    Restarting,
    Resume,
    Resumed,
    SetShare,
    StaleMessage,
    Stalled,
    StateChanged,
    Tick,
)
from scheduler.rates import RateModel
from scheduler.refit import FitQuality, check_fit
from scheduler.states import JobState, check_transition
from tpm import TpmError
from tpm.joint import LoaderTiming, fit_joint_contention, measured_loads

# Share changes smaller than this are noise of the plan, not worth a message.
_SHARE_STEP = 0.01
# Weight of the newest measured pause gap in a job's pause cost estimate.
_PAUSE_COST_SMOOTHING = 0.5
# A job's learned bend that moves by more than this factor from the one its last plan had
# asks for a round: p = 3 against 8 moves its best share of workers, 3 against 3.5 does not.
BEND_MOVED = 1.5
# From this bend on a knee is hard as far as a plan can tell: at its knee the job runs at
# 2^(-1/8), 92 %, of its GPU's rate, and at 24 at 97 %.
HARD_BEND = 8.0
# Loader timings kept for the node's contention (tpm/joint.py): minutes of a full node's
# heartbeats, so that the loads the jobs ran at a while ago still count.
TIMINGS_KEPT = 5000
PAUSES_KEPT = 20  # measured pauses of each kind, for the jobs not paused yet
# A job that gives no length (a command whose job file has no `iterations`, before its
# script says where it ends) is planned as a long one; its heartbeats tell the rest.
UNKNOWN_ITERATIONS = 1_000_000


@dataclass
class _Job:
    """The core's own mutable record of a job; never handed out."""

    request: JobRequest
    spec: JobSpec  # what plans use: the prior with the job's own heartbeats weighed in
    prior: JobSpec  # what the throughput model predicts for it
    curve: JobCurve = field(default_factory=JobCurve)  # what its heartbeats measured
    warming: bool = True  # its first heartbeat since it (re)started: loaders starting
    state: JobState = JobState.SUBMITTED
    allocation: Allocation | None = None  # what the job runs with
    planned: Allocation | None = None  # what the current round gives it
    iteration: int = 0
    last_heard: float = 0.0
    pause_cost_s: float | None = None
    measured_samples_per_s: float | None = None
    predicted_samples_per_s: float | None = None
    # What its curve predicted for its allocation when last planned or re-planned for: a
    # learned curve that moves far from it asks for a new round (`_learn`).
    replan_basis: float | None = None
    replan_bend: float | None = None  # the bend (knee sharpness) it was planned on; None: hard
    checkpoint: str = ""
    restarts: int = 0
    gpu_indices: tuple[int, ...] = ()
    seq: int = 0  # order of submission
    reported: int = 0  # the iteration its agent last reported (not the highest ever)
    started_at: int | None = None  # the iteration this attempt started from (its hello)
    failed_at: int | None = None  # the iteration of its last failure
    unmanaged: bool = False  # a command running without the SDK: no hello, no heartbeats
    fixed: bool = False  # its workers cannot change (unmanaged, or not resizable): no pauses
    said_iterations: int | None = None  # where its script says it ends (`Heartbeat`)
    said_batch: int | None = None  # the samples its script's steps take (`Heartbeat`)
    phase: str = ""  # what its script says it is doing (`Alive`); "": not said
    progressed_at: float = 0.0  # when it last made a step or entered a new phase
    stalled: bool = False  # reported stalled, and no progress since
    first_ran: float | None = None  # when it first ran: its time limit counts from here


@dataclass(frozen=True)
class JobStatus:
    """A read-only snapshot of one job for adapters and tests."""

    id: str
    state: JobState
    allocation: Allocation | None
    iteration: int
    predicted_samples_per_s: float | None
    measured_samples_per_s: float | None
    # What a pause costs it as the plans weigh it: as it measured, else what pauses of its
    # kind measured on this node, else the config's default for its kind.
    pause_cost_s: float
    restarts: int = 0
    checkpoint: str = ""
    gpu_indices: tuple[int, ...] = ()  # where admission placed it; () while it waits
    unmanaged: bool = False  # runs without the SDK: no hello, heartbeats or pauses
    curve: JobSpec | None = None  # what plans take it for: its prior and what it measured
    exiting: bool = False  # it ended, and keeps its GPUs until its processes exit
    # Where it ends: its request's length, else what its script says (`_length`); None:
    # neither has said.
    total_iterations: int | None = None
    # The samples a step of its script takes, all ranks, as its heartbeats say; the plans
    # count its work in them (in its request's batch before); None: unsaid.
    script_batch_size: int | None = None
    phase: str = ""  # what its script says it is doing: setup, training, evaluation, ...
    stalled: bool = False  # no step and no new phase for its stall limit


@dataclass
class _Round:
    gen: int
    deadline: float
    waiting: set[str] = field(default_factory=set)  # told to pause, not yet paused
    paused: list[str] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)
    # The plan no longer fits the node (a job left it, or a pause timed out): its flexible
    # jobs are planned again before they launch or resume (`_finish_round`).
    stale: bool = False


class Scheduler:
    """The decision loop. Feed it events in time order; carry out the commands it returns."""

    def __init__(
        self,
        node: NodeSpec,
        rates: RateModel,
        config: SchedulerConfig,
        gpus: GpuPool | None = None,
    ) -> None:
        """`gpus`: admission places jobs on this pool; None admits every job at once
        (placement left to someone else, as in the core's own tests)."""
        self._node = node
        self._admission = Admission(gpus) if gpus is not None else None
        self._rates = rates
        self._config = config
        self._jobs: dict[str, _Job] = {}  # every job ever submitted, for status
        self._live: dict[str, _Job] = {}  # those not in a final state, in submission order
        # Those whose silence times out (starting or running): a tick looks at these only,
        # not at every job queued behind them.
        self._watched: dict[str, _Job] = {}
        self._arrivals: list[str] = []
        self._arrivals_due: float | None = None
        self._backing_off: dict[str, float] = {}  # failed job -> when it may be relaunched
        self._completions_due: float | None = None
        # A window closed while every job the round would plan was still starting or
        # resuming: the round waits for them to run, until this time (`_maybe_start_round`).
        self._held_until: float | None = None
        self._round: _Round | None = None
        self._generation = 0
        self._tried_beside: tuple[tuple[str, ...], int] | None = None  # `_start_beside_running`
        # The node's contention as configured (or fitted from profiles), and the loader
        # timings of jobs running together that relearn it (`_relearn_contention`).
        self._prior_contention = node.contention
        self._timings: deque[LoaderTiming] = deque(maxlen=TIMINGS_KEPT)
        self._timings_new = False
        self._contention_learned = False
        # The pauses measured on this node, the newest `PAUSES_KEPT` of each kind (a job that
        # resizes in place, or not): a job's pause cost until it has paused itself.
        self._pauses: dict[bool, deque[float]] = {
            hot: deque(maxlen=PAUSES_KEPT) for hot in (True, False)
        }
        # Jobs whose loaders are starting, stopping or stopped while they hold processes:
        # while there are any, the node's load is not what the plan counts.
        self._unsettled: set[str] = set()
        # Jobs that ended while their processes may run on (`exited` False on `Finished`,
        # `Failed` or `JobCancelled`; a job lost on its heartbeats; one held since a
        # restart): their GPUs stay placed until they have `Exited`.
        self._exiting: set[str] = set()
        # Jobs whose learned curves a plan refused (`_plan`), for the adapters to say; they
        # take them out as they read them.
        self.refused: list[Refusal] = []

    # ---- reading -------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._generation

    def status(self, job_id: str) -> JobStatus:
        job = self._job(job_id)
        return JobStatus(
            id=job_id,
            state=job.state,
            allocation=job.allocation,
            iteration=job.iteration,
            predicted_samples_per_s=job.predicted_samples_per_s,
            measured_samples_per_s=job.measured_samples_per_s,
            pause_cost_s=self._pause_cost_s(job),
            restarts=job.restarts,
            checkpoint=job.checkpoint,
            gpu_indices=job.gpu_indices,
            unmanaged=job.unmanaged,
            curve=job.spec,
            exiting=job_id in self._exiting,
            total_iterations=_length(job),
            script_batch_size=job.said_batch,
            phase=job.phase,
            stalled=job.stalled,
        )

    def jobs(self) -> Mapping[str, JobStatus]:
        return {job_id: self.status(job_id) for job_id in self._jobs}

    @property
    def waiting_for_gpus(self) -> tuple[str, ...]:
        """Jobs admission has not placed yet, first in line first."""
        return self._admission.waiting if self._admission is not None else ()

    def waiting(self, job_id: str, now: float) -> str | None:
        """Why a job has not started running, in words that name the setting: GPUs, the
        arrival window, or a round's pauses (its window closed while a round was open) for
        one not launched; its agent's hello for one launched; None for a job waiting for
        none of these."""
        job = self._jobs.get(job_id)
        if job is not None and job.state is JobState.STARTING and job_id in self._watched:
            return self._starting(job, now)
        queue = self.waiting_for_gpus
        if job_id in queue:
            ahead = queue.index(job_id)
            gpus = self._jobs[job_id].request.gpus
            why = (
                f"waiting for {gpus} free GPU(s) or CPU training slot(s), {ahead} job(s) ahead"
                " of it in the queue"
            )
            holding = self._exiting_on(self._jobs[job_id].request.gpu_indices)
            if holding:
                why += (
                    f"; job(s) {', '.join(holding)} ended but keep theirs until their"
                    " processes exit"
                )
            return why
        if job_id in self._arrivals and self._arrivals_due is not None:
            if self._round is not None or now >= self._arrivals_due:
                return "waiting for the jobs a plan is moving to pause: planned once they have"
            window = self._config.arrival_window_s
            left = self._arrivals_due - now
            return (
                f"waiting for the arrival window: planned in {left:.0f} s with every job that"
                f" arrives meanwhile (scheduler.arrival_window_s = {window:g} s)"
            )
        return None

    @property
    def exiting(self) -> frozenset[str]:
        """Jobs that ended while their processes ran on: their GPUs wait for `Exited`."""
        return frozenset(self._exiting)

    def exiting_gpus(self) -> dict[str, tuple[int, ...]]:
        """The GPUs each exiting job keeps (empty when this core places nothing)."""
        placement = self._admission.placement if self._admission is not None else {}
        return {job_id: placement[job_id] for job_id in self._exiting if job_id in placement}

    def _exiting_on(self, pinned: tuple[int, ...] | None) -> list[str]:
        """The exiting jobs holding GPUs a waiting job could take (any, unless `pinned`)."""
        if self._admission is None:
            return []
        placement = self._admission.placement
        return sorted(
            job_id
            for job_id in self._exiting
            if pinned is None or set(placement.get(job_id, ())) & set(pinned)
        )

    def placement_for(
        self, gpus: int, pinned: tuple[int, ...] | None = None
    ) -> tuple[int, ...] | None:
        """Where admission would place a job of `gpus` GPUs now; None while it would wait
        (or when this core places nothing)."""
        return self._admission.place(gpus, pinned) if self._admission is not None else None

    @property
    def node(self) -> NodeSpec:
        """The node as plans see it: its contention learned from jobs timed together, once
        they were (`contention_learned`)."""
        return self._node

    @property
    def contention_learned(self) -> bool:
        return self._contention_learned

    def measured_loads(self) -> frozenset[int]:
        """The node loads (loader processes) at which the kept timings measure the node's
        contention (tpm/joint.py)."""
        return measured_loads(tuple(self._timings))

    @property
    def config(self) -> SchedulerConfig:
        return self._config

    def loader_processes(self) -> int:
        """Loader processes the jobs holding resources have now (or are about to have):
        workers per GPU times GPUs, the count the plan's capacity is checked against."""
        return sum(
            job.request.gpus * _workers(_holding(job))
            for job in self._live.values()
            if job.state.holds_resources
        )

    def next_deadline(self) -> float | None:
        """The earliest time at which a Tick would change something, if any."""
        if self._round is None:
            due = (self._arrivals_due, self._completions_due, self._held_until)
            times = [t for t in due if t is not None]
            times.extend(self._backing_off.values())
        else:  # windows that close meanwhile are served when the round ends, not by a Tick
            times = [self._round.deadline]
        times.extend(job.last_heard + self._silence_allowed(job) for job in self._watched.values())
        times.extend(
            job.progressed_at + self._stall_limit(job)
            for job in self._watched.values()
            if job.state is JobState.RUNNING and not job.stalled
        )
        times.extend(
            job.first_ran + job.request.time_limit_s - job.request.ran_before_s
            for job in self._live.values()
            if job.first_ran is not None and job.request.time_limit_s is not None
        )
        return min(times, default=None)

    def _starting(self, job: _Job, now: float) -> str:
        """What a launched job waits for: its SDK's hello, and, for a command, how soon it
        is taken to run without the SDK (it then runs on with the workers it has)."""
        left = max(0.0, job.last_heard + self._silence_allowed(job) - now)
        unmanaged = self._config.unmanaged_after_s
        if job.request.command and unmanaged < self._config.launch_timeout_s:
            return (
                f"launched; waiting for the SDK's hello (stoker.init()): a command that does not"
                f" call it is taken to run without it in {left:.0f} s"
                f" (scheduler.unmanaged_after_s = {unmanaged:g} s)"
            )
        return (
            f"launched; waiting for its agent's hello, at most {left:.0f} s more"
            f" (scheduler.launch_timeout_s = {self._config.launch_timeout_s:g} s)"
        )

    def _silence_allowed(self, job: _Job) -> float:
        """How long a watched job may be silent before the core acts."""
        if job.state is JobState.RUNNING:
            return job.request.heartbeat_timeout_s or self._config.heartbeat_timeout_s
        if job.request.command:
            return min(self._config.unmanaged_after_s, self._config.launch_timeout_s)
        return self._config.launch_timeout_s

    def _stall_limit(self, job: _Job) -> float:
        """How long a running job may go without progress before it is stalled."""
        return job.request.stall_timeout_s or self._config.stall_timeout_s

    def adopt(
        self,
        request: JobRequest,
        allocation: Allocation,
        iteration: int,
        now: float,
        gpu_indices: tuple[int, ...] = (),
        *,
        unmanaged: bool = False,
    ) -> list[Command]:
        """Take over a job that is already running: its agent outlived the daemon that
        launched it and said hello to this one, or, `unmanaged`, a command running without
        the SDK outlived it (no hello will come). It runs on with its allocation and its
        placement, and the next round plans it with the others."""
        if request.id in self._jobs:
            raise SchedulerError(f"job {request.id!r} is known already")
        if self._admission is not None:
            self._admission.hold(request.id, gpu_indices, request.tenant)
        spec = self._prior(self._rates, request)
        job = _Job(
            request=request,
            spec=spec,
            prior=spec,
            state=JobState.RUNNING,
            allocation=allocation,
            iteration=iteration,
            last_heard=now,
            restarts=request.restarts,
            gpu_indices=gpu_indices,
            seq=len(self._jobs),
            reported=iteration,
            started_at=iteration,
            unmanaged=unmanaged,
            fixed=unmanaged,
            progressed_at=now,
            first_ran=now,
        )
        self._jobs[request.id] = self._live[request.id] = job
        if not unmanaged:
            self._watched[request.id] = job  # its heartbeats come again
            why = "re-attached: its agent outlived the daemon"
            return [StateChanged(request.id, None, JobState.RUNNING, why, iteration)]
        why = "re-attached: it runs without the SDK and outlived the daemon"
        # Kept for the next restart: one that had said no hello yet is now known unmanaged.
        return [
            StateChanged(request.id, None, JobState.RUNNING, why, iteration),
            RanUnmanaged(request.id),
        ]

    def hold(self, job_id: str, gpu_indices: tuple[int, ...], *, exiting: bool = False) -> None:
        """Keep GPUs for a job this core does not plan: one whose agent may have outlived
        the daemon, until it is adopted or relaunched; or, `exiting`, one that ended before
        the daemon restarted while its processes ran on, until they have `Exited`."""
        if self._admission is not None:
            self._admission.hold(job_id, gpu_indices)
        if exiting:
            self._exiting.add(job_id)

    def release(self, job_id: str) -> None:
        """Give back what `hold` kept, or the GPUs of a job that ended before its processes
        did (`Exited`); admission places waiting jobs at the next event."""
        self._exiting.discard(job_id)
        if self._admission is not None and job_id not in self._live:
            self._admission.release(job_id)

    def use_model(
        self, rates: RateModel, node: NodeSpec, quality: FitQuality | None = None
    ) -> None:
        """Plan with a refitted model from now on, if it is trusted and can plan: its
        held-out R^2 (`quality`) must reach the config's `min_refit_r2` (RefitUntrusted),
        and it must predict the default pipeline and every live job (RefitRejected);
        otherwise nothing changes. Allocations change at the next round, not here."""
        if quality is not None:
            check_fit(quality, self._config.min_refit_r2)
        try:
            if rates.model is not None:
                rates.model.predict_sample_cost_s(DEFAULT_PIPELINE)
            specs = {job_id: self._prior(rates, job.request) for job_id, job in self._live.items()}
        except (TpmError, InvalidRequest) as error:
            raise RefitRejected(str(error)) from None
        self._rates, self._node = rates, node
        self._prior_contention, self._timings_new = node.contention, bool(self._timings)
        self._contention_learned = False
        self._relearn_contention()  # the new curve, corrected by what the jobs measured
        for job_id, spec in specs.items():
            job = self._live[job_id]
            job.prior, job.spec = spec, job.curve.learned(spec)

    # ---- the one entry point -------------------------------------------------------------

    def handle(self, event: Event, now: float, out: list[Command] | None = None) -> list[Command]:
        """Apply one event at time `now`; return what the adapters must do. Given `out`, the
        commands go there as they are decided: where the event raises part way, the caller
        still has those of what the core changed, to carry out (the store then agrees)."""
        out = [] if out is None else out
        match event:
            case JobSubmitted(job=request):
                self._submit(request, now, out)
            case JobCancelled(job_id=job_id, by=by, exited=exited):
                self._cancel(job_id, now, out, by, exited=exited)
            case AgentHello():
                self._hello(event, now, out)
            case Heartbeat():
                self._heartbeat(event, now, out)
            case Alive():
                self._alive(event, now, out)
            case Paused():
                self._paused(event, now, out)
            case Resumed():
                self._resumed(event, now, out)
            case Finished(job_id=job_id, exited=exited, why=why):
                self._ended(job_id, JobState.COMPLETED, now, out, why, exited=exited)
            case Failed(job_id=job_id, error=error, exited=exited):
                self._ended(job_id, JobState.FAILED, now, out, error, exited=exited)
            case Exited(job_id=job_id):
                self.release(job_id)
            case Tick():
                self._tick(now, out)
        self._end_back_offs(now)
        self._admit(now, out)
        self._maybe_start_round(now, out)
        return out

    # ---- events ----------------------------------------------------------------------------

    def _prior(self, rates: RateModel, request: JobRequest) -> JobSpec:
        """What the job is expected to do before its heartbeats say: the model's prediction,
        on the config's bend where the job states none."""
        spec = rates.job_spec(request)
        if spec.knee_sharpness is None and self._config.knee_sharpness is not None:
            return replace(spec, knee_sharpness=self._config.knee_sharpness)
        return spec

    def _submit(self, request: JobRequest, now: float, out: list[Command]) -> None:
        if request.id in self._jobs:
            raise SchedulerError(f"job {request.id!r} was submitted already")
        spec = self._prior(self._rates, request)
        job = _Job(
            request=request,
            spec=spec,
            prior=spec,
            last_heard=now,
            restarts=request.restarts,
            seq=len(self._jobs),
        )
        self._jobs[request.id] = self._live[request.id] = job
        if self._admission is not None:
            self._admission.enqueue(request)  # placed by `_admit`, maybe in this call
        else:
            self._queue(job, now, out)

    def _admit(self, now: float, out: list[Command]) -> None:
        """Place waiting jobs while GPUs are free; placed jobs enter the arrival buffer."""
        if self._admission is None:
            return
        for request, gpu_indices in self._admission.admit():
            job = self._jobs[request.id]
            job.gpu_indices = gpu_indices
            out.append(Placed(request.id, gpu_indices))
            self._queue(job, now, out)

    def _queue(self, job: _Job, now: float, out: list[Command]) -> None:
        out.append(Queued(job.request.id, job.request.gpus))
        self._arrivals.append(job.request.id)
        if self._arrivals_due is None:
            self._arrivals_due = now + self._config.arrival_window_s

    def _cancel(
        self,
        job_id: str,
        now: float,
        out: list[Command],
        by: str = "",
        *,
        exited: bool = True,
        why: str = "",
    ) -> None:
        job = self._job(job_id)
        if job.state.final:
            return
        held = job.state.holds_resources
        if held and not exited:
            self._exiting.add(job_id)
        waiting = self._admission is not None and self._admission.withdraw(job_id)
        why = why or (f"cancelled by {by}" if by else "cancelled")
        self._move(job, JobState.CANCELLED, out, f"{why} while waiting" if waiting else why)
        if held:
            out.append(Cancel(job_id))
        if job_id in self._arrivals:
            self._arrivals.remove(job_id)
        self._backing_off.pop(job_id, None)
        self._leave_round(job_id, now, out, freed=held)
        if held:
            self._completed(now)

    def _hello(self, event: AgentHello, now: float, out: list[Command]) -> None:
        job = self._job(event.job_id)
        job.last_heard = now
        job.iteration = max(job.iteration, event.iteration)
        job.reported = event.iteration
        job.fixed = not event.resizable
        if job.fixed and event.workers == 0:  # no loader at all: it holds no loader process
            for held in ("allocation", "planned"):
                if (allocation := getattr(job, held)) is not None:
                    setattr(job, held, replace(allocation, workers_per_gpu=0))
        if job.state is JobState.STARTING:
            job.started_at = event.iteration
            job.allocation = job.planned
            self._ran(job, now)
            self._move(job, JobState.RUNNING, out)
        elif job.unmanaged and job.state is JobState.RUNNING:  # a slow start, after all
            job.unmanaged = False
            job.started_at = event.iteration
            self._ran(job, now)
            self._watched[job.request.id] = job
            out.append(HelloNoted(job.request.id, event.gen, job.state))
            out.append(RanUnmanaged(job.request.id, unmanaged=False))
        else:
            out.append(HelloNoted(job.request.id, event.gen, job.state))
            if job.state.final and job.request.id in self._exiting:
                # Ended (cancelled while it started) before its agent could be told: told
                # now, it checkpoints and leaves, rather than be stopped by a signal mid-step.
                out.append(Cancel(job.request.id))

    def _heartbeat(self, event: Heartbeat, now: float, out: list[Command]) -> None:
        job = self._job(event.job_id)
        if job.state.final:
            out.append(StaleMessage(event.job_id, "heartbeat", event.gen))
            return
        job.last_heard = now
        if event.iteration > job.iteration:
            self._progressed(job, now, out)
        job.iteration = max(job.iteration, event.iteration)
        job.reported = event.iteration
        if event.total_iterations:
            job.said_iterations = event.total_iterations
        if event.batch_samples:
            job.said_batch = event.batch_samples
        if event.last:
            return  # how far it got, as it exits: no rate to take from it
        job.measured_samples_per_s = event.samples_per_s
        allocation = job.allocation
        if (
            job.state is not JobState.RUNNING
            or allocation is None
            or event.workers_per_gpu != allocation.workers_per_gpu  # a stale one
        ):
            return
        if job.warming:  # it waited for workers that were starting: not its steady rate
            job.warming = False
            return
        processes = self.loader_processes()
        on_device = allocation.decode_mode == "device"
        # Timed at a load the plan knows: every job holding processes runs with them (none
        # starting, pausing, paused or resuming, whose loaders the count has but the node
        # may not run).
        settled = not self._unsettled
        if (
            event.loader_cost_s > 0.0
            and not on_device
            and settled
            and self._config.learn_contention
        ):
            self._timings.append(LoaderTiming(job.request.id, processes, event.loader_cost_s))
            self._timings_new = True
        if self._config.learn_curves:
            self._learn(job, allocation, event, processes, now)

    def _alive(self, event: Alive, now: float, out: list[Command]) -> None:
        """Its link says the process lives: heard, however long since its last step; a new
        step or a new phase is progress (a stalled job that moved on is not stalled any
        more)."""
        job = self._job(event.job_id)
        if job.state.final:
            return  # a process that runs on after its end: nothing to hear
        job.last_heard = now
        if event.phase != job.phase or event.iteration > job.iteration:
            job.phase = event.phase
            self._progressed(job, now, out)
        if event.iteration > job.iteration:
            job.iteration = job.reported = event.iteration

    def _progressed(self, job: _Job, now: float, out: list[Command]) -> None:
        job.progressed_at = now
        if job.stalled:
            job.stalled = False
            out.append(Stalled(job.request.id, False, phase=job.phase))

    def _ran(self, job: _Job, now: float) -> None:
        """The job runs (again): its stall clock starts, and its time limit's at its first."""
        job.progressed_at = now
        job.stalled = False
        if job.first_ran is None:
            job.first_ran = now

    def _learn(
        self, job: _Job, allocation: Allocation, event: Heartbeat, processes: int, now: float
    ) -> None:
        """Weigh a heartbeat into the job's curve (scheduler/curves.py), taken with
        `processes` loader processes on the node: later plans use what it learned, and the
        prediction for the job's allocation now follows it."""
        efficiency = self._node.contention.efficiency(processes)
        on_device = allocation.decode_mode == "device"
        seen = Observation(
            event.samples_per_s,
            event.idle_fraction,
            event.workers_per_gpu,
            efficiency,
            loaders=not on_device,
            loader_cost_s=event.loader_cost_s,
            loader_cpu_s=event.loader_cpu_s,
            loader_wait_s=event.loader_wait_s,
            cpu_cost_s=event.cpu_cost_s,
            train_cpu_s=event.train_cpu_s,
            train_wait_s=event.train_wait_s,
            refill_fraction=event.refill_fraction,
        )
        workers = allocation.workers_per_gpu
        # A round is asked for what the job's curve says of it, not for the cores its
        # neighbours take now: the trigger weighs it as if it had them to itself.
        if job.replan_basis is None:
            alone = job.curve.learned(job.prior, alone=True)
            job.replan_basis = job_samples_per_s(alone, workers, efficiency)
        job.curve.observe(job.spec, seen)
        was_clocked = job.spec.cpu_clocked
        job.spec = job.curve.learned(job.prior)
        if self._node.cpu_cores is not None and not was_clocked and job.spec.cpu_clocked:
            # Plans weighed splits without the node's one budget of cores while a running
            # job's CPU clocks were unknown (allocator/cpunode.py): once all are, a round.
            running = (j for j in self._live.values() if j.state is JobState.RUNNING)
            if all(j.spec.cpu_clocked for j in running):
                self._replan_soon(now)
        if not on_device:  # a device job's rate is its decoder share's: the plan's stands
            job.predicted_samples_per_s = job_samples_per_s(job.spec, workers, efficiency)
            alone = job.curve.learned(job.prior, alone=True)
            self._replan_if_off(job, job_samples_per_s(alone, workers, efficiency), now)

    def _replan_if_off(self, job: _Job, learned: float, now: float) -> None:
        """Ask for a round (as a completion does) when the job's learned curve predicts its
        allocation more than `replan_error` away from what the last plan assumed, or its
        learned bend is more than a factor of `BEND_MOVED` from the one it was planned on: a
        prior that was far off should not hold until the next arrival or finish."""
        basis, bend = job.replan_basis, job.spec.knee_sharpness
        if basis is None or basis <= 0.0:  # no loader (`job.steps`): nothing to resize
            return
        off = abs(learned / basis - 1.0) > self._config.replan_error
        # Bends past HARD_BEND are all a hard knee to a plan: a heartbeat's noise moves a
        # hard knee's median between 8 and 24, which asks for nothing.
        planned = min(job.replan_bend or SHARPEST, HARD_BEND)
        bent = (
            bend is not None
            and max(min(bend, HARD_BEND) / planned, planned / min(bend, HARD_BEND)) > BEND_MOVED
        )
        if not (off or bent):
            return
        job.replan_basis, job.replan_bend = learned, bend or job.replan_bend
        self._replan_soon(now)

    def _replan_soon(self, now: float) -> None:
        """A round after the replan window, as a completion asks for one."""
        if self._completions_due is None:  # else with the completion window already open
            self._completions_due = now + self._config.replan_window_s

    def _paused(self, event: Paused, now: float, out: list[Command]) -> None:
        job = self._job(event.job_id)
        job.last_heard = now
        job.iteration = max(job.iteration, event.iteration)
        job.reported = event.iteration
        job.checkpoint = event.checkpoint or job.checkpoint
        current = self._round
        if job.state is JobState.PAUSING and current is not None and event.gen == current.gen:
            self._move(job, JobState.PAUSED, out)
            current.waiting.discard(job.request.id)
            current.paused.append(job.request.id)
            if not current.waiting:
                self._finish_round(now, out)
            return
        out.append(StaleMessage(job.request.id, "paused", event.gen))
        if job.state is JobState.RUNNING and job.allocation is not None:
            # A straggler that paused after its round gave up on it: resume it as it was.
            self._move(job, JobState.RESUMING, out)
            out.append(Resume(job.request.id, self._generation, job.allocation))

    def _resumed(self, event: Resumed, now: float, out: list[Command]) -> None:
        job = self._job(event.job_id)
        job.last_heard = now
        if job.state is not JobState.RESUMING:
            out.append(StaleMessage(job.request.id, "resumed", event.gen))
            return
        job.allocation = job.planned or job.allocation
        job.pause_cost_s = (
            event.gap_s
            if job.pause_cost_s is None
            else _PAUSE_COST_SMOOTHING * event.gap_s
            + (1.0 - _PAUSE_COST_SMOOTHING) * job.pause_cost_s
        )
        refill = self._refill_s(job)  # the job's own, not the node's: kept apart
        self._pauses[job.request.hot_resize].append(max(0.0, event.gap_s - refill))
        self._ran(job, now)
        self._move(job, JobState.RUNNING, out)

    def _ended(
        self,
        job_id: str,
        state: JobState,
        now: float,
        out: list[Command],
        why: str,
        *,
        exited: bool = True,
    ) -> None:
        """The job completed or failed; `exited`: its processes are gone, else its GPUs
        stay placed until they have `Exited`."""
        job = self._job(job_id)
        if job.state.final:
            out.append(StaleMessage(job_id, state.value))
            return
        held = job.state.holds_resources
        if state is JobState.FAILED and held:
            refused = self._relaunch_refused(job)
            job.failed_at = job.reported
            if refused is None:
                self._restart(job, now, out, why)
                return
            if refused:  # below a stderr tail on a line of its own, not in its last line
                glue = "\n" if "\n" in why else "; "
                why = f"{why}{glue}{refused}"
        if held and not exited:
            self._exiting.add(job_id)
        self._move(job, state, out, why)
        self._leave_round(job_id, now, out, freed=held)
        self._completed(now)

    @staticmethod
    def _relaunch_refused(job: _Job) -> str | None:
        """Why a failed job is not relaunched, or None when it is: it has restarts left and
        made progress since this attempt started (a job that fails before its first step,
        or twice at the same iteration, would only fail again)."""
        if job.restarts >= job.request.max_restarts:
            return ""  # the policy allows none (more): the failure says enough
        if job.unmanaged:
            return "not relaunched: without the SDK stoker cannot tell whether it progressed"
        if job.started_at is None or job.reported <= job.started_at:
            since = f" since its relaunch from step {job.started_at}" if job.started_at else ""
            return f"not relaunched: it failed before its first step{since}"
        if job.failed_at is not None and job.reported <= job.failed_at:
            # Its relaunch got no further than the failure before (wherever it started
            # from: a relaunch with no checkpoint starts from the top): it would only fail
            # there again.
            if job.reported == job.failed_at:
                return f"not relaunched: it failed twice after completing step {job.reported}"
            return (
                f"not relaunched: it failed again before getting past step {job.failed_at}"
                f" (this time after step {job.reported})"
            )
        return None

    def _restart(self, job: _Job, now: float, out: list[Command], why: str) -> None:
        """The job's agent died: after its back-off, back to the arrival buffer, to be
        launched again from its last checkpoint (Launch.resume_from) by the next round. It
        keeps its GPUs meanwhile."""
        job.restarts += 1
        job.started_at = None
        job.phase = ""
        job.stalled = False
        job.fixed = False  # its relaunch says again whether its loader can be resized
        config = self._config
        wait_s = min(
            config.restart_backoff_max_s, config.restart_backoff_s * 2 ** (job.restarts - 1)
        )
        self._move(job, JobState.SUBMITTED, out, f"restart {job.restarts} in {wait_s:g} s: {why}")
        out.append(Restarting(job.request.id, job.restarts, why))
        job.allocation = job.planned = None
        self._leave_round(job.request.id, now, out)
        self._backing_off[job.request.id] = now + wait_s

    def _run_unmanaged(self, job: _Job, out: list[Command]) -> None:
        """A command that has not said hello runs without the SDK: it keeps the workers it
        was launched with, is never paused, and no heartbeat is awaited from it."""
        job.unmanaged = job.fixed = True
        job.allocation = job.planned
        job.started_at = 0
        if job.first_ran is None:
            job.first_ran = job.last_heard  # when it was launched
        why = "no hello from the SDK: runs unmanaged, its workers fixed, never paused"
        self._move(job, JobState.RUNNING, out, why)
        out.append(RanUnmanaged(job.request.id))
        self._watched.pop(job.request.id, None)

    def _end_back_offs(self, now: float) -> None:
        """Jobs whose back-off is over join the arrival buffer."""
        for job_id, due in list(self._backing_off.items()):
            if now >= due:
                del self._backing_off[job_id]
                self._arrivals.append(job_id)
                if self._arrivals_due is None:
                    self._arrivals_due = now + self._config.arrival_window_s

    def _tick(self, now: float, out: list[Command]) -> None:
        current = self._round
        if current is not None and now >= current.deadline and current.waiting:
            self._give_up_on_stragglers(current, now, out)
        # In submission order, as the jobs were given: what ends first is recorded first.
        for job in list(self._live.values()):
            limit, ran = job.request.time_limit_s, job.first_ran
            if (
                limit is not None
                and ran is not None
                and now - ran + job.request.ran_before_s >= limit
            ):
                why = (
                    f"time limit: it ran {limit:g} s (time_limit_s); told to stop as a cancel"
                    " is (the SDK checkpoints at its next step), `stoker resume` goes on from"
                    " its newest checkpoint"
                )
                self._cancel(job.request.id, now, out, exited=False, why=why)
        for job in sorted(self._watched.values(), key=lambda job: job.seq):
            silent, allowed = now - job.last_heard, self._silence_allowed(job)
            if job.state is JobState.RUNNING and silent >= allowed:
                # A hung process may still hold its GPUs: they wait until it has Exited.
                lost = (
                    f"lost: its link to the daemon was silent for {silent:.0f} s"
                    f" (heartbeat_timeout_s = {allowed:g} s), its process hung or gone"
                )
                self._ended(job.request.id, JobState.FAILED, now, out, lost, exited=False)
            elif job.state is JobState.RUNNING and not job.stalled:
                self._check_stall(job, now, out)
            elif job.state is JobState.STARTING and silent >= allowed:
                if job.request.command and silent < self._config.launch_timeout_s:
                    self._run_unmanaged(job, out)
                else:
                    why = "never said hello"
                    self._ended(job.request.id, JobState.FAILED, now, out, why, exited=False)

    def _check_stall(self, job: _Job, now: float, out: list[Command]) -> None:
        """A running job without progress past its stall limit is reported stalled; with
        `stall_action = "fail"` it is stopped and failed (its restart policy applies)."""
        idle = now - job.progressed_at
        limit = self._stall_limit(job)
        if idle < limit:
            return
        job.stalled = True
        out.append(Stalled(job.request.id, True, idle, job.phase))
        if self._config.stall_action == "fail":
            doing = f" in its {job.phase} phase" if job.phase else ""
            why = (
                f"stalled: no step and no new phase for {idle:.0f} s{doing}"
                f" (stall_timeout_s = {limit:g} s, scheduler.stall_action = fail)"
            )
            self._ended(job.request.id, JobState.FAILED, now, out, why, exited=False)

    # ---- rounds ----------------------------------------------------------------------------

    def _maybe_start_round(self, now: float, out: list[Command]) -> None:
        if self._round is not None:
            return
        early = self._arrivals_due is not None and now < self._arrivals_due
        if early and self._config.start_when_free:
            self._start_beside_running(now, out)
            if self._round is not None:
                return
        arrivals_due = self._arrivals_due is not None and now >= self._arrivals_due
        completions_due = self._completions_due is not None and now >= self._completions_due
        held = self._held_until is not None
        if not (arrivals_due or completions_due or held):
            return
        if not arrivals_due:
            # What a finish freed may be for jobs still starting or resuming (a finish during
            # a round, whose jobs resume after it). Planned now, the round would plan none of
            # them and the freed processes would stay idle until the next arrival or finish:
            # hold it until they all run (their hello or Resumed comes through here), but no
            # longer than a round waits for its pauses (a resume that never reports).
            settling = any(
                job.state in (JobState.STARTING, JobState.RESUMING) for job in self._live.values()
            )
            # Arrivals still in their window count: a round serves both buffers.
            plannable = bool(self._arrivals) or any(_plannable(j) for j in self._live.values())
            expired = self._held_until is not None and now >= self._held_until
            if settling and (held or not plannable) and not expired:
                if self._held_until is None:
                    self._held_until = now + self._config.pause_timeout_s
                self._completions_due = None
                return
            if not plannable:  # nothing left that could take them
                self._completions_due = None
                self._held_until = None
                return
        self._held_until = None
        # A round serves both buffers, whichever window closed: an arrival left waiting would
        # only pause the same jobs again when its own window closes.
        arriving = self._arrivals
        self._arrivals, self._arrivals_due = [], None
        self._completions_due = None
        for job_id in arriving:
            self._move(self._jobs[job_id], JobState.PENDING, out)
        # Shortest remaining work first: the baselines and `waa` break ties in request order,
        # so the jobs nearest completion get their leftovers. `optimal` weighs the work left
        # itself (`_planned_spec`).
        planned = sorted(
            (job for job in self._live.values() if _plannable(job)), key=_remaining_samples
        )
        if not planned:
            return
        self._start_round(planned, now, out)

    def _start_beside_running(self, now: float, out: list[Command]) -> None:
        """Arrivals that fit in what the jobs holding processes leave start at once, planned
        on that alone: no one is paused for them, so nothing is worth waiting for (an idle
        node's first job starts now, not at the window's close). Giving the node's share
        back among all of them pauses someone: that waits for the arrival window, whose
        round then plans every job (the gate judges whom to change)."""
        arriving = [self._jobs[job_id] for job_id in self._arrivals]
        holding = [job for job in self._live.values() if job.state.holds_resources]
        left = self._node.cpu_workers - self.loader_processes()
        if left < sum(job.request.gpus for job in arriving) or any(j.fixed for j in arriving):
            return
        # Tried once for these arrivals on this much room: every heartbeat meanwhile would
        # plan them again to the same answer.
        tried = (tuple(self._arrivals), left)
        if tried == self._tried_beside:
            return
        self._tried_beside = tried
        shares = sum(_share(_holding(job)) for job in holding)
        node = replace(
            self._node,
            cpu_workers=left,
            decoder_capacity=self._node.decoder_capacity * max(0.0, 1.0 - shares),
        )
        self._relearn_contention()
        try:
            plan = self._plan(arriving, node)
        except InvalidRequest:
            return
        asked = sum(
            j.request.gpus * _allocation(plan, j.request.id).workers_per_gpu for j in arriving
        )
        if asked > left:  # more than the leftover holds (`static` honours asked workers): wait
            return
        rebalance_due = self._arrivals_due if holding else None
        self._arrivals, self._arrivals_due = [], None
        self._tried_beside = None  # only the tries that failed are remembered
        for job in arriving:
            self._move(job, JobState.PENDING, out)
        self._start_round(arriving, now, out, plan)
        if rebalance_due is not None and self._completions_due is None:
            self._completions_due = rebalance_due

    def _start_round(
        self,
        planned: list[_Job],
        now: float,
        out: list[Command],
        plan: AllocationPlan | None = None,
    ) -> None:
        """Start a round with `plan` for `planned` (None: the policy's, on the node less the
        jobs no plan can change now)."""
        if plan is None:
            self._relearn_contention()
            plan = self._plan(planned, self._node_left())
        self._generation += 1
        for job in planned:
            job.predicted_samples_per_s = plan.allocations[job.request.id].predicted_samples_per_s
            job.replan_basis = None  # re-based on its next heartbeat, on what it then runs
            job.replan_bend = job.spec.knee_sharpness or plan.knee_sharpness
        current = _Round(gen=self._generation, deadline=now + self._config.pause_timeout_s)
        self._round = current
        targets = {job.request.id: _allocation(plan, job.request.id) for job in planned}
        running = [
            job for job in planned if job.state is JobState.RUNNING and job.allocation is not None
        ]
        # Workers or decode mode change: the job must pause. A share alone changes live.
        changed = [job for job in running if _needs_pause(job.allocation, targets[job.request.id])]
        kept = self._gate(plan, changed, out)
        out.append(Planned(self._generation, plan))
        for job in running:
            target = targets[job.request.id]
            assert job.allocation is not None
            moved = abs(target.decoder_share - job.allocation.decoder_share)
            if job not in changed and moved > _SHARE_STEP:
                job.allocation = job.planned = target
                out.append(SetShare(job.request.id, current.gen, target.decoder_share))
        for job in planned:
            target = targets[job.request.id]
            if job.state is JobState.PENDING:
                job.planned = target
                current.launches.append(job.request.id)
            elif job in changed and job.request.id not in kept:
                job.planned = target
                self._move(job, JobState.PAUSING, out)
                out.append(Pause(job.request.id, current.gen))
                current.waiting.add(job.request.id)
        if not current.waiting:
            self._finish_round(now, out)

    def _plan(self, jobs: list[_Job], node: NodeSpec) -> AllocationPlan:
        """The configured policy's plan for `jobs` on `node`: each job's work left and what
        it must keep, the fairness floor, and the completion window its fluid model waits.
        A job whose learned curve it cannot plan goes back to its prior (scheduler/guard.py)."""
        request = AllocationRequest(
            node=node,
            jobs=tuple(self._planned_spec(job) for job in jobs),
            fair_floor=self._config.fair_floor,
            regrow_delay_s=self._config.completion_window_s,
        )
        plan, refused = plan_surviving(
            lambda specs: allocate(replace(request, jobs=tuple(specs)), self._config.policy),
            request.jobs,
            [job.prior if job.spec != job.prior else None for job in jobs],
        )
        for refusal in refused:  # it learns again from its next heartbeats
            job = self._jobs[refusal.job_id]
            job.curve, job.spec = JobCurve(), job.prior
        self.refused += refused
        return plan

    def _relearn_contention(self) -> None:
        """Plan on the contention the jobs measured together (tpm/joint.py), the configured
        curve where they did not reach. A job's learned cost was taken at the curve of its
        heartbeat's time; its window renews it within `WINDOW` heartbeats."""
        if not self._timings_new:
            return
        self._timings_new = False
        points = fit_joint_contention(
            tuple(self._timings), self._prior_contention, most=self._node.cpu_workers
        )
        if points is not None:
            self._node = replace(self._node, contention=ContentionCurve(points))
            self._contention_learned = True

    def _node_left(self, also_fixed: tuple[JobState, ...] = ()) -> NodeSpec:
        """The node less the processes of jobs no plan can change now: those starting or
        resuming with an allocation already sent (and jobs in `also_fixed` states)."""
        fixed = [
            job
            for job in self._live.values()
            if job.state in (JobState.STARTING, JobState.RESUMING, *also_fixed)
            or (job.fixed and job.state.holds_resources)
        ]
        held = sum(job.spec.gpus * _workers(_holding(job)) for job in fixed)
        shares = sum(_share(_holding(job)) for job in fixed)
        if not held:
            return self._node
        return replace(
            self._node,
            cpu_workers=max(1, self._node.cpu_workers - held),
            decoder_capacity=self._node.decoder_capacity * max(0.0, 1.0 - shares),
        )

    def _fixed(self, job: _Job) -> Allocation | None:
        """The allocation a policy must keep: a running job's own, and under `static` a new
        job's requested workers."""
        if job.state is JobState.RUNNING:
            return job.allocation
        requested = job.request.workers_per_gpu
        if self._config.policy == "static" and requested is not None:
            return Allocation(requested)
        return None

    def _planned_spec(self, job: _Job) -> JobSpec:
        return _planned_spec(job, self._fixed(job), self._pause_cost_s(job))

    def _pause_cost_s(self, job: _Job) -> float:
        """What a pause costs the job: as it measured; before its first, the median of the
        pauses of its kind measured on this node (resizing in place, or not); before any,
        the config's default for its kind. A resize in place also waits for one of the
        job's own workers to make its first batch, as long as the job's timed workers take
        to make one: the node's figure is kept without the refills it measured."""
        if job.pause_cost_s is not None:
            return job.pause_cost_s
        hot = job.request.hot_resize
        config = self._config
        if measured := self._pauses[hot]:
            node = statistics.median(measured)
        else:
            node = config.hot_pause_cost_s if hot else config.default_pause_cost_s
        return node + self._refill_s(job)

    def _refill_s(self, job: _Job) -> float:
        """The first batch a resize in place waits for (0 for a restart: its own start)."""
        if not job.request.hot_resize:
            return 0.0
        return job.curve.refill_s(job.spec.batch_size_per_gpu)

    def _gate(self, plan: AllocationPlan, changed: list[_Job], out: list[Command]) -> set[str]:
        if not self._config.gate or not changed:
            return set()
        decision = decide(
            plan,
            [
                RunningJob(
                    spec=job.spec,
                    current_workers_per_gpu=_workers(job.allocation),
                    remaining_samples=_remaining_samples(job),
                    pause_cost_s=self._pause_cost_s(job),
                )
                for job in changed
            ],
            capacity=self._node.cpu_workers,
            hysteresis=self._config.gate_hysteresis,
        )
        out.append(Gated(self._generation, decision.verdicts))
        return set(decision.kept)

    def _finish_round(self, now: float, out: list[Command]) -> None:
        current = self._round
        assert current is not None
        if current.stale:
            self._replan_flexible(current, out)
        self._round = None
        for job_id in current.launches:
            job = self._jobs[job_id]
            if job.state is JobState.PENDING and job.planned is not None:
                self._move(job, JobState.STARTING, out)
                job.last_heard = now
                out.append(Launch(job_id, current.gen, job.planned, job.checkpoint))
        for job_id in current.paused:
            job = self._jobs[job_id]
            if job.state is JobState.PAUSED and job.planned is not None:
                self._move(job, JobState.RESUMING, out)
                out.append(Resume(job_id, current.gen, job.planned))

    def _give_up_on_stragglers(self, current: _Round, now: float, out: list[Command]) -> None:
        """Jobs still pausing at the timeout keep their old allocation; the jobs of the round
        that are flexible (paused or new) are re-planned on the processes left over."""
        stragglers = [self._jobs[job_id] for job_id in sorted(current.waiting)]
        current.waiting.clear()
        for job in stragglers:
            job.planned = job.allocation
            self._move(job, JobState.RUNNING, out, "pause timed out: keeps its allocation")
        current.stale = True
        self._finish_round(now, out)

    def _replan_flexible(self, current: _Round, out: list[Command]) -> None:
        """The round's flexible jobs (paused or new) planned again on the processes the
        running jobs leave: the round's plan counted processes that a straggler kept, or
        left out those of a job that has since ended."""
        flexible = [self._jobs[j] for j in (*current.paused, *current.launches)]
        if not flexible:
            return
        replan = self._plan(flexible, self._node_left(also_fixed=(JobState.RUNNING,)))
        for job in flexible:
            job.planned = _allocation(replan, job.request.id)
        out.append(Replanned(current.gen, replan))

    def _leave_round(
        self, job_id: str, now: float, out: list[Command], *, freed: bool = False
    ) -> None:
        """The job is out of the open round, if one is; `freed`: it ended holding
        processes, which the round's flexible jobs are then planned again to take."""
        current = self._round
        if current is None:
            return
        current.stale = current.stale or freed
        if job_id in current.launches:
            current.launches.remove(job_id)
        if job_id in current.paused:
            current.paused.remove(job_id)
        if job_id in current.waiting:
            current.waiting.discard(job_id)
            if not current.waiting:
                self._finish_round(now, out)

    def _completed(self, now: float) -> None:
        """A job ended: a round once the completion window has passed, or sooner when one is
        due sooner (another completion's window, or the replan window, already open). A
        replan window longer than the completion window (`stoker serve --window 2` keeps
        its 15 s) must not hold back what a job's end freed."""
        due = now + self._config.completion_window_s
        if self._completions_due is None or due < self._completions_due:
            self._completions_due = due

    # ---- helpers ---------------------------------------------------------------------------

    def _job(self, job_id: str) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise UnknownJob(job_id) from None

    def _move(self, job: _Job, new: JobState, out: list[Command], why: str = "") -> None:
        check_transition(job.request.id, job.state, new)
        out.append(StateChanged(job.request.id, job.state, new, why, job.iteration))
        if new is JobState.RUNNING and job.state is not JobState.RUNNING:
            job.warming = True  # a start or a resume: the next heartbeat times its loaders' start
        job.state = new
        if new.holds_resources and new is not JobState.RUNNING:
            self._unsettled.add(job.request.id)
        else:
            self._unsettled.discard(job.request.id)
        if new in (JobState.STARTING, JobState.RUNNING):
            self._watched[job.request.id] = job
        else:
            self._watched.pop(job.request.id, None)
        if new.final:
            del self._live[job.request.id]
            if self._admission is not None and job.request.id not in self._exiting:
                self._admission.release(job.request.id)


def _plannable(job: _Job) -> bool:
    """A round may give the job a new allocation: it runs (or waits to start) and its
    workers are stoker's to change."""
    return job.state in (JobState.RUNNING, JobState.PENDING) and not job.fixed


def _length(job: _Job) -> int | None:
    """Where the job ends: its request's length (a zoo job stops there, inside an epoch),
    else where its script says; None: neither has said."""
    return job.request.iterations if job.request.iterations is not None else job.said_iterations


def _batch(job: _Job) -> int:
    """The samples a step of the job takes: as its script says, else its request's."""
    return job.said_batch or job.request.batch_size


def _remaining_samples(job: _Job) -> int:
    """Its samples left, to where it ends (a long job where nothing has said)."""
    total = _length(job) or UNKNOWN_ITERATIONS
    return max(0, total - job.iteration) * _batch(job)


def _holding(job: _Job) -> Allocation | None:
    """The allocation whose processes the job holds or is about to hold."""
    if job.state is JobState.RUNNING:
        return job.allocation
    return job.planned or job.allocation


def _workers(allocation: Allocation | None) -> int:
    return allocation.workers_per_gpu if allocation is not None else 1


def _share(allocation: Allocation | None) -> float:
    return allocation.decoder_share if allocation is not None else 0.0


def _allocation(plan: AllocationPlan, job_id: str) -> Allocation:
    """A job's part of a plan as commands carry it."""
    planned = plan.allocations[job_id]
    return Allocation(planned.workers_per_gpu, planned.decoder_share, planned.decode_mode)


def _needs_pause(now: Allocation | None, target: Allocation) -> bool:
    """Workers and decode mode change at an iteration boundary; a share changes live."""
    return now is None or (now.workers_per_gpu, now.decode_mode) != (
        target.workers_per_gpu,
        target.decode_mode,
    )


def _planned_spec(job: _Job, fixed: Allocation | None, pause_cost_s: float) -> JobSpec:
    """The job as a policy sees it: its work left (which `lookahead` plans for and `optimal`
    weighs among splits of equal total), the allocation it must keep, if any, and what a
    pause costs it, as measured."""
    return replace(
        job.spec,
        remaining_samples=float(_remaining_samples(job)),
        current_workers_per_gpu=fixed.workers_per_gpu if fixed is not None else None,
        pause_cost_s=pause_cost_s,
    )
