"""The `jobs` table: a job's record from its submit (with the Idempotency-Key that made it)
through every change of its state, which must follow the one transition table, and why it
is in it (the `reason` column, typed: daemon/store/reasons.py), to the queries the API and
the dashboard page through (by tenant, state, name, id prefix, and the jobs that go on
from an ended one).
"""

import json
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from daemon.statelock import StoreError
from daemon.store.events import EventLog
from daemon.store.reasons import encode
from daemon.store.records import JobRecord, job_record
from daemon.store.schema import Transaction
from scheduler.states import FINAL_STATES, JobState, check_transition


class JobTable:
    """The jobs of the state file at `path`, on the store's connection; a submit's event
    goes to `events` in the same transaction."""

    def __init__(
        self, db: sqlite3.Connection, transaction: Transaction, events: EventLog, path: Path
    ) -> None:
        self._db = db
        self._transaction = transaction
        self._events = events
        self.path = path

    def idempotent(self, tenant: str, key: str) -> tuple[str, str] | None:
        """(job id, body digest) of the submit `tenant` made with Idempotency-Key `key`."""
        row = self._db.execute(
            "SELECT job_id, body_digest FROM idempotency WHERE tenant = ? AND key = ?",
            (tenant, key),
        ).fetchone()
        return (str(row[0]), str(row[1])) if row else None

    def add_job(self, record: JobRecord, idempotency: tuple[str, str] | None = None) -> None:
        """Commit a new job, with the (key, body digest) of its submit when it had one."""
        with self._transaction():
            if idempotency is not None:
                self._db.execute(
                    "INSERT INTO idempotency (tenant, key, body_digest, job_id)"
                    " VALUES (?, ?, ?, ?)",
                    (record.tenant, *idempotency, record.id),
                )
            self._db.execute(
                "INSERT INTO jobs (id, tenant, name, spec, state, submitted_at, updated_at,"
                " restarts, checkpoint, pid) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.id,
                    record.tenant,
                    record.name,
                    json.dumps(record.spec),
                    record.state,
                    record.submitted_at,
                    record.updated_at,
                    record.restarts,
                    record.checkpoint,
                    record.pid,
                ),
            )
            self._events.write_event(
                record.id, record.submitted_at, "submitted", {"tenant": record.tenant}
            )

    def update_job(self, job_id: str, at: float, **fields: object) -> None:
        """Set some of `state`, `restarts`, `checkpoint`, `iteration`, `pid`, `placement` (a
        sequence of indices), `agent_secret`, `total_iterations`, `script_batch_size` and
        `reason` (a `JobReason`, or None: nothing said) on one job, in one UPDATE."""
        allowed = {
            "state", "restarts", "checkpoint", "iteration", "pid", "placement", "agent_secret",
            "total_iterations", "script_batch_size", "reason",
        }  # fmt: skip
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not job columns: {sorted(unknown)}")
        if "placement" in fields:
            fields["placement"] = json.dumps(list(fields["placement"]))  # type: ignore[call-overload]
        if "reason" in fields:
            fields["reason"] = encode(fields["reason"])
        columns = ", ".join(f"{name} = ?" for name in fields)  # names checked above
        stamps = ""  # a first run and an end are kept, when the state says so
        if "state" in fields:
            new = JobState(str(fields["state"]))
            if new in (JobState.STARTING, JobState.RUNNING):  # launched: it runs from then
                stamps = ", started_at = COALESCE(started_at, ?)"
            elif new.final:
                stamps = ", ended_at = COALESCE(ended_at, ?)"
        with self._transaction():
            if "state" in fields:
                self._check_transition(job_id, JobState(str(fields["state"])))
            self._db.execute(
                f"UPDATE jobs SET {columns}, updated_at = ?{stamps} WHERE id = ?",
                (*fields.values(), at, *([at] if stamps else []), job_id),
            )

    def _check_transition(self, job_id: str, new: JobState) -> None:
        """Every lifecycle change goes through the one transition table: IllegalTransition
        for any other, and nothing is written. Setting the state a job has is no change."""
        row = self._db.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise StoreError(f"no job {job_id!r} in {self.path}")
        current = JobState(row["state"])
        if current is not new:
            check_transition(job_id, current, new)

    def job(self, job_id: str) -> JobRecord | None:
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return None if row is None else job_record(row)

    def jobs_page(
        self,
        tenant: str | None,
        after: tuple[float, str] | None,
        limit: int,
        *,
        states: Sequence[str] = (),
        name: str | None = None,
    ) -> list[JobRecord]:
        """Up to `limit` jobs (-1: all), oldest first, after the job at (submitted_at, id)
        `after`; only `tenant`'s when given, only those in `states` when any, only those
        called `name` when given."""
        clauses: list[str] = ["1"]
        arguments: list[object] = []
        if tenant is not None:
            clauses.append("tenant = ?")
            arguments.append(tenant)
        if states:
            clauses.append(f"state IN ({', '.join('?' * len(states))})")
            arguments += list(states)
        if name is not None:
            clauses.append("name = ?")
            arguments.append(name)
        if after is not None:
            clauses.append("(submitted_at, id) > (?, ?)")
            arguments += list(after)
        rows = self._db.execute(
            f"SELECT * FROM jobs WHERE {' AND '.join(clauses)} ORDER BY submitted_at, id LIMIT ?",
            (*arguments, limit),
        )  # the clauses are the fixed strings above; every value is a parameter
        return [job_record(row) for row in rows]

    def jobs(self, tenant: str | None = None) -> list[JobRecord]:
        """Every job, oldest first; only `tenant`'s when given."""
        return self.jobs_page(tenant, None, limit=-1)

    def shown_jobs(self, tenant: str | None, ended: int) -> tuple[list[JobRecord], int]:
        """Every job not ended and the newest `ended` that have, oldest first (only
        `tenant`'s when given); and how many ended jobs that leaves out."""
        final = tuple(sorted(state.value for state in FINAL_STATES))
        marks = ", ".join("?" * len(final))
        mine = "(? IS NULL OR tenant = ?)"
        live = self._db.execute(
            f"SELECT * FROM jobs WHERE state NOT IN ({marks}) AND {mine}", (*final, tenant, tenant)
        ).fetchall()
        newest = self._db.execute(
            f"SELECT * FROM jobs WHERE state IN ({marks}) AND {mine}"
            " ORDER BY submitted_at DESC, id DESC LIMIT ?",
            (*final, tenant, tenant, ended),
        ).fetchall()
        (count,) = self._db.execute(
            f"SELECT COUNT(*) FROM jobs WHERE state IN ({marks}) AND {mine}",
            (*final, tenant, tenant),
        ).fetchone()
        shown = sorted(
            map(job_record, [*live, *newest]), key=lambda job: (job.submitted_at, job.id)
        )
        return shown, int(count) - len(newest)

    def ids_named(self, name: str, tenant: str | None, limit: int = 3) -> list[str]:
        """The ids of the newest `limit` jobs called `name`, newest first; only `tenant`'s
        when given."""
        rows = self._db.execute(
            "SELECT id FROM jobs WHERE name = ? AND (? IS NULL OR tenant = ?)"
            " ORDER BY submitted_at DESC LIMIT ?",
            (name, tenant, tenant, limit),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def ids_starting(self, prefix: str, tenant: str | None, limit: int = 3) -> list[str]:
        """The ids of up to `limit` jobs whose id starts with `prefix` (four characters at
        least), newest first; only `tenant`'s when given."""
        if len(prefix) < 4:
            return []
        rows = self._db.execute(
            "SELECT id FROM jobs WHERE substr(id, 1, ?) = ? AND (? IS NULL OR tenant = ?)"
            " ORDER BY submitted_at DESC LIMIT ?",
            (len(prefix), prefix, tenant, tenant, limit),
        ).fetchall()
        return [str(row[0]) for row in rows]

    def continued_by(self, job_id: str) -> list[JobRecord]:
        """The jobs submitted to go on from `job_id` (`continue_from`), newest first."""
        rows = self._db.execute(
            "SELECT * FROM jobs WHERE json_extract(spec, '$.continue_from') = ?"
            " ORDER BY submitted_at DESC, id DESC",
            (job_id,),
        )
        return [job_record(row) for row in rows]
