"""`GET /v1/jobs/{id}/metrics` a page at a time, built off the event loop (issue 37,
finding 6: a job's whole answer, 24 MB, was built in 15.6 s on the loop, and every other
request waited). A page holds `limit` series, by name; `next` (and the X-Next-Cursor
header) names the last, to pass as `after` for the next page. The answer is read on a
connection of its own (SQLite in WAL lets it read beside the daemon's writer) and encoded
to JSON in a worker thread."""

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

from daemon.continuing import one_series
from daemon.reported import Series

# Series a page holds: by default as many as a job may report (limits'
# max_metric_series_per_job), so the CLI and the dashboard see them all in one page.
MAX_SERIES = 256


def metrics_page(
    database: Path, chain: list[str], after: str | None, limit: int, points: int
) -> tuple[bytes, str | None]:
    """The JSON answer for the job last in `chain` (its lineage, oldest first): `limit`
    series named after `after`, each thinned to `points`; and the cursor of the next page
    (None: this was the last). Run it in a thread."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        names = sorted({name for job in chain for name in _names(db, job, after, limit + 1)})
        following = names[limit - 1] if len(names) > limit else None
        names = names[:limit]
        stored = one_series([_series(db, job, names) for job in chain]) if names else {}
    # Encoded a series at a time: one json.dumps of the whole holds the GIL, and with it
    # the event loop, for as long as it takes.
    series = ",".join(
        f"{json.dumps(name)}:{json.dumps(thin([list(point) for point in found.points], points))}"
        for name, found in stored.items()
    )
    rest: dict[str, Any] = {
        "newest": {name: found.points[-1][1] for name, found in stored.items() if found.points},
        "stride": {name: found.stride for name, found in stored.items()},
        "next": following,
    }
    body = f'{{"job":{json.dumps(chain[-1])},"series":{{{series}}},{json.dumps(rest)[1:]}'
    return body.encode(), following


def _names(db: sqlite3.Connection, job_id: str, after: str | None, count: int) -> list[str]:
    rows = db.execute(
        "SELECT name FROM reported_series WHERE job_id = ? AND name > ? ORDER BY name LIMIT ?",
        (job_id, after or "", count),
    ).fetchall()
    return [str(name) for (name,) in rows]


def _series(db: sqlite3.Connection, job_id: str, names: list[str]) -> dict[str, Series]:
    """The job's series of `names` (consecutive in name order), as Reported.series reads
    them."""
    span = (job_id, names[0], names[-1])
    strides = dict(
        db.execute(
            "SELECT name, stride FROM reported_series WHERE job_id = ? AND name BETWEEN ? AND ?",
            span,
        ).fetchall()
    )
    points: dict[str, list[tuple[int, float | None]]] = {}
    for name, step, value in db.execute(
        "SELECT name, step, value FROM reported WHERE job_id = ? AND name BETWEEN ? AND ?"
        " ORDER BY name, step",
        span,
    ):
        points.setdefault(name, []).append((step, value))
    return {name: Series(values, int(strides.get(name, 1))) for name, values in points.items()}


def thin(values: list[list[Any]], points: int) -> list[list[Any]]:
    """`points` of `values`, evenly spread, the newest always among them (and the first,
    from 2 points on)."""
    count = len(values)
    if count <= points:
        return values
    if points == 1:
        return values[-1:]
    # Spread over the span: n > points makes the indices strictly increasing.
    return [values[round(i * (count - 1) / (points - 1))] for i in range(points)]
