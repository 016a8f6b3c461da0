"""The daemon's state on disk: SQLite in WAL mode at `<state dir>/stoker.db` (DESIGN.md,
"Persistence").

Jobs, their append-only events and the allocation plans. Every write commits before it
returns, so a REST reply never acknowledges what a crash could lose. SQL is parameterised;
JSON columns hold what the REST layer shows. One connection, used by the daemon's one
writer task only (STYLE.md, "One writer").
"""

import json
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from daemon import reported
from daemon.jobspec import JobSettings
from daemon.statelock import StoreError
from scheduler.states import FINAL_STATES, JobState, check_transition

SCHEMA_VERSION = 8
# Submits' Idempotency-Keys, per tenant: the job each made and a digest of its body.
_IDEMPOTENCY = """
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    body_digest TEXT NOT NULL,
    job_id TEXT NOT NULL,
    PRIMARY KEY (tenant, key)
) WITHOUT ROWID;
"""
# The secret of each job's current launch, which its agent's messages must carry.
_AGENT_SECRETS = "ALTER TABLE jobs ADD COLUMN agent_secret TEXT NOT NULL DEFAULT '';"
# Where each job ends as the core last said (its job file's length, else its script's), so
# that a job that ended before a restart still shows "of N".
_LENGTHS = "ALTER TABLE jobs ADD COLUMN total_iterations INTEGER;"
# The samples a step of each job's script takes, as its heartbeats last said.
_BATCHES = "ALTER TABLE jobs ADD COLUMN script_batch_size INTEGER;"
# When each job first ran and when it ended (for accounting), taken from its state events
# for the jobs a file of an earlier version holds.
_STARTS = """
ALTER TABLE jobs ADD COLUMN started_at REAL;
UPDATE jobs SET started_at = (
    SELECT min(at) FROM job_events WHERE job_events.job_id = jobs.id AND kind = 'state'
    AND json_extract(data, '$.to') IN ('starting', 'running')
);
"""
_ENDS = """
ALTER TABLE jobs ADD COLUMN ended_at REAL;
UPDATE jobs SET ended_at = (
    SELECT max(at) FROM job_events WHERE job_events.job_id = jobs.id AND kind = 'state'
    AND json_extract(data, '$.to') = jobs.state
) WHERE state IN ('completed', 'failed', 'cancelled');
"""
# What each version added to the one before (1 is the first): run in order to migrate.
_MIGRATIONS = {
    2: reported.SCHEMA, 3: _IDEMPOTENCY, 4: _AGENT_SECRETS, 5: _LENGTHS, 6: _BATCHES,
    7: _STARTS, 8: _ENDS,
}  # fmt: skip
# The column each ALTER adds: a file that has it already skips the ALTER (not idempotent).
_ADDS = {
    4: "agent_secret", 5: "total_iterations", 6: "script_batch_size", 7: "started_at",
    8: "ended_at",
}  # fmt: skip

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    spec TEXT NOT NULL,            -- the submitted body, JSON
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,    -- wall clock, seconds since the epoch
    updated_at REAL NOT NULL,
    restarts INTEGER NOT NULL DEFAULT 0,
    checkpoint TEXT NOT NULL DEFAULT '',
    iteration INTEGER NOT NULL DEFAULT 0,  -- at the last checkpoint or the end
    placement TEXT NOT NULL DEFAULT '[]',  -- GPU (or CPU slot) indices, JSON, while placed
    pid INTEGER                    -- the agent process, while one runs
);
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs (tenant, submitted_at);
CREATE TABLE IF NOT EXISTS job_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT,                   -- NULL for node-wide events (plans)
    at REAL NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS job_events_by_job ON job_events (job_id, seq);
