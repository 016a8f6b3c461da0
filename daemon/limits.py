"""The `[limits]` section of the daemon's settings: what one client, tenant or job may take
of the node before it is refused, cut or slowed, so that it never stalls the others
(docs/security.md). Each limit is enforced where its resource is handed out."""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class Limits(BaseModel):
    """Bounds on connections, streams, metrics, submits and a job's processes."""

    model_config = ConfigDict(extra="forbid")

    header_timeout_s: float = Field(
        10.0, gt=0.0, le=300.0,
        description="a connection has this long to send a whole request head; then it is closed",
    )  # fmt: skip
    idle_timeout_s: float = Field(
        5.0, gt=0.0, le=300.0,
        description="a kept-alive connection with no request in flight is closed after this",
    )  # fmt: skip
    max_connections: int = Field(
        1024, ge=8,
        description="open HTTP connections on the node; past it a new one is closed at once"
        " (kept under the daemon's open-file limit, which it raises to the hard limit at start)",
    )  # fmt: skip
    max_connections_per_client: int = Field(
        64, ge=1, description="open HTTP connections from one client address"
    )
    max_follows_per_tenant: int = Field(
        8, ge=1, description="log follows (`stoker logs -f`, ?follow=true) a tenant may hold open"
    )
    max_follows: int = Field(64, ge=1, description="open log follows on the node, all tenants")
    max_metric_series_per_job: int = Field(
        256, ge=1,
        description="distinct metric names one job may report; points of further names are"
        " dropped, counted, and said once in the job's events",
    )  # fmt: skip
    metrics_per_s: float = Field(
        20.0, gt=0.0, description="metrics messages a job may send per second (a burst of 10x)"
    )
    submits_per_minute: int = Field(
        600, ge=1,
        description="submits one tenant may make a minute (all at once, then one per"
        " 60/this seconds); past it a 429 with Retry-After",
    )  # fmt: skip
    job_cgroups: Literal["auto", "off"] = Field(
        "auto",
        description="auto: each job's processes in a cgroup of their own (cgroup v2, where the"
        " daemon may create one), killed whole on cancel and end; off: its process group only",
    )
    job_max_pids: int | None = Field(
        4096, ge=16, description="processes and threads one job may have (its cgroup's pids.max)"
    )
    job_max_memory_bytes: int | None = Field(
        None, ge=2**26, description="memory one job may use (cgroup memory.max); unset: no cap"
    )
