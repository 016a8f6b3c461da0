"""What the throughput model learns from, kept in the state file: profiled and measured
samples (`tpm_samples`, by kind) and every fit with its report (`tpm_models`), so that a
restarted daemon plans with its newest fit.
"""

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from daemon.store.schema import Transaction


class ModelTables:
    """The throughput model's samples and fits, on the store's connection."""

    def __init__(self, db: sqlite3.Connection, transaction: Transaction) -> None:
        self._db = db
        self._transaction = transaction

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
