"""The append-only logs of the state file: every job's events (state changes, exits,
what agents said) with their sequence numbers, and the allocation plans, newest first.
`EventLog.newest_event` lets an idle event stream ask SQL nothing. The log is the history:
why a job is in its state is kept on its row (daemon/store/reasons.py), never searched
for here.
"""

import json
import sqlite3
from collections.abc import Mapping
from typing import Any

from daemon.store.records import EventRecord
from daemon.store.schema import Transaction


class EventLog:
    """The `job_events` table, on the store's connection."""

    def __init__(self, db: sqlite3.Connection, transaction: Transaction) -> None:
        self._db = db
        self._transaction = transaction
        # The newest event's sequence number: a stream with nothing newer asks SQL nothing.
        self.newest_event = self.last_event_seq()

    def add_event(self, job_id: str | None, at: float, kind: str, data: Mapping[str, Any]) -> int:
        with self._transaction():
            return self.write_event(job_id, at, kind, data)

    def write_event(self, job_id: str | None, at: float, kind: str, data: Mapping[str, Any]) -> int:
        """Insert an event within the caller's transaction; its sequence number."""
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

    def last_event(self, job_id: str, kind: str) -> dict[str, Any] | None:
        """The data of the job's newest event of `kind`; None when it has none."""
        row = self._db.execute(
            "SELECT data FROM job_events WHERE job_id = ? AND kind = ? ORDER BY seq DESC LIMIT 1",
            (job_id, kind),
        ).fetchone()
        return dict(json.loads(row[0])) if row else None

    def last_event_seq(self) -> int:
        """The newest event's sequence number; 0 when there is none."""
        row = self._db.execute("SELECT MAX(seq) FROM job_events").fetchone()
        return int(row[0] or 0)


class PlanLog:
    """The `plans` table: every allocation the scheduler decided, on the store's connection."""

    def __init__(self, db: sqlite3.Connection, transaction: Transaction) -> None:
        self._db = db
        self._transaction = transaction

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

    def last_allocation(self, job_id: str, plans: int = 100) -> Mapping[str, Any] | None:
        """The job's allocation in the newest of the last `plans` plans that names it."""
        for plan in self.plans(plans):
            if job_id in plan["allocations"]:
                return dict(plan["allocations"][job_id])
        return None
