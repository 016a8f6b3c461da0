"""What flows into the scheduler core (events) and out of it (commands and records). All
frozen; nothing is decided by reading a string."""

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from allocator import AllocationPlan
from allocator.types import DecodeMode
from scheduler.states import JobState

DEFAULT_PIPELINE = "imagenet"  # what jobs load with unless they say


def device_pipeline(pipeline: str) -> str:
    """The TPM's id for `pipeline` with decoding done by the decoder device (augment only)."""
    return f"{pipeline}+device"


@dataclass(frozen=True)
class JobRequest:
    """A job as submitted: what it trains and the features the TPM predicts its rates from.

    `step_time_s` and `sample_cost_s` may be given to bypass the TPM (profiled elsewhere).
    """

    id: str
    gpus: int
    batch_size: int  # global batch B
    iterations: int | None  # None: a command that did not say (its script may, `Heartbeat`)
    model_params: float
    flops: float = 0.0  # forward FLOPs per sample; needed unless step_time_s is given
    pipeline: str = DEFAULT_PIPELINE  # preprocessing pipeline id in the TPM
    step_time_s: float | None = None
    sample_cost_s: float | None = None
    # Augment-only cost when the node's decoder decodes (c'); None: the TPM's fit of the
    # pipeline's device variant (`device_pipeline`), if it has one; else cpu mode only.
    device_sample_cost_s: float | None = None
    # The sharpness of the job's own knee where it is known (a simulation's truth); None:
    # the plan's default.
    knee_sharpness: float | None = None
    max_restarts: int = 0
    restarts: int = 0  # already used: a job restored after the daemon restarted
    # What the user asked for; only the `static` policy honours it (paper Table III).
    workers_per_gpu: int | None = None
    # Pinned GPUs (or CPU training slots); None: the least loaded ones at admission.
    gpu_indices: tuple[int, ...] | None = None
    # A user's command, which may not use the SDK: if it never says hello it runs on
    # unmanaged (SchedulerConfig.unmanaged_after_s) instead of being lost.
    command: bool = False
    # Whose job it is: admission shares the node among tenants by weight (admission.py).
    tenant: str = ""
    # It resizes in place (the SDK's hot resize): a pause costs it its loaders' rebuild,
    # not a restart from its checkpoint.
    hot_resize: bool = False
    # Its own limits (None: the config's; for time_limit_s, none): link silence before it is
    # lost, no progress (a step, a new phase) before it is stalled, run time before it stops.
    heartbeat_timeout_s: float | None = None
    stall_timeout_s: float | None = None
    time_limit_s: float | None = None
    # The seconds since its first start, when an earlier daemon started it (a job restored
    # after a restart): its time limit counts them.
    ran_before_s: float = 0.0


# ---- events ------------------------------------------------------------------------------


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
    why: str = "finished"  # its reason: another when the daemon took an exit for its end


@dataclass(frozen=True)
class Failed:
    job_id: str
    error: str
    exited: bool = True  # as for `Finished`: False while its processes still run


@dataclass(frozen=True)
class Exited:
    """The processes of a job that ended are gone: its GPUs are free for the next job
    (after `Finished`, `Failed` or `JobCancelled` with `exited` False, a job lost on its
    heartbeats, or a completed job held since a restart)."""

    job_id: str


@dataclass(frozen=True)
class Tick:
    """Time passed: close windows whose time is up, notice timeouts."""


Event = (
    JobSubmitted
    | JobCancelled
    | AgentHello
    | Heartbeat
    | Alive
    | Paused
    | Resumed
    | Finished
    | Failed
    | Exited
    | Tick
)

# ---- commands ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Allocation:
    """One job's share of the node as a command carries it."""

    workers_per_gpu: int
    decoder_share: float = 0.0
    decode_mode: DecodeMode = "cpu"


@dataclass(frozen=True)
class Launch:
    job_id: str
    gen: int
    allocation: Allocation
    resume_from: str = ""  # checkpoint to start from, when relaunched


@dataclass(frozen=True)
class Pause:
    job_id: str
    gen: int


@dataclass(frozen=True)
class Resume:
    job_id: str
    gen: int
    allocation: Allocation


