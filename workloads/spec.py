"""Workload files: a node, optional truth and scheduler overrides, and the jobs to submit.

```toml
name = "paper-static"
[node]
gpus = 4
cpu_workers = 18
restart_at_s = 600     # optional, simulator: the daemon is killed and restarts then
refit_at_s = 300       # optional, simulator: the daemon refits its model then
[scheduler]            # optional: SchedulerConfig fields
arrival_window_s = 0
[truth]                # optional: NodeTruth fields (the simulated world)
pause_s = 9.0
[[jobs]]
id = "app1"
model = "Resnet18"     # zoo name; flops and model_params may be given instead or as well
batch_size = 128       # global batch B
gpus = 2
iterations = 500
arrival_s = 0
gpu_indices = [0, 1]   # optional; otherwise the least loaded GPUs when the job is admitted
workers_per_gpu = 3    # optional: what the `static` policy gives it (paper Table III)
image_px = 768         # optional, live runs (`stoker demo`, bench_live_gain): its own JPEGs
read_latency_ms = 20   # optional, live runs: its JPEGs on an emulated remote store
max_restarts = 1       # optional, simulator: its restart policy (0: none)
hot_resize = false     # optional, simulator: false, a pause relaunches it (default: [truth])
setup_s = 30           # optional, simulator: alive in its setup this long after each hello
crash_at = 200         # optional, simulator: its script crashes after this step, once
silent_at = 300        # optional, simulator: its link goes silent after this step (hung)
stall_at = 400         # optional, simulator: no step after this one for stall_s (alive)
stall_s = 90
exit_after_s = 20      # optional, simulator: its script runs on this long after its end
launch_short = 2       # optional, simulator: the node is short for its first 2 launches
cancel_at_s = 600      # optional, simulator: a user cancels it then
[jobs.curve]           # optional: the job's measured profile, the truth instead of formulas
workers_per_gpu = [1, 2, 3, 6, 12]
samples_per_s = [300, 590, 820, 1400, 1700]   # per GPU, the job alone
source = "where the points come from"
```

Files are read with tomllib and checked by pydantic (unknown keys refused); every problem
comes back as a WorkloadError naming the file and the field.
"""

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from allocator.curvefit import Knee, curve_problem, fit_knee
from scheduler.config import SchedulerConfig
from tpm.zoo import model_features
from workloads.errors import WorkloadError
from workloads.truth import MeasuredCurve, NodeTruth


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeConfig(_Strict):
    gpus: int = Field(4, ge=1, description="GPUs on the node")
    cpu_workers: int = Field(18, ge=1, description="loader processes the node may run (C)")
    max_jobs_per_gpu: int = Field(
        1, ge=1, description="jobs admitted per GPU when placed by count; more wait in a queue"
    )
    # Simulator only: the node's daemon is killed (kill -9) then and started again at once,
    # restoring its jobs (workloads/simrestart.py); it refits its model then.
    restart_at_s: float | None = Field(None, ge=0.0, description="the daemon restarts then")
    refit_at_s: float | None = Field(None, ge=0.0, description="the daemon refits its model")


def check_node_options(gpus: int, cpu_workers: int) -> None:
    """The node's size as the workload commands take it, refused by option name."""
    if gpus < 1:
        raise WorkloadError("--gpus", f"the node needs at least 1 GPU, got {gpus}")
    if cpu_workers < 1:
        raise WorkloadError("--cpu-workers", f"must be at least 1, got {cpu_workers}")


class JobCurve(_Strict):
    """A job's samples/s per GPU at each count of loader workers per GPU, measured alone on
    its GPU (a published profile, for example)."""

    workers_per_gpu: tuple[float, ...] = Field(min_length=2)
    samples_per_s: tuple[float, ...] = Field(min_length=2, description="per GPU")
    source: str = Field("", description="where the points come from")

    @model_validator(mode="after")
    def _consistent(self) -> "JobCurve":
        problem = curve_problem(self.workers_per_gpu, self.samples_per_s)
        if problem is not None:
            raise ValueError(problem)
        return self

    def measured(self) -> MeasuredCurve:
        return MeasuredCurve(self.workers_per_gpu, self.samples_per_s)

    def knee(self) -> Knee:
        """The planner's smooth knee fitted to the curve the truth runs (allocator/curvefit.py)."""
        return fit_knee(self.workers_per_gpu, self.samples_per_s)


