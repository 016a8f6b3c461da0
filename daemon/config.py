"""The daemon's settings: one validated object built at start-up and passed down.

Sources, strongest first: `stoker serve` flags, `STOKER_*` environment variables
(`STOKER_PORT=9000`, `STOKER_NODE__CPU_WORKERS=12`), the TOML file given with `--config`,
then these defaults. pydantic-settings reads the environment and the file; a bad key or
value fails start-up with a message naming it (`load_config`).
"""

import dataclasses
import difflib
import os
import pwd
import shutil
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from daemon.limits import Limits
from scheduler.config import SchedulerConfig

TASKSET = "taskset"  # util-linux: starts a command on a set of CPUs (`node.cpu_sets`)


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the key and what to change."""


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


class DaemonConfig(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="STOKER_", env_nested_delimiter="__", extra="forbid"
    )

    state_dir: Path = Path(".stoker")
    host: str = "127.0.0.1"
    port: int = Field(8470, ge=0, le=65535)
    agent_mode: Literal["process", "simulate"] = Field(
        "process",
        description="process: a zoo job runs the built-in trainer, an SDK script (agents/zoo.py); "
        "simulate: `stoker agent --simulate`, which speaks the protocol and trains nothing",
    )
    tpm: Path | None = Field(None, description="a fitted model (stoker tpm fit); unset = built-in")
    tokens: dict[str, str] = Field(
        default_factory=dict, description="tenant name -> bearer token; admin is `admin`"
    )
    tenants: dict[str, TenantPolicy] = Field(
        default_factory=dict,
        description="tenant name -> its weight, quotas and allowed folders (TenantPolicy)",
    )
    unix_users: dict[str, str] = Field(
        default_factory=dict,
        description="tenant name -> the unix user its jobs run as (the daemon must run as "
        "root); a tenant without one runs its jobs as the daemon's own user",
    )
    heartbeat_s: float = Field(1.0, gt=0.0)
    max_restarts: int = Field(3, ge=0, description="relaunches of a job whose agent died")
    shutdown_grace_s: float = Field(
        10.0, ge=0.0, description="on SIGTERM, wait this long for agents' checkpoints"
    )
    reattach_timeout_s: float = Field(
        10.0, gt=0.0, description="after a restart, wait this long for a running agent's hello"
    )
    agent_secrets: Literal["required", "when-sent"] = Field(
        "required",
        description="required: an agent's every message carries its launch's secret, else it "
        "is refused; when-sent: an agent of an older SDK, which sends none, is taken at its "
        "word until it has sent one (docs/security.md)",
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    max_streams_per_tenant: int = Field(
        8, ge=1, description="open /v1/events/stream connections a tenant may hold"
    )
    max_streams: int = Field(64, ge=1, description="open event streams on the node, all tenants")
    finished_exit_s: float = Field(
        600.0,
        gt=0.0,
        description="how long a job's processes may go on after its final step (an evaluation,"
        " saving the model) before the daemon stops them; jobs queued for its GPUs wait",
    )
    job_log_max_bytes: int = Field(
        64 * 2**20,
        ge=4096,
        description="a job's stdout or stderr file (per rank) is cut past this; the cut part "
        "is kept as <name>.1 (its last this many bytes), so logs take at most twice this per"
        " stream and rank, plus what a job writes in a second",
    )
    tpm_refit_s: float = Field(600.0, gt=0.0, description="refit this often when samples came in")
    tpm_sample_every_s: float = Field(
        10.0, gt=0.0, description="one training sample per job from heartbeats this often"
    )
    node: NodeConfig = NodeConfig()
    scheduler: SchedulerConfig = SchedulerConfig()  # scheduler/config.py: the one set
    simulated: SimulatedAgents = SimulatedAgents()
    training: TrainingSettings = TrainingSettings()
    limits: Limits = Limits()  # daemon/limits.py: what one client, tenant or job may take

    @field_validator("unix_users")
    @classmethod
    def _users_exist(cls, users: dict[str, str]) -> dict[str, str]:
        for tenant, name in users.items():
            try:
                pwd.getpwnam(name)
            except KeyError:
                raise ValueError(
                    f"{tenant}: no unix user {name!r} on this host; create it or name another"
                ) from None
        if users and os.geteuid() != 0:
            raise ValueError("jobs run as other users only when the daemon runs as root")
        return users

    @field_validator("tokens")
    @classmethod
    def _tokens_are_distinct(cls, tokens: dict[str, str]) -> dict[str, str]:
        """Each tenant's token is its own and not empty: a token two tenants share is the
        first's (the admin's, say) to whoever holds it."""
        for tenant, token in tokens.items():
            if not token.strip():
                raise ValueError(f"{tenant}: an empty token; give it a secret of its own")
        holders: dict[str, list[str]] = {}
        for tenant, token in tokens.items():
            holders.setdefault(token, []).append(tenant)
        shared = [names for names in holders.values() if len(names) > 1]
        if shared:
            names = " and ".join(shared[0])
            raise ValueError(
                f"{names} have the same token; each tenant needs its own (`python -c 'import"
                " secrets; print(secrets.token_urlsafe(32))'` makes one)"
            )
        return tokens

    @model_validator(mode="after")
    def _heartbeats_come_before_the_timeout(self) -> "DaemonConfig":
        """A job is lost after `scheduler.heartbeat_timeout_s` without a heartbeat: agents
        that beat less often would all be lost."""
        timeout = self.scheduler.heartbeat_timeout_s
        if timeout <= 2 * self.heartbeat_s:
            raise ValueError(
                f"scheduler.heartbeat_timeout_s ({timeout:g} s) must be more than twice"
                f" heartbeat_s ({self.heartbeat_s:g} s), else every job is taken as lost;"
                " raise the one or lower the other"
            )
        return self

    @model_validator(mode="after")
    def _tenants_have_tokens(self) -> "DaemonConfig":
        """A tenant named in `unix_users` or `tenants` has a token: a misspelt name would
        otherwise apply to no one, and its jobs run as root or without their quota."""
        known = sorted(self.tokens) or ["admin"]  # no tokens: the admin's, in the state dir
        for table, names in (("unix_users", self.unix_users), ("tenants", self.tenants)):
            for name in names:
                if name not in known:
                    close = difflib.get_close_matches(name, known, n=1)
                    raise ValueError(
                        f"{table}.{name}: no tenant {name!r} has a token (`tokens` names "
                        f"{', '.join(known)})" + (f"; did you mean {close[0]!r}?" if close else "")
                    )
        return self

    def tenant(self, name: str) -> TenantPolicy:
        """`name`'s policy: its `[tenants.<name>]` table, else the defaults."""
        return self.tenants.get(name) or TenantPolicy()

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file is `model_config["toml_file"]`, set by load_config on a subclass.
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls))


