"""What flows into the scheduler core: events, in time order, each applied by one
`Scheduler.handle` call. A job's life (submitted, its agent's words, its end, a launch that
failed, its processes' exit), time passing, and what the daemon does around it (a restart's
re-attach and holds, a refitted model). All frozen; nothing is decided by reading a string."""

from dataclasses import dataclass

from allocator import NodeSpec
from scheduler.commands import Allocation, Launch, PlanOutcome
from scheduler.exits import ExitFacts
from scheduler.rates import RateModel
from scheduler.reasons import EndReason, LaunchFailure
from scheduler.refit import FitQuality
from scheduler.request import JobRequest


@dataclass(frozen=True)
class JobSubmitted:
    job: JobRequest


@dataclass(frozen=True)
class JobCancelled:
    job_id: str
    by: str = ""  # who asked (a tenant), for the job's reason
    # Its processes are gone (or never ran). False while they stop: admission keeps the
    # job's GPUs from the next job until `Exited`, as for `Finished`.
    exited: bool = True


@dataclass(frozen=True)
class AgentHello:
    """An agent (re)connected; `gen` is the last plan it applied."""

    job_id: str
    gen: int
    iteration: int
    # False: its loader cannot change workers (an iterable dataset): planned around, never
    # paused, like a job running unmanaged.
    resizable: bool = True
    # Its loader workers per GPU now, as it says; 0 with `resizable` False: it has no loader
    # at all (`job.steps`), and holds no loader process. -1: not said.
    workers: int = -1


@dataclass(frozen=True)
class Heartbeat:
    job_id: str
    gen: int
    iteration: int
    samples_per_s: float  # measured over the last interval
    idle_fraction: float  # share of the interval spent waiting for batches
    workers_per_gpu: int
    loader_cost_s: float = 0.0  # a loader worker's wall seconds per sample; 0: not timed
    # CPU clocks per sample, 0 where not measured: a loader worker's CPU seconds and its
    # seconds waiting for a core in the same span (together, the share of a core it got),
    # and the job's CPU seconds, training and loading together.
    loader_cpu_s: float = 0.0
    loader_wait_s: float = 0.0
    cpu_cost_s: float = 0.0
    # The training thread's, per sample: on a core, and waiting in the run queue for one.
    train_cpu_s: float = 0.0
    train_wait_s: float = 0.0
    # Of the idle share, what went to waiting for the first batch of a pass (its pipeline
    # filling, a cost per pass that no loader worker shortens).
    refill_fraction: float = 0.0
    # The script is exiting without finishing: `iteration` counts the steps it completed, and
    # nothing else here is a measurement (`last_word`).
    last: bool = False
    # The iteration the script says it ends at (0: unsaid): where a request gives no
    # length, its remaining work is counted to it.
    total_iterations: int = 0
    # The samples a step of the script takes, all ranks (0: unsaid): its remaining work is
    # counted in them, not in its request's batch (a command's is a hint).
    batch_samples: int = 0

    @classmethod
    def last_word(cls, job_id: str, gen: int, completed: int) -> "Heartbeat":
        """A script's word as it exits unfinished: the steps it completed, nothing measured
        (from its last heartbeat, or the marker it leaves beside it)."""
        return cls(job_id, gen, completed, 0.0, 0.0, 0, last=True)


@dataclass(frozen=True)
class Alive:
    """The job's link says its process lives (the SDK's own thread, every heartbeat period
    with nothing else sent), and the phase its script is in (`setup`, `training`,
    `evaluation`, `saving`, or the script's own). Liveness, not progress."""

    job_id: str
    phase: str
    iteration: int = 0  # the training steps it has completed


@dataclass(frozen=True)
class Paused:
    job_id: str
    gen: int
    iteration: int
    checkpoint: str = ""
    # It resizes cold: its processes exit after this pause, and its resume relaunches them;
    # when it paused (epoch s), its relaunch's pause gap counts from it. None: in place.
    cold_paused_at: float | None = None


@dataclass(frozen=True)
class Resumed:
    job_id: str
    gen: int
    workers_per_gpu: int
    gap_s: float  # seconds from pause to running again: the measured pause cost


@dataclass(frozen=True)
class Finished:
    """The job's final step is done. `exited`: its processes are gone too. A script may
    go on after training (an evaluation, a save) on the GPUs it holds; then the daemon says
    False, and admission keeps those GPUs from the next job until `Exited`."""

    job_id: str
    exited: bool = True
    # Why it is complete: its final step, or an exit the daemon took for its end (one of
    # EndReason's completed kinds).
    how: EndReason = EndReason.FINISHED


@dataclass(frozen=True)
class Failed:
    """The job failed, as told at the edge: `cause` says how (one of EndReason's told
    failures), `said` what was told there (the job's own exception text, or the daemon's
    account of its exit or launch): opaque, carried into its reason, never read."""

    job_id: str
    said: str
    exited: bool = True  # as for `Finished`: False while its processes still run
    cause: EndReason = EndReason.JOB_SAID