class WorkloadJob(_Strict):
    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    model: str
    batch_size: int = Field(ge=1, description="global batch B")
    gpus: int = Field(ge=1)
    iterations: int = Field(ge=1)
    arrival_s: float = Field(0.0, ge=0.0)
    pipeline: str = "imagenet"
    gpu_indices: tuple[int, ...] | None = None
    workers_per_gpu: int | None = Field(None, ge=1)
    flops: float | None = Field(None, gt=0.0)
    model_params: float | None = Field(None, gt=0.0)
    curve: JobCurve | None = None
    # Live runs only (`stoker demo --workload`, bench/bench_live_gain.py): the job trains on
    # JPEGs of its own of this side, cropped as the others are: larger images, dearer
    # loading. The simulator ignores it (its truth's pipeline costs stand).
    image_px: int | None = Field(None, ge=16, le=4096)
    # Live runs only: the job's JPEGs lie on an emulated remote store, every read waiting
    # this long first (agents/data.py): loading bound by a wait, not by the CPUs. 0: local.
    read_latency_ms: float | None = Field(None, ge=0.0, le=10_000.0)
    # Simulator only: what the job's processes do besides training, fed to the core as the
    # daemon feeds it (workloads/simagents.py). Each incident happens once.
    max_restarts: int = Field(0, ge=0, description="relaunches its restart policy allows")
    hot_resize: bool | None = Field(None, description="None: the truth's; False: cold")
    setup_s: float = Field(0.0, ge=0.0, description="after each launch's hello, before a step")
    crash_at: int | None = Field(None, ge=1, description="its script crashes after this step")
    silent_at: int | None = Field(None, ge=1, description="its link goes silent after it")
    stall_at: int | None = Field(None, ge=1, description="no step after this one for stall_s")
    stall_s: float = Field(
        0.0, ge=0.0, validate_default=True, description="how long its stall at stall_at lasts"
    )
    exit_after_s: float = Field(0.0, ge=0.0, description="its script runs on after its end")
    launch_short: int = Field(
        0, ge=0, description="its first launches the node is short for (EMFILE): tried again"
    )
    cancel_at_s: float | None = Field(None, ge=0.0, description="a user cancels it then")

    @field_validator("crash_at", "silent_at", "stall_at")
    @classmethod
    def _before_the_end(cls, at: int | None, info: ValidationInfo) -> int | None:
        iterations = info.data.get("iterations")
        if at is not None and iterations is not None and at >= iterations:
            raise ValueError(f"step {at} is not before its last (iterations = {iterations})")
        return at

    @field_validator("stall_s")
    @classmethod
    def _stall_has_a_length(cls, stall_s: float, info: ValidationInfo) -> float:
        if (info.data.get("stall_at") is None) != (stall_s == 0.0):
            raise ValueError("give stall_at and stall_s together (a stall at a step, its length)")
        return stall_s

    @field_validator("cancel_at_s")
    @classmethod
    def _after_arrival(cls, cancel_at_s: float | None, info: ValidationInfo) -> float | None:
        arrival_s = info.data.get("arrival_s", 0.0)
        if cancel_at_s is not None and cancel_at_s < arrival_s:
            raise ValueError(f"{cancel_at_s:g} s is before its arrival at {arrival_s:g} s")
        return cancel_at_s

    @model_validator(mode="after")
    def _consistent(self) -> "WorkloadJob":
        if self.batch_size < self.gpus:
            raise ValueError(f"batch_size {self.batch_size} gives a GPU no sample; use >= gpus")
        if self.gpu_indices is not None and len(set(self.gpu_indices)) != self.gpus:
            raise ValueError(f"gpu_indices must name {self.gpus} distinct GPUs")
        if self.flops is None or self.model_params is None:
            model_features(self.model)  # raises UnknownModel, a ValueError, for an unknown model
        return self

    @property
    def features(self) -> tuple[float, float]:
        """(flops, model_params): as given, else from the zoo."""
        if self.flops is not None and self.model_params is not None:
            return self.flops, self.model_params
        zoo = model_features(self.model)
        return self.flops or zoo.flops, self.model_params or zoo.model_params

    def step_time_s(self, truth: NodeTruth) -> float:
        """Seconds per iteration on unshared GPUs with loading removed: the batch over its
        curve's peak, or by `truth`'s formula before the job's own noise."""
        if self.curve is not None:
            return self.batch_size / self.gpus / self.curve.measured().peak
        flops, params = self.features
        return truth.step_time_s(
            batch_size_per_gpu=self.batch_size / self.gpus,
            flops=flops,
            model_params=params,
            gpus=self.gpus,
        )

    def cheapest_cost_s(self, truth: NodeTruth) -> float:
        """The fewest worker-seconds a sample of this job can ever take: a floor's input."""
        if self.curve is not None:
            return self.curve.measured().cheapest_cost_s
        return truth.cost(self.pipeline)


