"""What jobs' scripts report with `job.report` (the `metrics` messages of the agent
protocol), kept in the state database beside the jobs (`Store.reported`).

A series is one metric of one job: [step, value] points. Long runs are downsampled as they
go, evenly over the whole run: a series keeps the points whose step is a multiple of its
stride, plus its newest point, and when it holds more than `MAX_POINTS` its stride doubles
and the points off the new stride are dropped. A relaunched job reports again from its
checkpoint's step: points from that step on replace what its last attempt sent, so the
series is the run the model went through. NaN and infinite values are kept (as NULL in
SQLite, whose REAL has no NaN) and served as null.

What one job may send is bounded (`[limits]`): at most `max_metric_series_per_job` names (the
points of further names are dropped), and `metrics_per_s` messages a second with a burst of
ten times that (further messages are dropped whole). `add` says what it dropped, for the
daemon to say once in the job's events.
"""

import math
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from daemon.buckets import Buckets

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
class Kept:
    """What `add` kept of one message: its points, by step; the names it dropped past the
    series limit; whether the message was dropped whole, over the job's rate."""

    points: list[Point] = field(default_factory=list)
    dropped_names: int = 0
    over_rate: bool = False
    first_drop: bool = False  # the job's first message to lose something: to be said

    def why(self, max_series: int, per_s: float) -> str:
        """What was dropped, naming the setting."""
        if self.over_rate:
            return f"metrics messages over {per_s:g} a second dropped (limits.metrics_per_s)"
        return (
            f"points of {self.dropped_names} metric names past the job's first {max_series}"
            " dropped (limits.max_metric_series_per_job)"
        )


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
        self._max_series = 256  # `limit` sets the daemon's
        self._rate = Buckets(200.0, 20.0)
        self._dropped: set[str] = set()  # jobs whose loss is said

    def limit(self, max_series: int, per_s: float) -> None:
        """Bound what one job may send: `max_series` names, `per_s` messages a second."""
        self._max_series = max_series
        self._rate = Buckets(10.0 * per_s, per_s)

    def add(self, job_id: str, points: Iterable[Point], now: float | None = None) -> Kept:
        """Store one message's points (oldest first), in one transaction, within the job's
        limits (`now`: a monotonic clock, for its rate; unset: this moment)."""
        if self._rate.take(job_id, time.monotonic() if now is None else now) > 0.0:
            return Kept(over_rate=True, first_drop=self._dropping(job_id))
        points = list(points)
        by_name: dict[str, list[tuple[int, float | None]]] = {}
        for step, values in points:
            for name, value in values.items():
                by_name.setdefault(name, []).append((step, value if math.isfinite(value) else None))
        known = self._names(job_id)
        room = max(0, self._max_series - len(known))
        fresh = [name for name in by_name if name not in known]
        dropped = set(fresh[room:])
        with self._transaction():
            for name, rows in by_name.items():
                if name not in dropped:
                    self._add_series(job_id, name, rows)
        kept = [
            (step, {name: value for name, value in values.items() if name not in dropped})
            for step, values in points
        ]
        first = bool(dropped) and self._dropping(job_id)
        return Kept([point for point in kept if point[1]], len(dropped), first_drop=first)

    def forget(self, job_id: str) -> None:
        """The job has ended: its rate is nobody's to count any more (its series stay)."""
        self._rate.forget(job_id)
        self._dropped.discard(job_id)

    def _dropping(self, job_id: str) -> bool:
        """Note that the job lost something; whether for the first time."""
        first = job_id not in self._dropped
        self._dropped.add(job_id)
        return first

    def _names(self, job_id: str) -> set[str]:
        return {
            name
            for (name,) in self._db.execute(
                "SELECT name FROM reported_series WHERE job_id = ?", (job_id,)
            )
        }

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
