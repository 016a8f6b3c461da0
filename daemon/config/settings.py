"""`DaemonConfig`, the one validated settings object built at start-up and passed down:
the daemon's top-level settings, one field per section (sections.py, the scheduler's
`SchedulerConfig`, `Limits`), and the checks that span them (distinct tokens, tenants that
have a token, heartbeats that come before the timeout). Where its values come from is
`pydantic-settings`' business, set up here and driven by `load_config` (loading.py).
"""

import difflib
import os
import pwd
from dataclasses import replace
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from daemon.config.sections import NodeConfig, SimulatedAgents, TenantPolicy, TrainingSettings
from daemon.limits import Limits
from scheduler.config import SchedulerConfig


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
    def _one_finished_exit_s(self) -> "DaemonConfig":
        """`finished_exit_s`, read at the file's top as ever, is the core's to time
        (`SchedulerConfig.finished_exit_s`): the two are kept one, the top's where given."""
        if "finished_exit_s" in self.model_fields_set:
            self.scheduler = replace(self.scheduler, finished_exit_s=self.finished_exit_s)
        else:
            self.finished_exit_s = self.scheduler.finished_exit_s
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
