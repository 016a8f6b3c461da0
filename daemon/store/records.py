"""The rows the store hands out, as frozen dataclasses: a job (`JobRecord`, its submitted
body, where its life stands and why) and an event of the append-only log (`EventRecord`).
`job_record` reads a row of the `jobs` table into the one.
"""

import json
import sqlite3
from dataclasses import dataclass, field
from typing import Any

from daemon.jobspec import JobSettings
from daemon.store.reasons import JobReason, decode
from scheduler.states import JobState


@dataclass(frozen=True)
class JobRecord:
    id: str
    tenant: str
    name: str
    spec: dict[str, Any]
    state: str
    submitted_at: float
    updated_at: float
    restarts: int
    checkpoint: str
    pid: int | None
    iteration: int = 0
    placement: tuple[int, ...] = ()
    agent_secret: str = field(default="", repr=False)  # its launch's; never shown
    total_iterations: int | None = None  # where it ends, as the core last said; None: unsaid
    script_batch_size: int | None = None  # the samples its script's steps take; None: unsaid
    started_at: float | None = None  # when it was first launched (wall clock); None: never
    ended_at: float | None = None  # when it reached its final state; None: it has not
    reason: JobReason | None = None  # why it is in its state, typed; None: nothing said

    @property
    def settings(self) -> JobSettings:
        """The submitted body, typed."""
        return JobSettings.from_spec(self.spec)

    @property
    def job_state(self) -> JobState:
        return JobState(self.state)


@dataclass(frozen=True)
class EventRecord:
    seq: int
    job_id: str | None
    at: float
    kind: str
    data: dict[str, Any]


def job_record(row: sqlite3.Row) -> JobRecord:
    """The job a row of the `jobs` table holds."""
    return JobRecord(
        id=row["id"],
        tenant=row["tenant"],
        name=row["name"],
        spec=json.loads(row["spec"]),
        state=row["state"],
        submitted_at=row["submitted_at"],
        updated_at=row["updated_at"],
        restarts=row["restarts"],
        checkpoint=row["checkpoint"],
        pid=row["pid"],
        iteration=row["iteration"],
        placement=tuple(json.loads(row["placement"])),
        agent_secret=row["agent_secret"],
        total_iterations=row["total_iterations"],
        script_batch_size=row["script_batch_size"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        reason=decode(row["reason"]),
    )
