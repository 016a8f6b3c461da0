"""The one input and the one output every allocation policy shares."""

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from allocator.contention import ContentionCurve
from allocator.errors import InvalidRequest

DecodeMode = Literal["cpu", "device"]


def _positive(value: float) -> bool:
    return 0.0 < value < math.inf


def _none_or_more(value: float) -> bool:
    return 0.0 <= value < math.inf


# Each number of a job's spec, what it must be and the words that say so; None (where a
# field may be None) is not measured and passes. NaN fails every rule.
_JOB_RANGES: tuple[tuple[str, Callable[[float], bool], str], ...] = (
    ("model_params", _positive, "must be a positive number"),
    ("step_time_s", _positive, "must be a positive number"),
    ("sample_cost_s", _positive, "must be a positive number"),
    ("device_sample_cost_s", lambda value: value > 0.0, "must be a positive number"),
    ("remaining_samples", _none_or_more, "must be 0 or more samples"),
    ("pause_cost_s", _none_or_more, "must be 0 or more seconds"),
    ("overhead_s", _none_or_more, "must be 0 or more seconds"),
    ("knee_sharpness", _positive, "must be a positive number"),
    ("cpu_cost_s", _positive, "must be a positive number"),
    ("core_share", lambda value: 0.0 < value <= 1.0, "must be in (0, 1]"),
    ("current_workers_per_gpu", lambda value: value >= 1, "must be at least 1"),
)


@dataclass(frozen=True)
class JobSpec:
    """One training job as the allocator sees it: already-predicted rates, no raw features.

    Rates follow the paper: mu = 1 / step_time_s mini-batches per second per GPU, and one
    loader worker spends sample_cost_s (c = 1/R + 1/U) seconds per sample without contention.
    """

    id: str
    gpus: int
    batch_size: int  # global batch B; each GPU gets B / gpus
    model_params: float
    step_time_s: float
    sample_cost_s: float
    device_sample_cost_s: float | None = None  # augmentation-only cost when a decoder decodes
    current_workers_per_gpu: int | None = None  # what the job runs with now, if it runs
    # Samples left to train; breaks ties in `optimal` (module docstring), and `lookahead`
    # predicts the jobs' finishes from it. None: unknown.
    remaining_samples: float | None = None
    # Seconds a change of workers stops the job (pause and resume, as measured); `lookahead`
    # weighs it. None: not measured yet.
    pause_cost_s: float | None = None
    # The sharpness p of this job's own knee, where it is known (a curve fitted to its
    # measurements); plans on the smooth knee use it instead of their default. None: unknown.
    knee_sharpness: float | None = None
    # On a node whose CPUs train as well as load (`NodeSpec.cpu_cores`), as measured: the
    # CPU seconds the job's processes spend per sample, training and loading together, and
    # the share of a core each of its threads got meanwhile (below 1 where the CPUs are
    # contended). None: not measured.
    cpu_cost_s: float | None = None
    core_share: float | None = None
    # Seconds per sample the job waits whatever its workers, as measured: for the first batch
    # of each pass (workers starting, the pipeline filling) and, where its workers have
    # plenty to spare, to take each batch over from them.
    overhead_s: float = 0.0

    def __post_init__(self) -> None:
        where = f"jobs[{self.id}]"
        if not self.id:
            raise InvalidRequest("jobs[].id", "must be a non-empty string")
        if self.gpus < 1:
            raise InvalidRequest(f"{where}.gpus", f"must be at least 1 (got {self.gpus})")
        if self.batch_size < self.gpus:
            raise InvalidRequest(
                f"{where}.batch_size",
                f"global batch {self.batch_size} must be at least one sample per GPU "
                f"({self.gpus} GPUs)",
            )
        for name, holds, wording in _JOB_RANGES:
            value = getattr(self, name)
            if value is not None and not holds(value):
                raise InvalidRequest(f"{where}.{name}", f"{wording} (got {value})")

    @property
    def cpu_clocked(self) -> bool:
        """Whether its CPU clocks are measured: `cpu_cost_s` and `core_share` both known."""
        return self.cpu_cost_s is not None and self.core_share is not None

    @property
    def batch_size_per_gpu(self) -> float:
        """b = B / n."""
        return self.batch_size / self.gpus

    @property
    def max_samples_per_s(self) -> float:
        """B * mu: the throughput once loading keeps up (formula 5, first case)."""
        return self.batch_size / self.step_time_s