class Workload(_Strict):
    name: str = "workload"
    description: str = ""
    node: NodeConfig = NodeConfig(gpus=4, cpu_workers=18, max_jobs_per_gpu=1)  # frozen: shareable
    scheduler: dict[str, Any] = Field(default_factory=dict)
    truth: dict[str, Any] = Field(default_factory=dict)
    jobs: tuple[WorkloadJob, ...] = Field(min_length=1)
    # Live runs only (`stoker demo --workload`, bench/bench_live_gain.py): JPEGs in each
    # dataset the run makes, where the workload needs more than `DEFAULT_DATASET_IMAGES`
    # (workloads/live.py) for its epochs not to be mostly the workers' refill. The
    # simulator ignores it.
    dataset_images: int | None = Field(None, ge=1, le=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> "Workload":
        seen: set[str] = set()
        for index, job in enumerate(self.jobs):
            if job.id in seen:
                raise ValueError(f"jobs[{index}].id {job.id!r} is used twice")
            seen.add(job.id)
            if job.gpus > self.node.gpus:
                raise ValueError(
                    f"jobs[{index}] ({job.id}) needs {job.gpus} GPUs, the node has {self.node.gpus}"
                )
            for gpu in job.gpu_indices or ():
                if not 0 <= gpu < self.node.gpus:
                    raise ValueError(f"jobs[{index}].gpu_indices: no GPU {gpu} on the node")
        if self.truth.get("decoder_cores") and any(job.curve for job in self.jobs):
            raise ValueError(
                "a job with its own curve decodes on the CPU only: drop [truth] decoder_cores "
                "or the jobs' curves"
            )
        _overrides(NodeTruth, self.truth, "truth")
        _overrides(SchedulerConfig, self.scheduler, "scheduler")
        return self

    def node_truth(self) -> NodeTruth:
        return NodeTruth(**self.truth)

    def scheduler_config(self, policy: str) -> SchedulerConfig:
        """The file's `[scheduler]` settings under `policy`. Arrivals wait for their window
        unless it says `start_when_free = true`: a workload reproduces the paper's buffers
        (a live daemon starts a job that pauses no one at once)."""
        given = {"start_when_free": False, **self.scheduler}
        return SchedulerConfig(**{**given, "policy": policy})


def _overrides(cls: type, given: dict[str, Any], table: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)} - {"policy"}
    unknown = sorted(set(given) - known)
    if unknown:
        raise ValueError(
            f"[{table}] has unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


def parse_workload(data: dict[str, Any], source: str) -> Workload:
    """Validate a workload's data; WorkloadError names `source` and the bad field."""
    try:
        workload = Workload.model_validate(data)
        workload.node_truth()
        workload.scheduler_config("waa")
        return workload
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "workload"
        problems = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise WorkloadError(f"{source}: {where}", f"{first['msg']}{problems}") from None
    except WorkloadError as error:
        raise WorkloadError(f"{source}: {error.where}", error.message) from None
    except ValueError as error:  # invalid values in [scheduler], e.g. an unknown policy
        raise WorkloadError(source, str(error)) from None


def load_workload(path: Path) -> Workload:
    """Read and validate a workload TOML file."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise WorkloadError(str(path), "no such workload file") from None
    except tomllib.TOMLDecodeError as error:
        raise WorkloadError(str(path), f"not valid TOML: {error}") from None
    return parse_workload(data, str(path))


def dump_workload(workload: Workload) -> str:
    """TOML text that `load_workload` reads back to the same workload."""
    data = workload.model_dump(mode="json", exclude_none=True, exclude_defaults=False)
    return tomli_w.dumps(data)
