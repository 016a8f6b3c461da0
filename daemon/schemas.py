"""Request and reply bodies at the edges (REST and the CLI's files), validated by pydantic.

Field names are the ones DESIGN.md's machine-readable contracts fix. Unknown fields are
refused so that a misspelt key (`step_time` for `step_time_s`) is an error, not a silent
default.
"""

import difflib
import json
import re
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from allocator import (
    AllocationRequest,
    ContentionCurve,
    JobSpec,
    NodeSpec,
    ThroughputModel,
)
from allocator.types import DecodeMode
from scheduler.rates import job_spec
from tpm.zoo import model_features

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"  # no slashes, no leading dot
DEFAULT_BATCH_SIZE = 64  # a job's global batch unless it says (`stoker submit` too)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# Set by the launcher for every rank (the torchrun contract and the job's placement).
RESERVED_ENV = frozenset(
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
     "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS"}
)  # fmt: skip


class JobSubmission(BaseModel):
    """A training job: a command (a user's script, run with the stoker SDK or without), or a
    zoo model the built-in trainer trains. A command job needs name and command; a zoo job
    name, model and iterations; either runs on one GPU unless `gpus` says more, with a global
    batch of 64 unless `batch_size` says otherwise (as `stoker submit` does)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="letters, digits, . _ -; 64 at most")
    command: list[str] | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description='argv of one rank\'s process, no shell: ["python", "train.py", "--lr", "0.1"]',
    )
    workdir: str | None = Field(
        None, max_length=4096, description="absolute directory the command runs in"
    )
    env: dict[str, str] = Field(
        default_factory=dict, description="variables the command gets, beside stoker's own"
    )
    checkpoint_every_s: float | None = Field(
        None, gt=0.0, le=7 * 86400.0, description="the SDK's periodic checkpoint [600]"
    )
    model_params: float | None = Field(
        None, gt=0.0, description="a hint for the throughput model: the model's parameters"
    )
    flops: float | None = Field(
        None, gt=0.0, description="a hint: forward FLOPs (multiply-accumulates) per sample"
    )
    model: str | None = Field(
        None,
        max_length=64,
        validate_default=True,
        description="a zoo name, any case: [sm|md]ResnetN or [sm|md]VGGN, e.g. Resnet18, "
        "mdResnet12, vgg13",
    )
    batch_size: int = Field(
        DEFAULT_BATCH_SIZE,
        ge=1,
        le=65536,
        description="global batch (default 64); for a command job, the planner's hint until"
        " the job's heartbeats say",
    )
    # No upper bound here: the node's count is the bound, and its refusal names it.
    gpus: int = Field(1, ge=1, description="GPUs, one rank each (default 1)")
    iterations: int | None = Field(
        None,
        ge=1,
        le=10**9,
        validate_default=True,
        description="a zoo job's length; a command's, as a hint",
    )
    dataset: str | None = Field(None, max_length=4096, description="dataset folder")
    decode_mode: DecodeMode = "cpu"
    gpu_indices: list[int] | None = Field(None, description="pin to these GPUs")
    max_restarts: int | None = Field(None, ge=0, le=100, description="relaunches after a crash")
    resize: Literal["hot", "cold"] = Field(
        "hot",
        description="hot: the job rebuilds its loaders in place; cold: it exits after each "
        "pause's checkpoint and new processes start from it (not simulated agents)",
    )
    audit_samples: bool = Field(
        False, description="write every trained sample to <state>/jobs/<id>/audit/rank<k>.txt"
    )
    heartbeat_timeout_s: float | None = Field(
        None,
        ge=5.0,
        le=86400.0,
        description="how long its link to the daemon may be silent before it is taken for lost"
        " (the SDK's own thread speaks every second, whatever the script does); unset: the"
        " daemon's scheduler.heartbeat_timeout_s",
    )
    stall_timeout_s: float | None = Field(
        None,
        ge=10.0,
        le=30 * 86400.0,
        description="how long it may go without a step or a new phase before it is reported"
        " stalled (scheduler.stall_action says what follows); unset: the daemon's"
        " scheduler.stall_timeout_s",
    )
    time_limit_s: float | None = Field(
        None,
        gt=0.0,
        le=365 * 86400.0,
        description="the longest it may run, from its first start: then it checkpoints and"
        " ends, cancelled for its time limit (`stoker resume` goes on from there); unset: none",
    )
    continue_from: str | None = Field(
        None,
        pattern=NAME_PATTERN,
        description="the id of an ended job of yours (cancelled, failed or completed): this "
        "one starts from its newest checkpoint (model, optimizer, epoch and data position) "
        "instead of from scratch",
    )

    @field_validator("model")
    @classmethod
    def _a_command_or_a_zoo_model(cls, model: str | None, info: ValidationInfo) -> str | None:
        if (info.data.get("command") is None) == (model is None) and "command" in info.data:
            raise ValueError("give either command (your script) or model (a zoo job)")
        if model is not None:
            model_features(model)  # the zoo's one name rule; UnknownModel is a ValueError
        return model

    @field_validator("iterations")
    @classmethod
    def _a_zoo_job_has_a_length(cls, iterations: int | None, info: ValidationInfo) -> int | None:
        if iterations is None and info.data.get("model") is not None:
            raise ValueError("a zoo job needs its length")
        return iterations

    @field_validator("command")
    @classmethod
    def _an_argv(cls, command: list[str] | None) -> list[str] | None:
        if command is not None and (not command[0] or any("\0" in arg for arg in command)):
            raise ValueError("the first item is the program to run; no NUL characters")
        return command

    @field_validator("workdir")
    @classmethod
    def _an_existing_directory(cls, workdir: str | None) -> str | None:
        # Whether it exists is checked at submit, after the tenant's workdir_roots: a
        # refusal must not tell a tenant what exists outside them.
        if workdir is not None and not Path(workdir).is_absolute():
            raise ValueError(f"{workdir!r} is not an absolute path to a directory on the node")
        return workdir

    @field_validator("env")
    @classmethod
    def _plain_names(cls, env: dict[str, str]) -> dict[str, str]:
        for name in env:
            if not ENV_NAME.match(name):
                raise ValueError(f"{name!r}: letters, digits and _, not starting with a digit")
            if name.startswith("STOKER_") or name in RESERVED_ENV:
                raise ValueError(f"{name} is stoker's to set")
        return env

    @field_validator("gpu_indices")
    @classmethod
    def _pinned_gpus_match(cls, pinned: list[int] | None, info: ValidationInfo) -> list[int] | None:
        gpus = info.data.get("gpus")
        wrong = pinned is not None and (
            len(pinned) != gpus or len(set(pinned)) != gpus or min(pinned, default=0) < 0
        )
        if gpus is not None and wrong:
            raise ValueError(f"name {gpus} distinct GPUs, numbered from 0")
        return pinned


class CurveView(BaseModel):
    """The job's curve as the scheduler plans on it: its prior, moved by what its heartbeats
    measured (docs/daemon.md, "learned curves")."""

    step_time_s: float = Field(
        description=(
            "its GPUs' seconds per iteration, loading aside; on a node that trains on its"
            " CPUs, at the share of a core its training thread gets now"
        )
    )
    sample_cost_s: float = Field(
        description=(
            "c: a loader worker's seconds per sample without the node's contention (its"
            " heartbeats' loader_s is that at the contention then)"
        )
    )
    knee_sharpness: float | None = Field(
        description=(
            "how its samples/s bend below its GPUs' rate as workers near it (p of the smooth"
            " knee; lower bends earlier): measured, else the job's or the config's prior;"
            " null when none is known (the policy's default applies)"
        )
    )
    cpu_cost_s: float | None = Field(
        None,
        description=(
            "CPU seconds per sample, its training and loading together, as its heartbeats"
            " measured (protocol v5); null until three did"
        ),
    )
    core_share: float | None = Field(
        None,
        description=(
            "the share of a core its loader workers got when they could run: CPU seconds over"
            " CPU and run-queue seconds (1: a core each; below on contended CPUs); null until"
            " three heartbeats measured it"
        ),
    )
    overhead_s: float = Field(
        0.0,
        description=(
            "seconds per sample it waits whatever its workers: for the first batch of each"
            " pass (epoch or resize: workers starting, the pipeline filling), and where its"
            " workers have plenty to spare, to take each batch over; 0 until measured"
            " (protocol v6)"
        ),
    )


class JobView(BaseModel):
    id: str
    name: str
    tenant: str
    state: str
    model: str | None
    command: list[str] | None
    workdir: str | None = Field(None, description="the folder its command runs in")
    env_names: list[str] = Field(
        default_factory=list,
        description="the names of the variables its submit gave its command (their values,"
        " which may be secrets, stay with the job)",
    )
    continue_from: str | None = Field(
        None, description="the ended job whose newest checkpoint it started from"
    )
    lineage: list[str] = Field(
        default_factory=list,
        description="its history, oldest first: the jobs it goes on from (`stoker resume`,"
        " continue_from) and itself; its metrics are one series across them",
    )
    gpus: int
    batch_size: int
    iterations: int | None = Field(
        description=(
            "the iteration it ends at: its job file's `iterations`, else what its script's"
            " `job.epochs(n)` and first loader make (known once it trains); null: not known"
        )
    )
    iteration: int
    script_batch_size: int | None = Field(
        None,
        description=(
            "the samples a step of its script takes, all ranks, as its heartbeats say (the"
            " planner counts its work in them); null until they have said. A command's"
            " `batch_size` is only the planner's hint before that"
        ),
    )
    seconds_left: float | None = Field(
        None,
        description=(
            "while it runs: seconds to `iterations` at the pace of its last minute of"
            " heartbeats, as of the newest; null before it has 5 s of them"
        ),
    )
    gpu_indices: list[int]
    workers_per_gpu: int | None
    predicted_samples_per_s: float | None = Field(
        description="what the plan predicted for the job at its allocation"
    )
    measured_samples_per_s: float | None = Field(description="its newest heartbeat's rate")
    prediction_error: float | None = Field(
        None, description="measured / predicted - 1 (0.1: 10 % faster than predicted)"
    )
    curve: CurveView | None = Field(
        None, description="null for a job this daemon has not planned since it started"
    )
    pause_cost_s: float | None = Field(
        None,
        description=(
            "what a pause costs it as the plans weigh it: as its own pauses measured, else the"
            " median of what pauses of its kind (resized in place, or restarted) measured on"
            " this node, else scheduler.hot_pause_cost_s or default_pause_cost_s; null for a"
            " job this daemon has not planned since it started"
        ),
    )
    unmanaged: bool = Field(
        False,
        description="a command running without the stoker SDK: its workers never change and"
        " nothing of it is measured",
    )
    phase: str = Field(
        "",
        description="while it runs: what its script says it is doing: setup (from"
        " stoker.init() to its first training batch), training, evaluation (an evaluation"
        " loader's pass), saving (a checkpoint), or a phase of the script's own"
        " (job.phase(...)); empty when not said (a script without the SDK, or an older SDK)",
    )
    stalled: bool = Field(
        False,
        description="it runs, but made no step and entered no new phase for its stall limit"
        " (stall_timeout_s); the daemon's scheduler.stall_action says what follows",
    )
    exiting: bool = Field(
        False,
        description="it ended, and its processes run on (a script's work after its final step,"
        " or a cancelled, failed or lost job stopping): its GPUs stay its own until they exit",
    )
    exit_code: int | None = Field(
        None,
        description="once it has ended and its processes have exited: how they exited (0, the"
        " first failed rank's code, or minus the signal that ended it); null before, or when"
        " no daemon saw them exit (a process an earlier daemon started)",
    )
    failed_after_end: bool = Field(
        False,
        description="a completed job whose script failed after its final step (its save, its"
        " evaluation) or overran `finished_exit_s`: its training is done, its work is not;"
        " `reason` says what happened (a cancel of that work is no failure)",
    )
    restarts: int
    submitted_at: float
    started_at: float | None = Field(
        None, description="when it was first launched (seconds since the epoch); null: never"
    )
    ended_at: float | None = Field(
        None, description="when it reached its final state; null: it has not"
    )
    job_dir: str | None = Field(
        None,
        description="the job's folder on the node: its logs, `output/` (the SDK's"
        " `job.output_dir`, where its script may save) and `checkpoints/`",
    )
    reason: str = Field(
        "", description="why it is in its state: for a failed job, its exit code and stderr tail"
    )


class SampleUpload(BaseModel):
    """TPM samples as CSV text with a header, the columns `stoker tpm fit` reads."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["training", "loading"]
    csv: str = Field(min_length=1, max_length=1_000_000)
    source: str = Field("upload", max_length=200)


