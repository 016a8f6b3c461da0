"""One read-only picture of the node, taken by the service between two events: what the
REST API, the dashboard and `/metrics` read, so none of them reaches into the service.

Taking it is cheap (the core's job table, the last heartbeat of each job, a few counts);
readers take a fresh one per request.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from allocator import JobSpec
from scheduler.messages import Allocation
from scheduler.states import JobState


@dataclass(frozen=True)
class Measured:
    """What a job's agent said in its last heartbeat."""

    samples_per_s: float
    idle_fraction: float
    iteration: int
    decoder_share: float  # the share the agent applies now


@dataclass(frozen=True)
class LiveJob:
    """One job as the scheduler core sees it, with its last heartbeat."""

    id: str
    tenant: str
    state: JobState
    allocation: Allocation | None
    iteration: int
    predicted_samples_per_s: float | None
    measured_samples_per_s: float | None
    restarts: int
    gpu_indices: tuple[int, ...]
    heartbeat: Measured | None
    reported: Mapping[str, float] = field(default_factory=dict)  # newest `job.report` values
    curve: JobSpec | None = None  # what the core takes it for (scheduler/curves.py)
    pause_cost_s: float | None = None  # what the plans weigh a pause of it at
    unmanaged: bool = False  # a command running without the SDK: nothing measured
    exiting: bool = False  # it ended; its processes run on and keep its GPUs until they exit
    total_iterations: int | None = None  # where it ends: its job file's, else its script's
    seconds_left: float | None = None  # to that end at its last minute's pace; None: unknown
    script_batch_size: int | None = None  # the samples a step of its script takes; None: unsaid
    phase: str = ""  # what its script says it is doing (setup, training, evaluation, ...)
    stalled: bool = False  # no step and no new phase for its stall limit
    planned: Allocation | None = None  # given by a round, not taken up by its agent yet

    @property
    def holds_gpus(self) -> bool:
        """Whether its placement is still its own: it runs, or its processes do."""
        return bool(self.gpu_indices) and (not self.state.final or self.exiting)

    @property
    def relative_error(self) -> float | None:
        """measured / predicted - 1, when both are known."""
        predicted, measured = self.predicted_samples_per_s, self.measured_samples_per_s
        return measured / predicted - 1.0 if predicted and measured is not None else None


@dataclass
class Counts:
    """What the daemon counted since it started (the snapshot holds a copy)."""

    plans: int = 0
    pauses: int = 0
    resumes: int = 0
    launches: int = 0
    agent_errors: int = 0  # messages for unknown jobs, or that the core refused
    telemetry_samples: int = 0  # training samples taken from heartbeats
    agent_messages_refused: int = 0  # malformed, refused by the agent link


@dataclass(frozen=True)
class NodeSnapshot:
    generation: int
    jobs: Mapping[str, LiveJob]  # every job this daemon has planned since it started
    waiting_for_gpus: tuple[str, ...]
    loader_processes: int  # allocated to the jobs holding resources: the core's count
    cpu_workers: int  # allowed (C)
    decoder_capacity: float  # samples/s of the node's decoder; 0: none
    slots: int  # GPUs, or CPU training slots on a node without GPUs
    uses_gpus: bool
    policy: str
    agent_mode: str
    model_source: str
    model_report: Mapping[str, Any] = field(default_factory=dict)
    model_refused: Mapping[str, Any] | None = None  # the newest refit refused, and why
    counts: Counts = field(default_factory=Counts)
    warnings: tuple[str, ...] = ()  # for the operator: whom jobs run as
    # eta(D) as plans use it, as points (D, eta), and whether jobs' timings taught it.
    contention: tuple[tuple[float, float], ...] = ()
    contention_learned: bool = False
    # Jobs that ended while their processes run on, and the GPUs those keep meanwhile.
    exiting_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def live(self, tenant: str | None = None) -> list[LiveJob]:
        """Jobs not in a final state, of `tenant` (None: every tenant's)."""
        return [
            job
            for job in self.jobs.values()
            if not job.state.final and (tenant is None or job.tenant == tenant)
        ]
