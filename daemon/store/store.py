"""`Store`, the one entry point to the daemon's state file: it opens the database
(`schema.open_database`), owns its one connection and transactions, and hands each call on
to the collaborator that keeps that part of the state: `JobTable` (jobs), `EventLog` and
`PlanLog` (the append-only logs), `ModelTables` (the throughput model's samples and fits)
and `reported.Reported` (what jobs' scripts report). It also notices when the file it
opened is deleted or replaced under the daemon (`check`), and keeps the clean-stop mark.
"""

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from daemon import reported
from daemon.statelock import StoreError
from daemon.store.events import EventLog, PlanLog
from daemon.store.jobs import JobTable
from daemon.store.models import ModelTables
from daemon.store.reasons import reason_words
from daemon.store.records import EventRecord, JobRecord
from daemon.store.schema import open_database


class StateLost(StoreError):
    """The state file the daemon opened is no longer where it was."""


class Store:
    """Open (creating if need be) the database at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection = open_database(path)
        self.reported = reported.Reported(self._db, self._transaction)
        self._events = EventLog(self._db, self._transaction)
        self._plans = PlanLog(self._db, self._transaction)
        self._jobs = JobTable(self._db, self._transaction, self._events, path)
        self._models = ModelTables(self._db, self._transaction)
        opened = path.stat()
        self._identity = (opened.st_dev, opened.st_ino)

    @property
    def newest_event(self) -> int:
        """The newest event's sequence number: a stream with nothing newer asks SQL nothing."""
        return self._events.newest_event

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

    # ---- jobs (JobTable, daemon/store/jobs.py) ---------------------------------------------

    def idempotent(self, tenant: str, key: str) -> tuple[str, str] | None:
        return self._jobs.idempotent(tenant, key)

    def add_job(self, record: JobRecord, idempotency: tuple[str, str] | None = None) -> None:
        self._jobs.add_job(record, idempotency)

    def update_job(self, job_id: str, at: float, **fields: object) -> None:
        self._jobs.update_job(job_id, at, **fields)

    def job(self, job_id: str) -> JobRecord | None:
        return self._jobs.job(job_id)

    def jobs_page(
        self,
        tenant: str | None,
        after: tuple[float, str] | None,
        limit: int,
        *,
        states: Sequence[str] = (),
        name: str | None = None,
    ) -> list[JobRecord]:
        return self._jobs.jobs_page(tenant, after, limit, states=states, name=name)

    def jobs(self, tenant: str | None = None) -> list[JobRecord]:
        return self._jobs.jobs(tenant)

    def shown_jobs(self, tenant: str | None, ended: int) -> tuple[list[JobRecord], int]:
        return self._jobs.shown_jobs(tenant, ended)

    def ids_named(self, name: str, tenant: str | None, limit: int = 3) -> list[str]:
        return self._jobs.ids_named(name, tenant, limit)

    def ids_starting(self, prefix: str, tenant: str | None, limit: int = 3) -> list[str]:
        return self._jobs.ids_starting(prefix, tenant, limit)

    def continued_by(self, job_id: str) -> list[JobRecord]:
        return self._jobs.continued_by(job_id)

    def reason(self, job_id: str) -> str:
        """Why the job is in its state, in words: its row's typed reason (`JobRecord.reason`)
        as daemon/wording.py says it; "" if nothing is said (or there is no such job)."""
        job = self._jobs.job(job_id)
        return reason_words(job.reason) if job is not None else ""

    # ---- events and plans (EventLog, PlanLog, daemon/store/events.py) -----------------------

    def add_event(self, job_id: str | None, at: float, kind: str, data: Mapping[str, Any]) -> int:
        return self._events.add_event(job_id, at, kind, data)

    def events(
        self,
        job_id: str | None = None,
        after: int = 0,
        limit: int = 1000,
        tenant: str | None = None,
    ) -> list[EventRecord]:
        return self._events.events(job_id, after, limit, tenant)

    def last_event(self, job_id: str, kind: str) -> dict[str, Any] | None:
        return self._events.last_event(job_id, kind)

    def last_event_seq(self) -> int:
        return self._events.last_event_seq()

    def last_allocation(self, job_id: str, plans: int = 100) -> Mapping[str, Any] | None:
        return self._plans.last_allocation(job_id, plans)

    def add_plan(
        self, gen: int, at: float, policy: str, allocations: Mapping[str, Mapping[str, Any]]
    ) -> None:
        self._plans.add_plan(gen, at, policy, allocations)

    def plans(self, limit: int = 100) -> list[dict[str, Any]]:
        return self._plans.plans(limit)

    # ---- the throughput model (ModelTables, daemon/store/models.py) -------------------------

    def add_samples(
        self, kind: str, rows: Sequence[Mapping[str, object]], at: float, source: str
    ) -> None:
        self._models.add_samples(kind, rows, at, source)

    def samples(self, kind: str) -> list[dict[str, Any]]:
        return self._models.samples(kind)

    def sample_counts(self) -> dict[str, int]:
        return self._models.sample_counts()

    def add_model(self, at: float, model_json: str, report: Mapping[str, Any]) -> None:
        self._models.add_model(at, model_json, report)

    def latest_model(self) -> tuple[float, str, dict[str, Any]] | None:
        return self._models.latest_model()