# How pydantic says a key names no setting: of a model's, and of a dataclass's.
_UNKNOWN_KEY = frozenset({"extra_forbidden", "unexpected_keyword_argument"})
# `STOKER_` variables that are not settings: the CLI's, and those a job's launch gives the
# SDK (docs/sdk.md). Any other is a setting, or a misspelt one.
# fmt: off
NOT_SETTINGS = frozenset(f"STOKER_{name}" for name in (
    "URL", "TOKEN", "CACHE",  # the CLI's, and the model features' cache
    "JOB_ID", "JOB_DIR", "OUTPUT_DIR", "CHECKPOINT_DIR", "CHECKPOINT_EVERY_S", "ATTEMPT",
    "CONTROL", "GEN", "WORKERS", "HEARTBEAT_S", "AUDIT_DIR", "RESIZE", "PAUSED_AT", "DECODER",
    "DECODE_MODE", "DECODER_SHARE", "CPU_SLOTS", "PROTOCOL", "AGENT_SECRET", "CONTINUE_FROM",
))
# fmt: on


def load_config(path: Path | None = None, **overrides: object) -> DaemonConfig:
    """Settings from flags (`overrides`, None meaning unset), env and `path`."""
    environ = os.environ
    given = {key: value for key, value in overrides.items() if value is not None}
    if path is not None and not path.is_file():
        raise ConfigError(f"--config: no file at {path}")
    _refuse_unknown_variables(environ)

    class FromFile(DaemonConfig):
        model_config = SettingsConfigDict(toml_file=path)

    try:
        config = DaemonConfig.model_validate(FromFile(**given).model_dump())  # type: ignore[arg-type]
    except ValidationError as error:  # each one, so that one start names every mistake
        said = dict.fromkeys(_explain(each, environ, path) for each in error.errors())
        raise ConfigError("\n".join(said)) from None
    except ValueError as error:  # a TOML file that does not parse
        raise ConfigError(f"--config {path}: {error}") from None
    return config if path is None else _paths_from(path, config)


