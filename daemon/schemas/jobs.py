"""A job's submit body (`JobSubmission`, POST /v1/jobs and a job TOML): a command or a zoo
model, with the checks that run before the daemon sees it (names, argv, variables, pinned
GPUs). Unknown fields are refused so that a misspelt key (`step_time` for `step_time_s`) is
an error, not a silent default.
"""

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from allocator.bounds import MAX_KNEE_SHARPNESS, MIN_KNEE_SHARPNESS
from allocator.types import DecodeMode
from daemon.schemas.planning import ProfileBody
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
    knee_sharpness: float | None = Field(
        None,
        ge=MIN_KNEE_SHARPNESS,
        le=MAX_KNEE_SHARPNESS,
        allow_inf_nan=False,
        description="a hint: p of its knee, as profiled (docs/allocator.md); the planner's"
        " until its heartbeats measure their own",
    )
    profile: ProfileBody | None = Field(
        None,
        description="a hint: its measured curve (samples/s per GPU at a few workers per GPU,"
        " the job alone); the planner's prior, fitted, until its heartbeats say",
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
