"""The state file's schema and how a file is opened: the tables, what each schema version
added to the one before (run in order to migrate a file an older stoker wrote), and
`open_database`, which refuses a file that is lost, corrupt or not stoker's with a message
that says what to do, and leaves the one it opens migrated to `SCHEMA_VERSION`.
"""

import sqlite3
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from daemon import reported
from daemon.statelock import StoreError

SCHEMA_VERSION = 9
# Runs its block in one transaction: BEGIN IMMEDIATE, then COMMIT, or ROLLBACK on a raise.
Transaction = Callable[[], AbstractContextManager[None]]
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
# Why each job is in its state, typed (daemon/store/reasons.py: JSON, NULL when nothing is
# said). A file of an earlier version kept it only in words, in the job's events: the
# newest state change, stop after its end, or failure after its end that said why (the
# last reader that searched the events for it did the same), kept as those words.
_REASONS = """
ALTER TABLE jobs ADD COLUMN reason TEXT;
UPDATE jobs SET reason = (
    SELECT CASE WHEN coalesce(json_extract(data, '$.why'), '') = '' THEN NULL
        ELSE json_object('kind', 'text', 'text', json_extract(data, '$.why')) END
    FROM job_events WHERE job_events.job_id = jobs.id AND (kind IN ('state', 'stopped')
        OR (kind = 'exited' AND json_extract(data, '$.why') IS NOT NULL))
    ORDER BY seq DESC LIMIT 1
);
"""
# What each version added to the one before (1 is the first): run in order to migrate.
_MIGRATIONS = {
    2: reported.SCHEMA, 3: _IDEMPOTENCY, 4: _AGENT_SECRETS, 5: _LENGTHS, 6: _BATCHES,
    7: _STARTS, 8: _ENDS, 9: _REASONS,
}  # fmt: skip
# The column each ALTER adds: a file that has it already skips the ALTER (not idempotent).
_ADDS = {
    4: "agent_secret", 5: "total_iterations", 6: "script_batch_size", 7: "started_at",
    8: "ended_at", 9: "reason",
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


def open_database(path: Path) -> sqlite3.Connection:
    """Open (creating if need be) the database at `path`, migrated to `SCHEMA_VERSION`;
    StoreError, saying what to do, for one that cannot be stoker's state."""
    _refuse_a_lost_database(path)
    path.touch(mode=0o600, exist_ok=True)  # tenants' jobs: readable by the daemon only
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")  # an acknowledged write survives power loss
        db.execute("PRAGMA foreign_keys=ON")
        _check_pages(db)
        _migrate(db, path)
    except sqlite3.Error as error:  # corrupt, not a database, read-only, a full disk
        db.close()
        raise StoreError(
            f"{path}: cannot be used as stoker's state ({error}). Restore it from a "
            "backup, or move it away to start with an empty state (the jobs it holds are "
            "then forgotten)"
        ) from None
    return db


def _migrate(db: sqlite3.Connection, path: Path) -> None:
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    if "meta" in tables:
        row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        found = int(row[0]) if row else None
        if found is None or not 1 <= found <= SCHEMA_VERSION:
            raise StoreError(
                f"{path}: schema version {found}, this stoker reads 1 to "
                f"{SCHEMA_VERSION}; use a new --state-dir or the stoker that wrote it"
            )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            migration = _MIGRATIONS[version]
            if version in _ADDS and _ADDS[version] in _columns(db, "jobs"):
                migration = ""
            _create(db, migration, version)
        return
    if tables - {"sqlite_sequence"}:
        raise StoreError(f"{path}: not a stoker state file (tables {sorted(tables)})")
    _create(db, _SCHEMA + "".join(_MIGRATIONS.values()), SCHEMA_VERSION)


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}  # ours


def _create(db: sqlite3.Connection, tables: str, version: int) -> None:
    """Create `tables` and record the schema version they make, in one transaction."""
    db.executescript("BEGIN;" + tables)
    try:
        db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(version),),
        )
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")
