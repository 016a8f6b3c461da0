"""The messages an agent (the SDK in a job's rank 0, or the simulated agent) sends the
daemon: `hello`, `heartbeat`, `alive`, `metrics`, `paused`, `resumed`, `finished`,
`failed`, with the limits on what they carry. agents/protocol.py holds their union
(`AgentMessage`), the version history and the encoding; the daemon's own messages to an
agent are in agents/daemonmessages.py. No torch here: the daemon imports it.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.bounded import Count, Pid, Rate, Seconds, Share, Workers
from agents.envelope import Message

MAX_METRIC_NAME = 64
MAX_METRICS_PER_POINT = 32
MAX_POINTS_PER_MESSAGE = 1000  # senders also keep a message under MAX_MESSAGE_BYTES
AgentState = Literal["starting", "running", "paused"]
MAX_PHASE = 32
# A phase is a short label a dashboard can show: letters, digits, spaces and a few marks.
PHASE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9 _.:/-]*$"


class Hello(Message):
    """Sent on connect and on reconnect: the daemon re-attaches the agent to its job."""

    type: Literal["hello"] = "hello"
    pid: Pid
    state: AgentState = "starting"
    iteration: Count = 0
    workers: Workers = Field(0, description="loader workers per GPU now; 0 before start")
    share: Share = Field(0.0, description="decoder share now")
    resizable: bool = Field(
        True, description="since v3: False when its loaders cannot change workers (say again)"
    )


class HeartbeatMessage(Message):
    """Every second while the job trains: progress and measured rates."""

    type: Literal["heartbeat"] = "heartbeat"
    iteration: Count
    samples: Count = Field(description="samples trained so far")
    idle_s: Seconds = Field(description="seconds waiting for batches this interval")
    step_s: Seconds = Field(description="seconds computing this interval")
    samples_per_s: Rate
    workers: Workers = Field(description="loader workers per GPU now")
    share: Share = Field(0.0, description="decoder share now")
    loader_s: Seconds = Field(
        0.0,
        description=(
            "since v4: a loader worker's wall seconds per sample this interval, from taking"
            " up a batch to handing it over; 0 when not timed, and then left out of the bytes"
        ),
    )
    loader_cpu_s: Seconds = Field(
        0.0,
        description=(
            "since v5: the CPU seconds a loader worker spent per sample in the span loader_s"
            " times; 0 when not timed"
        ),
    )
    loader_wait_s: Seconds = Field(
        0.0,
        description=(
            "since v5: the seconds per sample a loader worker waited in the kernel's run"
            " queue for a core in that span (the share of a core it got is"
            " loader_cpu_s / (loader_cpu_s + loader_wait_s)); 0 when not timed or not known"
        ),
    )
    cpu_s: Seconds = Field(
        0.0,
        description=(
            "since v5: the job's CPU seconds per sample this interval, its training"
            " processes and loader workers together; 0 when not measured"
        ),
    )
    refill_s: Seconds = Field(
        0.0,
        description=(
            "since v6: of idle_s, the seconds spent waiting for the first batch of a pass"
            " (each epoch's, each resize's): its pipeline filling, a cost per pass"
        ),
    )
    last: bool = Field(
        False,
        description=(
            "since v7: the script is exiting without finishing (an exception, most often):"
            " `iteration` counts the steps it completed; nothing in this message is a measurement"
        ),
    )
    total_iterations: Count = Field(
        0,
        description=(
            "since v8: the iteration the script will end at, as its `job.epochs(n)` and first"
            " loader count it; 0 when not known"
        ),
    )
    batch_samples: Count = Field(
        0,
        description=(
            "since v9: the samples a step of the script's first loader takes, all ranks (its"
            " batch_size times the ranks); 0 when not known"
        ),
    )
    train_cpu_s: Seconds = Field(
        0.0,
        description=(
            "since v6: the seconds per sample the training thread ran on a core this"
            " interval; 0 when not measured"
        ),
    )
    train_wait_s: Seconds = Field(
        0.0,
        description=(
            "since v6: the seconds per sample the training thread waited in the kernel's run"
            " queue for a core this interval (the share of a core it got is"
            " train_cpu_s / (train_cpu_s + train_wait_s)); 0 when not known"
        ),
    )


class AliveMessage(Message):
    """Since version 10: the process lives (sent by the link's own thread whenever a
    heartbeat period passed with nothing else sent), and the phase its script is in:
    `setup` before its first batch, `training`, `evaluation`, `saving`, or a label of the
    script's own (`job.phase(...)`). Liveness, not progress: the daemon takes a job for
    lost only when these stop too."""

    type: Literal["alive"] = "alive"
    phase: str = Field("training", min_length=1, max_length=MAX_PHASE, pattern=PHASE_PATTERN)
    iteration: Count = Field(0, description="the training steps it has completed")


class MetricPoint(BaseModel):
    """The values a script reported at one step (a NaN or infinite loss too)."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    step: Count
    values: dict[Annotated[str, Field(min_length=1, max_length=MAX_METRIC_NAME)], float] = Field(
        max_length=MAX_METRICS_PER_POINT
    )


class MetricsMessage(Message):
    """Since version 3: what the script reported since the last one, oldest first; rank 0
    sends them every few seconds and before each checkpoint."""

    type: Literal["metrics"] = "metrics"
    points: list[MetricPoint] = Field(min_length=1, max_length=MAX_POINTS_PER_MESSAGE)


class PausedMessage(Message):
    type: Literal["paused"] = "paused"
    iteration: Count
    checkpoint: str = ""


class ResumedMessage(Message):
    type: Literal["resumed"] = "resumed"
    workers: Workers = Field(ge=1)
    share: Share = 0.0
    gap_s: Seconds = Field(description="pause received to first new step")


class FinishedMessage(Message):
    type: Literal["finished"] = "finished"
    iteration: Count = 0


class FailedMessage(Message):
    type: Literal["failed"] = "failed"
    error: str = Field(max_length=4096)
