"""The daemon's settings sections, each a table of the TOML file: `[node]` (what the node
offers), `[simulated]` (how simulated agents train), `[tenants.<name>]` (what one tenant
may ask) and `[training]` (how the built-in trainer's jobs train). `DaemonConfig`
(settings.py) holds one of each.
"""

import shutil
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

TASKSET = "taskset"  # util-linux: starts a command on a set of CPUs (`node.cpu_sets`)


class NodeConfig(BaseModel):
    """What the node offers. With no GPUs, `cpu_slots` training slots stand in for them.
    What is left unset is chosen from the host (daemon/host.py; `stoker node` shows it)."""

    model_config = ConfigDict(extra="forbid")

    gpus: int | None = Field(None, ge=0, description="GPUs; unset = detect (NVML)")
    cpu_slots: int | None = Field(
        None, ge=1, description="training slots on a node without GPUs; unset = one per 4 CPUs"
    )
    cpu_workers: int | None = Field(
        None,
        ge=1,
        description="loader processes the node allows (C); unset = the CPUs this daemon may "
        "use (affinity, cgroup quota) less those its training processes need",
    )
    max_jobs_per_gpu: int = Field(2, ge=1, description="jobs that may share one GPU")
    cpu_sets: bool = Field(
        False,
        description="pin each job (its ranks and their loader workers) to its slots' share of "
        "the CPUs, so jobs stop sharing cores (`taskset`, from util-linux); off = the kernel "
        "spreads every job over all of them",
    )
    decoder_capacity: float = Field(
        0.0, ge=0.0, description="samples/s of the node's JPEG decoder device; 0 = none"
    )
    decoder_endpoint: str | None = Field(
        None,
        description="the decoder service (`stoker decoder serve`); unset = "
        "ipc://<state_dir>/decoder.sock",
    )

    @field_validator("cpu_sets")
    @classmethod
    def _taskset_found(cls, cpu_sets: bool) -> bool:
        if cpu_sets and shutil.which(TASKSET) is None:
            raise ValueError(
                f"needs `{TASKSET}` on the PATH (util-linux: apt-get install util-linux); "
                "install it, or set node.cpu_sets = false"
            )
        return cpu_sets


class SimulatedAgents(BaseModel):
    """How `stoker agent --simulate` trains: at the rates the TPM predicts for the job (its
    step time, and its loading rate with the workers it has), every duration multiplied by
    `time_scale` (0.1 runs ten times faster than the predicted job)."""

    model_config = ConfigDict(extra="forbid")

    time_scale: float = Field(1.0, gt=0.0, le=100.0)
    pause_s: float = Field(0.2, ge=0.0, description="checkpoint time")
    resume_s: float = Field(0.2, ge=0.0, description="worker restart time")


class TenantPolicy(BaseModel):
    """What one tenant may ask of the node (`[tenants.<name>]`; a tenant not listed gets
    these defaults)."""

    model_config = ConfigDict(extra="forbid")

    weight: float = Field(
        1.0, gt=0.0, description="its share of the node when jobs of several tenants wait"
    )
    max_queued_jobs: int = Field(
        1000, ge=0, description="its jobs waiting to run at once; a submit past it is a 429"
    )
    max_running_jobs: int | None = Field(
        None, ge=1, description="its jobs placed at once; the rest wait their turn; unset: any"
    )
    dataset_roots: list[Path] | None = Field(
        None, description="folders its jobs' datasets must lie in; unset: any the daemon reads"
    )
    workdir_roots: list[Path] | None = Field(
        None,
        description="folders its command jobs' workdir must lie in, checked at submit on the"
        " folder it resolves to, which every launch then runs in, entered as the job's user;"
        " unset: any folder that user may enter (under `unix_users`), else any",
    )

    @field_validator("dataset_roots", "workdir_roots")
    @classmethod
    def _absolute(cls, roots: list[Path] | None) -> list[Path] | None:
        if roots is not None and not all(root.is_absolute() for root in roots):
            raise ValueError("every root must be an absolute path")
        return roots


class TrainingSettings(BaseModel):
    """How `process` agents train."""

    model_config = ConfigDict(extra="forbid")

    default_dataset: Path | None = Field(
        None, description="for jobs that name no dataset (a `stoker dataset make` folder)"
    )
    image_size: int | None = Field(
        None, ge=16, le=1024, description="crop size fed to the model; unset = the dataset's"
    )
    seed: int = 0