def _paths_from(path: Path, config: DaemonConfig) -> DaemonConfig:
    """`config` with the relative paths of the files its file at `path` names (`tpm`,
    `training.default_dataset`) made that file's folder's, as a job file's are, not the
    folder the daemon happens to start in; one that a flag or a variable gave instead stays
    as given. `state_dir` stays the start folder's, where the CLI looks for `.stoker`."""
    written = tomllib.loads(path.read_text())
    here = path.resolve().parent

    def placed(table: Mapping[str, object], key: str, value: Path | None) -> Path | None:
        raw = table.get(key)
        if isinstance(raw, str) and value == Path(raw) and not value.is_absolute():
            return here / value
        return value

    training = written.get("training")
    dataset = placed(training if isinstance(training, dict) else {}, "default_dataset",
                     config.training.default_dataset)  # fmt: skip
    return config.model_copy(
        update={
            "tpm": placed(written, "tpm", config.tpm),
            "training": config.training.model_copy(update={"default_dataset": dataset}),
        }
    )


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """A `STOKER_` variable that names no setting is a misspelt one: pydantic-settings would
    pass over it, and the daemon start without what its operator set."""
    settings = sorted(DaemonConfig.model_fields)
    for name in sorted(environ):  # pydantic-settings reads them in any case
        if not name.upper().startswith("STOKER_") or name.upper() in NOT_SETTINGS:
            continue
        key = name[len("STOKER_") :].lower().split("__", 1)[0]
        if key not in settings:
            nested = _nested(key)
            if nested is not None:  # STOKER_NODE_CPU_WORKERS
                hint = f"; did you mean STOKER_{nested.upper()}? (a section's setting takes __)"
            else:
                close = difflib.get_close_matches(key, settings, n=1)
                hint = f"; did you mean STOKER_{close[0].upper()}?" if close else ""
            raise ConfigError(f"{name}: no daemon setting {key!r} (docs/daemon.md){hint}")


def _nested(key: str) -> str | None:
    """`section__setting` for a `key` that joins a section and one of its settings with a
    single underscore (`node_cpu_workers`); None when it does not."""
    for section, field in DaemonConfig.model_fields.items():
        inner = _fields(field.annotation)
        rest = key.removeprefix(section + "_")
        if inner and rest != key and rest in inner:
            return f"{section}__{rest}"
    return None


def _explain(error: ErrorDetails, environ: Mapping[str, str], path: Path | None) -> str:
    """A setting's error, named as the operator set it: the variable when the environment
    did (`STOKER_NODE__CPU_WORKERS`), else the key and the file; for a key that names no
    setting, the one it may have meant."""
    loc = tuple(str(part) for part in error["loc"])
    joined = "STOKER_" + "__".join(part.upper() for part in loc)
    variable = next((name for name in environ if name.upper() == joined), None)
    message = error["msg"].removeprefix("Value error, ")  # ours name their key
    if error["type"] in _UNKNOWN_KEY:
        close = _close_key(loc)
        meant = "STOKER_" + "__".join(p.upper() for p in (*loc[:-1], close)) if close else ""
        message = "not a setting"
        if close:
            message += f"; did you mean {meant if variable else repr(close)}?"
    if variable is not None:
        return f"{variable}: {message}"
    source = f" (in {path})" if path else ""
    where = ".".join(loc)
    return f"{where}{source}: {message}" if where else message + source


def _close_key(loc: tuple[str, ...]) -> str | None:
    """The setting the last part of `loc` may have meant, among its section's (a pydantic
    model's fields, or a dataclass's: `scheduler` is the core's `SchedulerConfig`)."""
    section: object = DaemonConfig
    for part in loc[:-1]:
        known = _fields(section)
        section = known.get(part) if known is not None else None
    known = _fields(section)
    if not known:
        return None
    close = difflib.get_close_matches(loc[-1], sorted(known), n=1)
    return close[0] if close else None


def _fields(section: object) -> dict[str, object] | None:
    """A config section's fields and their types; None for a value that has none."""
    if isinstance(section, type) and issubclass(section, BaseModel):
        return {name: field.annotation for name, field in section.model_fields.items()}
    if isinstance(section, type) and dataclasses.is_dataclass(section):
        return dict(typing.get_type_hints(section))
    return None


def with_scheduler(config: DaemonConfig, **changes: object) -> DaemonConfig:
    """`config` with some scheduler settings changed (`stoker serve --policy`); a bad value
    raises InvalidRequest naming it."""
    scheduler = dataclasses.replace(config.scheduler, **changes)  # type: ignore[arg-type]
    return config.model_copy(update={"scheduler": scheduler})