@dataclass(frozen=True)
class LaunchFailed:
    """A launch of the job's processes raised. `launch`: the launch the daemon carried out
    (its checkpoint filled in); `kind`: whether the node was short (the core tries the same
    launch again after a pause) or the launch was refused (the job's failure); `said`: the
    daemon's account of it, opaque, carried into the job's reason or its retry's record;
    `exited`: nothing of the launch runs (False: part of it does, and is stopped)."""

    job_id: str
    launch: Launch
    kind: LaunchFailure
    said: str
    exited: bool = True


@dataclass(frozen=True)
class Exited:
    """The processes of a job that ended are gone: its GPUs are free for the next job
    (after `Finished`, `Failed` or `JobCancelled` with `exited` False, a job lost on its
    heartbeats, or a completed job held since a restart)."""

    job_id: str


@dataclass(frozen=True)
class ProcessExited:
    """A job's processes exited, with what the daemon gathered of it (`facts`: its code,
    its SDK's markers; the core fills in its own state of the job) and its account of the
    exit (`said`: the code or signal and the tail of stderr, opaque, carried into a
    failure's reason). The core decides what the exit is (scheduler/exits.py)."""

    job_id: str
    facts: ExitFacts
    said: str = ""


@dataclass(frozen=True)
class StopRequested:
    """Someone (`by`, a tenant) cancelled a job that ended while its processes run on (a
    script still saving after its final step): they are stopped."""

    job_id: str
    by: str = ""


@dataclass(frozen=True)
class Tick:
    """Time passed: close windows whose time is up, notice timeouts."""


@dataclass(frozen=True)
class Reattached:
    """A job the core does not know runs already, and is taken over: its agent outlived the
    daemon that launched it and said hello to this one, or, `unmanaged`, a command running
    without the SDK outlived it (no hello will come). The daemon feeds it as it restores its
    jobs after a restart. The job runs on with its allocation and its placement
    (`gpu_indices`), and the next round plans it with the others; a job known already is
    refused (SchedulerError)."""

    request: JobRequest
    allocation: Allocation
    iteration: int  # the steps it has completed, as its agent (or the store) says
    gpu_indices: tuple[int, ...] = ()
    unmanaged: bool = False


@dataclass(frozen=True)
class Restored:
    """GPUs kept for a job this core does not plan. The daemon feeds it as it restores its
    jobs after a restart: for a job whose agent may have outlived the last daemon, until it
    is `Reattached` or relaunched (`Released` first); or, `exiting`, for a job that ended
    before the restart while its processes run on, until they have `Exited`.
    `hello_within_s`: how long the agent has to say hello (the daemon's
    `reattach_timeout_s`); past it, a `Tick` answers `HelloMissed`. None: no hello awaited."""

    job_id: str
    gpu_indices: tuple[int, ...]
    exiting: bool = False
    hello_within_s: float | None = None


@dataclass(frozen=True)
class Released:
    """What `Restored` kept is given back. The daemon feeds it when a restored job it held
    for its agent's hello is cancelled, relaunched, adopted as running without the SDK, or
    found ended; admission places waiting jobs at the next event."""

    job_id: str


@dataclass(frozen=True)
class ModelRefitted:
    """Plan with a refitted throughput model from now on. The daemon's model keeper feeds
    it when a refit is done. Taken only if it is trusted and can plan: its held-out R^2
    (`quality`, None: not judged) must reach the config's `min_refit_r2` (RefitUntrusted),
    and it must predict the default pipeline and every live job (RefitRejected); otherwise
    nothing changes. Allocations change at the next round, not at this event."""

    rates: RateModel
    node: NodeSpec  # the node as the new model sees it: its contention
    quality: FitQuality | None = None


@dataclass(frozen=True)
class PlanMade:
    """The plan a `PlanNeeded` of this `ticket` asked for. The core takes it if what it
    planned is still as it was (the same jobs, states, allocations and room); else it asks
    again, on what is there now (scheduler/planning.py)."""

    ticket: int
    outcome: PlanOutcome


# What a job's agent says over its link.
AgentEvent = AgentHello | Heartbeat | Alive | Paused | Resumed
# A job's end, and its processes' exit after it.
EndEvent = JobCancelled | Finished | Failed | Exited
# A job's processes: their exit, and a cancel of those that run on after the job's end.
ProcessEvent = ProcessExited | StopRequested
# What the daemon does as it restores its jobs after a restart: no round follows them at
# once; what they change is served at the next event.
RestoreEvent = Reattached | Restored | Released

Event = (
    JobSubmitted
    | AgentEvent
    | EndEvent
    | LaunchFailed
    | ProcessEvent
    | Tick
    | RestoreEvent
    | ModelRefitted
    | PlanMade
)