CREATE TABLE IF NOT EXISTS plans (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    gen INTEGER NOT NULL,          -- the scheduler's; counts again from 1 after a restart
    at REAL NOT NULL,
    policy TEXT NOT NULL,
    allocations TEXT NOT NULL      -- {job_id: {workers_per_gpu, decoder_share, ...}}
);
CREATE TABLE IF NOT EXISTS tpm_samples (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,            -- training | loading
    at REAL NOT NULL,
    source TEXT NOT NULL,          -- who measured it: an upload, or telemetry:<job>
    row TEXT NOT NULL              -- {column: value} as `stoker tpm fit` reads them
);
CREATE TABLE IF NOT EXISTS tpm_models (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    model TEXT NOT NULL,           -- FittedTPM.to_json()
    report TEXT NOT NULL
);
"""


class StateLost(StoreError):
    """The state file the daemon opened is no longer where it was."""


def _refuse_a_lost_database(path: Path) -> None:
    """A state dir whose job folders outlived its database would start empty, every job
    it ran forgotten without a word: refuse, and say what to do."""
    jobs = path.parent / "jobs"
    if path.exists() or not jobs.is_dir():
        return
    held = sum(1 for entry in jobs.iterdir() if entry.is_dir())
    if held:
        raise StoreError(
            f"{path} is missing but {jobs} holds {held} job folder(s): the database that "
            "knew them is gone. Restore stoker.db from a backup, or move the jobs folder "
            "away to start with an empty state"
        )


def _check_pages(db: sqlite3.Connection) -> None:
    """Raise sqlite3.DatabaseError if a page of the file is corrupt: SQLite's quick check,
    at start, so that a damaged state file is one clear line then, not a 500 on whichever
    request first reads the page (issue 37, finding 11)."""
    found = [" ".join(str(row[0]).split()) for row in db.execute("PRAGMA quick_check(3)")]
    if found != ["ok"]:  # on one line: the start's error is one
        raise sqlite3.DatabaseError("corrupt: " + "; ".join(found))


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


class Store:
    """Open (creating if need be) the database at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        _refuse_a_lost_database(path)
        path.touch(mode=0o600, exist_ok=True)  # tenants' jobs: readable by the daemon only
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")  # an acknowledged write survives power loss
            self._db.execute("PRAGMA foreign_keys=ON")
            _check_pages(self._db)
            self._migrate()
        except sqlite3.Error as error:  # corrupt, not a database, read-only, a full disk
            self._db.close()
            raise StoreError(
                f"{path}: cannot be used as stoker's state ({error}). Restore it from a "
                "backup, or move it away to start with an empty state (the jobs it holds are "
                "then forgotten)"
            ) from None
        self.reported = reported.Reported(self._db, self._transaction)
        # The newest event's sequence number: a stream with nothing newer asks SQL nothing.
        row = self._db.execute("SELECT MAX(seq) FROM job_events").fetchone()
        self.newest_event: int = int(row[0] or 0)
        opened = path.stat()
        self._identity = (opened.st_dev, opened.st_ino)

    def check(self) -> None:
        """Raise StateLost if the database file is gone or another file took its place (its
        folder deleted or moved under the daemon): writes would then go to a file nobody
        will ever open again."""
        try:
            now = self.path.stat()
        except OSError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != self._identity:
            raise StateLost(
                f"{self.path} was deleted or replaced while the daemon ran: nothing it accepts "
                "now would survive a restart. Stop the daemon, restore the state dir from a "
                "backup (or start afresh), and start it again"
            )

    def _migrate(self) -> None:
        tables = {
            row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        if "meta" in tables:
            row = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            found = int(row[0]) if row else None
            if found is None or not 1 <= found <= SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {found}, this stoker reads 1 to "
                    f"{SCHEMA_VERSION}; use a new --state-dir or the stoker that wrote it"
                )
            for version in range(found + 1, SCHEMA_VERSION + 1):
                migration = _MIGRATIONS[version]
                if version in _ADDS and _ADDS[version] in self._columns("jobs"):
                    migration = ""
                self._create(migration, version)
            return
        if tables - {"sqlite_sequence"}:
            raise StoreError(f"{self.path}: not a stoker state file (tables {sorted(tables)})")
        self._create(_SCHEMA + "".join(_MIGRATIONS.values()), SCHEMA_VERSION)

    def _columns(self, table: str) -> set[str]:
        return {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}  # ours

    def _create(self, tables: str, version: int) -> None:
        """Create `tables` and record the schema version they make, in one transaction."""
        self._db.executescript("BEGIN;" + tables)
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                (str(version),),
            )
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def close(self) -> None:
        self._db.close()

    def mark_clean_stop(self) -> None:
        """The daemon stopped on purpose, its agents checkpointed (see take_clean_stop)."""
        with self._transaction():
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('clean_stop', '1')")

    def take_clean_stop(self) -> bool:
        """Whether the last daemon stopped cleanly; forgets it, so a crash after this start
        is not taken for one."""
        with self._transaction():
            row = self._db.execute("SELECT value FROM meta WHERE key = 'clean_stop'").fetchone()
            self._db.execute("DELETE FROM meta WHERE key = 'clean_stop'")
        return row is not None

    # ---- jobs ------------------------------------------------------------------------------

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
            self._event(record.id, record.submitted_at, "submitted", {"tenant": record.tenant})

    def update_job(self, job_id: str, at: float, **fields: object) -> None:
        """Set some of `state`, `restarts`, `checkpoint`, `iteration`, `pid`, `placement` (a
        sequence of indices), `agent_secret`, `total_iterations` and `script_batch_size` on
        one job."""
        allowed = {
            "state", "restarts", "checkpoint", "iteration", "pid", "placement", "agent_secret",
            "total_iterations", "script_batch_size",
        }  # fmt: skip
        unknown = set(fields) - allowed
        if unknown:
            raise ValueError(f"not job columns: {sorted(unknown)}")
        if "placement" in fields:
            fields["placement"] = json.dumps(list(fields["placement"]))  # type: ignore[call-overload]
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
        return None if row is None else _job(row)

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
        return [_job(row) for row in rows]

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
        shown = sorted(map(_job, [*live, *newest]), key=lambda job: (job.submitted_at, job.id))
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
        return [_job(row) for row in rows]

    # ---- events and plans ------------------------------------------------------------------

    def add_event(self, job_id: str | None, at: float, kind: str, data: Mapping[str, Any]) -> int:
        with self._transaction():
            return self._event(job_id, at, kind, data)

    def _event(self, job_id: str | None, at: float, kind: str, data: Mapping[str, Any]) -> int:
        cursor = self._db.execute(
            "INSERT INTO job_events (job_id, at, kind, data) VALUES (?, ?, ?, ?)",
            (job_id, at, kind, json.dumps(dict(data), default=str)),
        )
        seq = int(cursor.lastrowid or 0)
        self.newest_event = max(self.newest_event, seq)
        return seq

    def events(
        self,
        job_id: str | None = None,
        after: int = 0,
        limit: int = 1000,
        tenant: str | None = None,
    ) -> list[EventRecord]:
        """Events with seq > `after`, oldest first: one job's when `job_id` is given, else
        `tenant`'s jobs' when given, else all (node-wide ones included)."""
        if job_id is None and tenant is not None:
            rows = self._db.execute(
                "SELECT * FROM job_events WHERE seq > ? AND job_id IN "
                "(SELECT id FROM jobs WHERE tenant = ?) ORDER BY seq LIMIT ?",
                (after, tenant, limit),
            )
        elif job_id is None:
            rows = self._db.execute(
                "SELECT * FROM job_events WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)
            )
        else:
            rows = self._db.execute(
                "SELECT * FROM job_events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (job_id, after, limit),
            )
        return [
            EventRecord(
                seq=row["seq"],
                job_id=row["job_id"],
                at=row["at"],
                kind=row["kind"],
                data=json.loads(row["data"]),
            )
            for row in rows
        ]

    def reason(self, job_id: str) -> str:
        """Why the job is in its state, as its last state change said (a failure's exit
        code and stderr tail, a restart's back-off, a command running unmanaged), or the
        stop of its processes after its end, or their failure then (an `exited` event with
        a `why`); "" if it said nothing."""
        row = self._db.execute(
            "SELECT data FROM job_events WHERE job_id = ? AND (kind IN ('state', 'stopped')"
            " OR (kind = 'exited' AND json_extract(data, '$.why') IS NOT NULL))"
            " ORDER BY seq DESC LIMIT 1",
            (job_id,),
        ).fetchone()
        return str(json.loads(row[0]).get("why", "")) if row else ""

    def last_event(self, job_id: str, kind: str) -> dict[str, Any] | None:
        """The data of the job's newest event of `kind`; None when it has none."""
        row = self._db.execute(
            "SELECT data FROM job_events WHERE job_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
            (job_id, kind),
        ).fetchone()
        return dict(json.loads(row[0])) if row else None

    def last_allocation(self, job_id: str, plans: int = 100) -> Mapping[str, Any] | None:
        """The job's allocation in the newest of the last `plans` plans that names it."""
        for plan in self.plans(plans):
            if job_id in plan["allocations"]:
                return dict(plan["allocations"][job_id])
        return None

    def last_event_seq(self) -> int:
        """The newest event's sequence number; 0 when there is none."""
        row = self._db.execute("SELECT MAX(seq) FROM job_events").fetchone()
        return int(row[0] or 0)

    def add_plan(
        self, gen: int, at: float, policy: str, allocations: Mapping[str, Mapping[str, Any]]
    ) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT INTO plans (gen, at, policy, allocations) VALUES (?, ?, ?, ?)",
                (gen, at, policy, json.dumps(allocations)),
            )

    def plans(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest `limit` plans, newest first."""
        rows = self._db.execute("SELECT * FROM plans ORDER BY seq DESC LIMIT ?", (limit,))
        return [
            {
                "generation": row["gen"],
                "at": row["at"],
                "policy": row["policy"],
                "allocations": json.loads(row["allocations"]),
            }
            for row in rows
        ]

    # ---- the throughput model -------------------------------------------------------------

    def add_samples(
        self, kind: str, rows: Sequence[Mapping[str, object]], at: float, source: str
    ) -> None:
        with self._transaction():
            self._db.executemany(
                "INSERT INTO tpm_samples (kind, at, source, row) VALUES (?, ?, ?, ?)",
                [(kind, at, source, json.dumps(dict(row))) for row in rows],
            )

    def samples(self, kind: str) -> list[dict[str, Any]]:
        rows = self._db.execute("SELECT row FROM tpm_samples WHERE kind = ? ORDER BY seq", (kind,))
        return [json.loads(row[0]) for row in rows]

    def sample_counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT kind, COUNT(*) FROM tpm_samples GROUP BY kind")
        return {"training": 0, "loading": 0} | {kind: count for kind, count in rows}

    def add_model(self, at: float, model_json: str, report: Mapping[str, Any]) -> None:
        with self._transaction():
            self._db.execute(
                "INSERT INTO tpm_models (at, model, report) VALUES (?, ?, ?)",
                (at, model_json, json.dumps(dict(report))),
            )

    def latest_model(self) -> tuple[float, str, dict[str, Any]] | None:
        """(when, model JSON, report) of the newest fit, if any."""
        row = self._db.execute(
            "SELECT at, model, report FROM tpm_models ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        return None if row is None else (row[0], row[1], json.loads(row[2]))


def _job(row: sqlite3.Row) -> JobRecord:
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
    )