class NodeBody(BaseModel):
    """The node: loader processes C, decoder capacity K (samples/s), contention eta(D)."""

    model_config = ConfigDict(extra="forbid")

    cpu_workers: int = Field(ge=1, description="loader processes the node allows (C)")
    decoder_capacity: float = Field(0.0, ge=0.0, description="decoder samples/s; 0 = none")
    contention: list[tuple[float, float]] | None = Field(
        None, description="eta(D) as [processes, eta] points; omitted = from --tpm or none"
    )
    cpu_cores: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description=(
            "on a node without GPUs, the CPUs training and loading share: `lookahead`"
            " predicts on one budget of them once every job gives cpu_cost_s and core_share"
        ),
    )


class JobBody(BaseModel):
    """One job: either its predicted rates, or the features a TPM predicts them from."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    gpus: int = Field(ge=1)
    batch_size: int = Field(ge=1, description="global batch B")
    model_params: float = Field(gt=0.0)
    step_time_s: float | None = Field(None, gt=0.0, description="1/mu; or give flops + --tpm")
    sample_cost_s: float | None = Field(None, gt=0.0, description="c; or give pipeline + --tpm")
    device_sample_cost_s: float | None = Field(None, gt=0.0)
    flops: float | None = Field(None, gt=0.0, description="forward FLOPs per sample")
    pipeline: str | None = Field(None, min_length=1, description="preprocessing pipeline id")
    current_workers_per_gpu: int | None = Field(None, ge=1)
    remaining_samples: float | None = Field(
        None, ge=0.0, allow_inf_nan=False, description="work left; orders optimal's ties"
    )
    cpu_cost_s: float | None = Field(
        None,
        gt=0.0,
        allow_inf_nan=False,
        description="CPU seconds per sample, training and loading together (a CPU node)",
    )
    core_share: float | None = Field(
        None, gt=0.0, le=1.0, description="the share of a core its loader workers get now"
    )
    overhead_s: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="seconds per sample it waits that no worker shortens",
    )


class AllocationRequestBody(BaseModel):
    """What `stoker allocate` reads."""

    model_config = ConfigDict(extra="forbid")

    node: NodeBody
    jobs: list[JobBody]
    fair_floor: float = Field(0.8, ge=0.0, le=1.0)
    regrow_delay_s: float = Field(
        0.0,
        ge=0.0,
        allow_inf_nan=False,
        description="seconds from a finish to the plan after it (the daemon's completion window)",
    )

    def to_request(self, model: ThroughputModel | None = None) -> AllocationRequest:
        """Resolve missing rates through `model` and build the allocator's frozen request."""
        if self.node.contention is not None:
            curve = ContentionCurve.from_pairs(self.node.contention)
        elif model is not None:
            curve = ContentionCurve(model.contention_points())
        else:
            curve = ContentionCurve.contention_free()
        node = NodeSpec(
            cpu_workers=self.node.cpu_workers,
            contention=curve,
            decoder_capacity=self.node.decoder_capacity,
            cpu_cores=self.node.cpu_cores,
        )
        jobs = tuple(_job_spec(index, job, model) for index, job in enumerate(self.jobs))
        return AllocationRequest(
            node=node, jobs=jobs, fair_floor=self.fair_floor, regrow_delay_s=self.regrow_delay_s
        )