@dataclass(frozen=True)
class SetShare:
    """A live change of a running job's decoder share: no pause, same workers and mode."""

    job_id: str
    gen: int
    decoder_share: float


@dataclass(frozen=True)
class Cancel:
    job_id: str


@dataclass(frozen=True)
class Placed:
    """Admission gave the job these GPUs (or CPU training slots); it now waits in the
    arrival buffer. The adapters keep the placement with the job."""

    job_id: str
    gpu_indices: tuple[int, ...]


# ---- records: what happened, for the event log; nothing to carry out -------------------


@dataclass(frozen=True)
class StateChanged:
    """A job moved along the transition table. `old` is None for a job the core took over
    from an earlier daemon (`Scheduler.adopt`). `iteration`: the steps it had completed, as
    the core last heard."""

    job_id: str
    old: JobState | None
    new: JobState
    why: str = ""
    iteration: int = 0


@dataclass(frozen=True)
class Queued:
    """The job was placed and entered the arrival buffer."""

    job_id: str
    gpus: int


@dataclass(frozen=True)
class RanUnmanaged:
    """A command said no hello: it runs without the SDK, its workers fixed, never paused
    (`unmanaged` False: a slow one said hello after all). Kept with the job, so that a
    restarted daemon adopts one without the SDK as it runs, with no hello to wait for."""

    job_id: str
    unmanaged: bool = True


@dataclass(frozen=True)
class HelloNoted:
    """An agent said hello again while its job was past starting (a reconnect)."""

    job_id: str
    gen: int
    state: JobState


@dataclass(frozen=True)
class StaleMessage:
    """A message that came too late to matter: an older generation, or a job that ended."""

    job_id: str
    message: str  # the message type: heartbeat, paused, resumed, completed, failed
    gen: int | None = None


@dataclass(frozen=True)
class Restarting:
    """The job's agent died and its restart policy relaunches it."""

    job_id: str
    restarts: int
    why: str


@dataclass(frozen=True)
class Stalled:
    """A running job made no progress (no step, no new phase) for `silent_s`, its stall
    limit (`stalled` True), or moved again after it was reported (`stalled` False)."""

    job_id: str
    stalled: bool
    silent_s: float = 0.0
    phase: str = ""


@dataclass(frozen=True)
class Planned:
    """A round's plan, generation `gen`."""

    gen: int
    plan: AllocationPlan


class GateChoice(StrEnum):
    """What the reallocation gate did with a change the plan asked of a running job."""

    CHANGE = "change"  # it pays: pause and resize
    KEEP = "kept"  # it does not pay: the job keeps its allocation
    FORCED = "forced"  # it does not pay, but the plan does not fit unless the job shrinks


@dataclass(frozen=True)
class GateVerdict:
    choice: GateChoice
    saved_s: float = 0.0  # time the change saves over the job's remaining work
    needed_s: float = 0.0  # its pause cost with the hysteresis margin

    def __str__(self) -> str:
        if self.choice is GateChoice.FORCED:
            return "forced: the plan does not fit unless it shrinks"
        compared = f"saves {self.saved_s:.1f} s"
        if self.choice is GateChoice.KEEP:
            return f"kept: {compared} <= pause cost {self.needed_s:.1f} s"
        return f"{compared} > pause cost {self.needed_s:.1f} s"


@dataclass(frozen=True)
class Gated:
    """The gate's verdict on each running job the plan of generation `gen` would change."""

    gen: int
    verdicts: Mapping[str, GateVerdict]

    @property
    def kept(self) -> int:
        return sum(verdict.choice is GateChoice.KEEP for verdict in self.verdicts.values())


@dataclass(frozen=True)
class Replanned:
    """After a pause timeout, the round's flexible jobs planned again on what was left."""

    gen: int
    plan: AllocationPlan


Record = (
    StateChanged
    | Queued
    | HelloNoted
    | RanUnmanaged
    | StaleMessage
    | Restarting
    | Stalled
    | Planned
    | Gated
    | Replanned
)
Command = Launch | Pause | Resume | SetShare | Cancel | Placed | Record
