"""What jobs' scripts report with `job.report` (the `metrics` messages of the agent
protocol), kept in the state database beside the jobs (`Store.reported`).

A series is one metric of one job: [step, value] points. Long runs are downsampled as they
go, evenly over the whole run: a series keeps the points whose step is a multiple of its
stride, plus its newest point, and when it holds more than `MAX_POINTS` its stride doubles
and the points off the new stride are dropped. A relaunched job reports again from its
checkpoint's step: points from that step on replace what its last attempt sent, so the
series is the run the model went through. NaN and infinite values are kept (as NULL in
SQLite, whose REAL has no NaN) and served as null.
"""

import math
import sqlite3
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass

MAX_POINTS = 2000  # per series, before its stride doubles

SCHEMA = """
CREATE TABLE IF NOT EXISTS reported (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    step INTEGER NOT NULL,
    value REAL,                    -- NULL: NaN or infinite
    PRIMARY KEY (job_id, name, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS reported_series (
    job_id TEXT NOT NULL,
    name TEXT NOT NULL,
    stride INTEGER NOT NULL,       -- points kept: steps that are multiples of it, and the newest
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;
"""

Point = tuple[int, Mapping[str, float]]  # a step and the values reported at it


@dataclass(frozen=True)
class Series:
    points: list[tuple[int, float | None]]  # oldest first
    stride: int


class Reported:
    """The reported series of every job, on the store's connection (the daemon's writer)."""

    def __init__(
        self, db: sqlite3.Connection, transaction: Callable[[], AbstractContextManager[None]]
    ) -> None:
        self._db = db
        self._transaction = transaction

    def add(self, job_id: str, points: Iterable[Point]) -> None:
        """Store one message's points (oldest first), in one transaction."""
        by_name: dict[str, list[tuple[int, float | None]]] = {}
        for step, values in points:
            for name, value in values.items():
                by_name.setdefault(name, []).append((step, value if math.isfinite(value) else None))
        with self._transaction():
            for name, rows in by_name.items():
                self._add_series(job_id, name, rows)

    def _add_series(self, job_id: str, name: str, rows: list[tuple[int, float | None]]) -> None:
        stride = self._stride(job_id, name)
        first = min(step for step, _ in rows)
        newest = max(step for step, _ in rows)
        # A replay from a checkpoint replaces what came after it; the last message's newest
        # point, kept off the stride, gives way to this one's.
        self._db.execute(
            "DELETE FROM reported WHERE job_id = ? AND name = ? AND (step >= ? OR step % ? != 0)",
            (job_id, name, first, stride),
        )
        self._db.executemany(
            "INSERT OR REPLACE INTO reported (job_id, name, step, value) VALUES (?, ?, ?, ?)",
            [
                (job_id, name, step, value)
                for step, value in rows
                if step % stride == 0 or step == newest
            ],
        )
        (count,) = self._db.execute(
            "SELECT COUNT(*) FROM reported WHERE job_id = ? AND name = ?", (job_id, name)
        ).fetchone()
        while count > MAX_POINTS:
            stride *= 2
            self._db.execute(
                "DELETE FROM reported WHERE job_id = ? AND name = ? AND step % ? != 0 "
                "AND step != ?",
                (job_id, name, stride, newest),
            )
            (count,) = self._db.execute(
                "SELECT COUNT(*) FROM reported WHERE job_id = ? AND name = ?", (job_id, name)
            ).fetchone()
        self._db.execute(
            "INSERT OR REPLACE INTO reported_series (job_id, name, stride) VALUES (?, ?, ?)",
            (job_id, name, stride),
        )

    def _stride(self, job_id: str, name: str) -> int:
        row = self._db.execute(
            "SELECT stride FROM reported_series WHERE job_id = ? AND name = ?", (job_id, name)
        ).fetchone()
        return int(row[0]) if row else 1

    def series(self, job_id: str) -> dict[str, Series]:
        """Every series of a job, by metric name."""
        strides = dict(
            self._db.execute(
                "SELECT name, stride FROM reported_series WHERE job_id = ?", (job_id,)
            ).fetchall()
        )
        points: dict[str, list[tuple[int, float | None]]] = {}
        for name, step, value in self._db.execute(
            "SELECT name, step, value FROM reported WHERE job_id = ? ORDER BY name, step",
            (job_id,),
        ):
            points.setdefault(name, []).append((step, value))
        return {name: Series(values, int(strides.get(name, 1))) for name, values in points.items()}
