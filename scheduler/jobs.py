"""What the core keeps of each job and of the open round: `Job`, its own mutable record of a
job, never handed out; `JobStatus`, the read-only snapshot adapters and tests get; `Round`,
the plan being carried out. With them, the small facts every concern reads off a job (where
it ends, the samples left to it, the allocation whose processes it holds), so that rounds,
learning and the lifecycle read them one way."""

from dataclasses import dataclass, field, replace
from enum import Enum

from allocator import AllocationPlan, JobSpec
from scheduler.commands import Allocation, Launch, Resume
from scheduler.curves import JobCurve
from scheduler.exits import AfterEnd
from scheduler.reasons import StopReason
from scheduler.request import JobRequest
from scheduler.states import JobState

# A job that gives no length (a command whose job file has no `iterations`, before its
# script says where it ends) is planned as a long one; its heartbeats tell the rest.
UNKNOWN_ITERATIONS = 1_000_000


@dataclass(frozen=True)
class LaunchRetry:
    """A launch the node was short for, and when it is tried again."""

    due: float
    launch: Launch


@dataclass
class Job:
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
    # learned curve that moves far from it asks for a new round (`learning.learn`).
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
    # A launch the node was short for, tried again then (scheduler/launches.py); None: none
    # waits. Kept only while the job is starting.
    launch_retry: LaunchRetry | None = None
    launch_tries: int = 0  # the failures of its launch since the core launched it
    # It paused cold (its processes exit; its resume relaunches them): when (epoch s)
    cold_paused_at: float | None = None

    def resume(self, gen: int, allocation: Allocation) -> Resume:
        """Its resume with `allocation`: a relaunch if it paused cold (the pause taken)."""
        paused_at, self.cold_paused_at = self.cold_paused_at, None
        return Resume(self.request.id, gen, allocation, paused_at)


@dataclass
class ProcessWatch:
    """What the core keeps of an ended job's processes until they exit: when it stops them
    and why, when its final step was (a completed job's), and how it stopped them."""

    deadline: float | None = None  # when they are stopped unless gone; None: not timed
    reason: StopReason = StopReason.GRACE_OVER  # why they are stopped then
    finished_at: float | None = None  # completed while they ran: when
    stopped: AfterEnd | None = None  # stopped by the core after its end: how (its exit says)


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
    # Where it ends: its request's length, else what its script says (`length`); None:
    # neither has said.
    total_iterations: int | None = None
    # The samples a step of its script takes, all ranks, as its heartbeats say; the plans
    # count its work in them (in its request's batch before); None: unsaid.
    script_batch_size: int | None = None
    phase: str = ""  # what its script says it is doing: setup, training, evaluation, ...
    stalled: bool = False  # no step and no new phase for its stall limit
    # The allocation a round gave it and its agent has not taken up yet: a job launched
    # (until its hello), or told to pause and resize (until it has resumed); None otherwise.
    planned: Allocation | None = None


@dataclass
class Round:
    gen: int
    deadline: float
    waiting: set[str] = field(default_factory=set)  # told to pause, not yet paused
    paused: list[str] = field(default_factory=list)
    launches: list[str] = field(default_factory=list)
    # The plan no longer fits the node (a job left it, or a pause timed out): its flexible
    # jobs are planned again before they launch or resume (`rounds.finish_round`).
    stale: bool = False


class PlanPurpose(Enum):
    """What a plan in flight is for."""

    ROUND = "round"  # a round of every plannable job (`rounds.maybe_start_round`)
    BESIDE = "beside"  # arrivals that may start beside the running jobs
    REPLAN = "replan"  # the open round's flexible jobs, on what is left (`finish_round`)


# What a plan was made on: each planned job's id, state and allocation, and what the jobs
# it does not plan hold of the node (loader processes, decoder share), which must not grow
# before it is used (scheduler/planning.py `still_planned`).
PlanBasis = tuple[tuple[tuple[str, JobState, Allocation | None], ...], int, float]


@dataclass(frozen=True)
class PendingPlan:
    """A plan asked for (`PlanNeeded`) and not yet made: what it is for, the jobs it plans
    in order (with the arrivals it takes), the round it serves (REPLAN), and its basis."""

    ticket: int
    purpose: PlanPurpose
    jobs: tuple[str, ...]
    basis: PlanBasis
    asked_at: float
    arriving: tuple[str, ...] = ()
    round_gen: int | None = None


def plannable(job: Job) -> bool:
    """A round may give the job a new allocation: it runs (or waits to start) and its
    workers are stoker's to change."""
    return job.state in (JobState.RUNNING, JobState.PENDING) and not job.fixed


def length(job: Job) -> int | None:
    """Where the job ends: its request's length (a zoo job stops there, inside an epoch),
    else where its script says; None: neither has said."""
    return job.request.iterations if job.request.iterations is not None else job.said_iterations


def batch(job: Job) -> int:
    """The samples a step of the job takes: as its script says, else its request's."""
    return job.said_batch or job.request.batch_size


def remaining_samples(job: Job) -> int:
    """Its samples left, to where it ends (a long job where nothing has said)."""
    total = length(job) or UNKNOWN_ITERATIONS
    return max(0, total - job.iteration) * batch(job)


def holding(job: Job) -> Allocation | None:
    """The allocation whose processes the job holds or is about to hold."""
    if job.state is JobState.RUNNING:
        return job.allocation
    return job.planned or job.allocation


def workers_of(allocation: Allocation | None) -> int:
    return allocation.workers_per_gpu if allocation is not None else 1


def share_of(allocation: Allocation | None) -> float:
    return allocation.decoder_share if allocation is not None else 0.0


def planned_allocation(plan: AllocationPlan, job_id: str) -> Allocation:
    """A job's part of a plan as commands carry it."""
    planned = plan.allocations[job_id]
    return Allocation(planned.workers_per_gpu, planned.decoder_share, planned.decode_mode)


def needs_pause(now: Allocation | None, target: Allocation) -> bool:
    """Workers and decode mode change at an iteration boundary; a share changes live."""
    return now is None or (now.workers_per_gpu, now.decode_mode) != (
        target.workers_per_gpu,
        target.decode_mode,
    )


def planned_spec(job: Job, fixed: Allocation | None, pause_cost_s: float) -> JobSpec:
    """The job as a policy sees it: its work left (which `lookahead` plans for and `optimal`
    weighs among splits of equal total), the allocation it must keep, if any, and what a
    pause costs it, as measured."""
    return replace(
        job.spec,
        remaining_samples=float(remaining_samples(job)),
        current_workers_per_gpu=fixed.workers_per_gpu if fixed is not None else None,
        pause_cost_s=pause_cost_s,
    )
