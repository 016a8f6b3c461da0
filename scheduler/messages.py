"""What flows into the scheduler core (events) and out of it (commands). All frozen."""

from dataclasses import dataclass, field
from typing import Literal

DecodeMode = Literal["cpu", "device"]
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
    iterations: int
    model_params: float
    flops: float = 0.0  # forward FLOPs per sample; needed unless step_time_s is given
    pipeline: str = DEFAULT_PIPELINE  # preprocessing pipeline id in the TPM
    step_time_s: float | None = None
    sample_cost_s: float | None = None
    # Augment-only cost when the node's decoder decodes (c'); None: the TPM's fit of the
    # pipeline's device variant (`device_pipeline`), if it has one; else cpu mode only.
    device_sample_cost_s: float | None = None
    max_restarts: int = 0
    restarts: int = 0  # already used: a job restored after the daemon restarted
    # What the user asked for; only the `static` policy honours it (paper Table III).
    workers_per_gpu: int | None = None


# ---- events ------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobSubmitted:
    job: JobRequest


@dataclass(frozen=True)
class JobCancelled:
    job_id: str


@dataclass(frozen=True)
class AgentHello:
    """An agent (re)connected; `gen` is the last plan it applied."""

    job_id: str
    gen: int
    iteration: int


@dataclass(frozen=True)
class Heartbeat:
    job_id: str
    gen: int
    iteration: int
    samples_per_s: float  # measured over the last interval
    idle_fraction: float  # share of the interval spent waiting for batches
    workers_per_gpu: int


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
    job_id: str


@dataclass(frozen=True)
class Failed:
    job_id: str
    error: str


@dataclass(frozen=True)
class Tick:
    """Time passed: close windows whose time is up, notice timeouts."""


Event = (
    JobSubmitted
    | JobCancelled
    | AgentHello
    | Heartbeat
    | Paused
    | Resumed
    | Finished
    | Failed
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
class Record:
    """Something for the event log: a state change, a plan, a gated change, a stale message."""

    kind: str
    job_id: str | None = None
    data: dict[str, object] = field(default_factory=dict)


Command = Launch | Pause | Resume | SetShare | Cancel | Record