@dataclass(frozen=True)
class NodeSpec:
    """What the node offers: loader processes C, decoder capacity K, and contention eta(D);
    on a node without GPUs, the CPUs its jobs train and load on together."""

    cpu_workers: int
    contention: ContentionCurve = field(default_factory=ContentionCurve.contention_free)
    decoder_capacity: float = 0.0  # samples per second; 0 means no decoder device
    # The CPUs training and loading share, on a node that trains on its CPUs: `lookahead`
    # then predicts on one budget of cores (allocator/cpunode.py). None: a GPU node, whose
    # CPUs the paper's model gives to the loaders.
    cpu_cores: float | None = None

    def __post_init__(self) -> None:
        if self.cpu_workers < 1:
            raise InvalidRequest(
                "node.cpu_workers", f"must be at least 1 loader process (got {self.cpu_workers})"
            )
        if self.cpu_cores is not None and not 0.0 < self.cpu_cores < float("inf"):
            raise InvalidRequest(
                "node.cpu_cores", f"must be a positive number of CPUs (got {self.cpu_cores})"
            )
        if not self.decoder_capacity >= 0.0:
            raise InvalidRequest(
                "node.decoder_capacity",
                f"must be 0 or more samples/s (got {self.decoder_capacity})",
            )


@dataclass(frozen=True)
class AllocationRequest:
    """Everything a policy may look at. Jobs keep the caller's order, which breaks ties."""

    node: NodeSpec
    jobs: tuple[JobSpec, ...]
    fair_floor: float = 0.8  # `fair`: no job below this fraction of its `balance` throughput
    # Seconds from a job's finish to the plan that hands its processes on (the scheduler's
    # completion window): `lookahead`'s fluid model waits it too.
    regrow_delay_s: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.regrow_delay_s < float("inf"):
            raise InvalidRequest(
                "regrow_delay_s", f"must be 0 or more seconds (got {self.regrow_delay_s})"
            )
        seen: set[str] = set()
        for job in self.jobs:
            if job.id in seen:
                raise InvalidRequest(f"jobs[{job.id}].id", "job ids must be unique")
            seen.add(job.id)
        if not 0.0 <= self.fair_floor <= 1.0:
            raise InvalidRequest("fair_floor", f"must be between 0 and 1 (got {self.fair_floor})")

    @cached_property  # every policy reads it, some several times; jobs never change
    def floor_processes(self) -> int:
        """Loader processes needed to give every GPU of every job one worker."""
        return sum(job.gpus for job in self.jobs)


@dataclass(frozen=True, slots=True)
class JobAllocation:
    """One job's share of the node, and the throughput the model predicts with it."""

    workers_per_gpu: int
    predicted_samples_per_s: float
    decoder_share: float = 0.0
    decode_mode: DecodeMode = "cpu"


@dataclass(frozen=True)
class AllocationPlan:
    """A policy's answer. `allocations` follows the request's job order."""

    policy: str
    allocations: Mapping[str, JobAllocation]
    loader_processes: int  # sum of gpus * workers_per_gpu: what the CPU actually runs
    cpu_workers: int
    efficiency: float  # eta at loader_processes
    predicted_total_samples_per_s: float
    over_capacity: bool = False  # the floor of one worker per GPU alone exceeds cpu_workers
    notes: tuple[str, ...] = ()
    # The curve the predictions come from: None, formula 5's hard min; p, the smooth knee.
    knee_sharpness: float | None = None
    # `lookahead` only: seconds from now until the last of these jobs ends, in its fluid
    # model, under this plan and under `balance`'s split: the gain it predicts over balance.
    predicted_makespan_s: float | None = None
    balance_makespan_s: float | None = None
    balance_workers: Mapping[str, int] | None = None  # and balance's split, by job id

    def workers(self) -> dict[str, int]:
        """Workers per GPU by job id."""
        return {job_id: a.workers_per_gpu for job_id, a in self.allocations.items()}

    def to_dict(self) -> dict[str, object]:
        """The JSON shape of `stoker allocate` (DESIGN.md, machine-readable contracts); the
        makespans where the policy predicts them."""
        predicted: dict[str, object] = {
            name: value
            for name, value in (
                ("predicted_makespan_s", self.predicted_makespan_s),
                ("balance_makespan_s", self.balance_makespan_s),
            )
            if value is not None
        }
        if self.balance_workers is not None:
            predicted["balance_workers"] = dict(self.balance_workers)
        return {
            "policy": self.policy,
            "allocations": {
                job_id: {
                    "workers_per_gpu": a.workers_per_gpu,
                    "decoder_share": a.decoder_share,
                    "decode_mode": a.decode_mode,
                    "predicted_samples_per_s": a.predicted_samples_per_s,
                }
                for job_id, a in self.allocations.items()
            },
            "predicted_total_samples_per_s": self.predicted_total_samples_per_s,
            "loader_processes": self.loader_processes,
            "cpu_workers": self.cpu_workers,
            "efficiency": self.efficiency,
            "over_capacity": self.over_capacity,
            "notes": list(self.notes),
            **predicted,
        }