def _job_spec(index: int, job: JobBody, model: ThroughputModel | None) -> JobSpec:
    spec = job_spec(
        job,
        model,
        where=f"jobs[{index}]",
        no_model="give flops and pipeline and pass --tpm MODEL.json",
    )
    return replace(
        spec,
        current_workers_per_gpu=job.current_workers_per_gpu,
        remaining_samples=job.remaining_samples,
        cpu_cost_s=job.cpu_cost_s,
        core_share=job.core_share,
        overhead_s=job.overhead_s,
    )


def request_problem(
    loc: tuple[int | str, ...],
    kind: str,
    message: str,
    fields: Collection[str] = (),
    given: object = None,
) -> dict[str, str]:
    """One problem of a request body as the API reports it: the field, and a message with
    the fix where one is known (a misspelt name's likely one among the body's `fields`, a
    job's command given as one string, a variable's value `given` as a number)."""
    path = [str(part) for part in loc if part != "body"]
    if kind == "extra_forbidden" and len(path) == 1:
        known = difflib.get_close_matches(path[0], fields, n=1)
        if known:
            message += f"; did you mean {known[0]!r}?"
    elif kind == "list_type" and path == ["command"] and "command" in fields:
        message += ' (a list, one argument each, no shell: ["python", "train.py", "--lr", "0.1"])'
    elif kind == "string_type" and len(path) == 2 and path[0] == "env":
        message += f" (an environment holds text: quote it, {path[1]} = {json.dumps(str(given))})"
    return {"field": ".".join(path), "message": message}


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, each naming the field as `jobs[1].sample_cost_s`."""
    lines = []
    for problem in error.errors():
        path = ""
        for part in problem["loc"]:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        got = problem.get("input")
        shown = "" if isinstance(got, dict | list) else f" (got {got!r})"
        lines.append(f"{path or 'request'}: {problem['msg']}{shown}")
    return "; ".join(lines)
