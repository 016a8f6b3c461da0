"""Issue 37, finding 6: a job's reported metrics were answered whole, built on the event
loop (24 MB in 15.6 s, every other request waiting). Now a page of series at a time, read
and encoded in a thread. The series are written straight into the daemon's state file
(SQLite in WAL: a second writer waits its turn) as its agents' messages would leave them."""

import sqlite3
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.daemon_harness import FAST, Daemon, daemon_factory, job_body

SERIES, POINTS = 256, 2000


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def _reported(daemon: Daemon, job_id: str) -> None:
    """SERIES series of POINTS points each for `job_id`, as the store keeps them."""
    with sqlite3.connect(daemon.state_dir / "stoker.db", timeout=30) as db:
        # Series m000..m255, step 0..1999 of each at value step/2: made by SQLite itself
        # (a third of the CPU of half a million rows handed over from Python).
        db.execute(
            """WITH RECURSIVE series(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM series
                                            WHERE n + 1 < :series),
                              steps(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM steps
                                           WHERE n + 1 < :points)
            INSERT INTO reported (job_id, name, step, value)
            SELECT :job, printf('m%03d', series.n), steps.n, steps.n * 0.5
            FROM series, steps ORDER BY series.n, steps.n""",
            {"series": SERIES, "points": POINTS, "job": job_id},
        )
        db.executemany(
            "INSERT INTO reported_series (job_id, name, stride) VALUES (?, ?, 1)",
            ((job_id, f"m{series:03d}") for series in range(SERIES)),
        )


@pytest.mark.serial
def test_metrics_come_a_page_at_a_time_and_leave_other_requests_fast(
    serve: Callable[..., Daemon],
) -> None:
    # The job is never launched (within an arrival window of 5 minutes): no agent of its own
    # competes with the timing, and its metrics are only those written here.
    waits = {"arrival_window_s": 300.0, "start_when_free": False}
    daemon = serve(scheduler={**FAST["scheduler"], **waits})  # type: ignore[dict-item]
    with daemon.client() as client:
        job_id = client.post("/v1/jobs", json=job_body("reporter")).raise_for_status().json()["id"]
        _reported(daemon, job_id)
        pages: list[dict[str, Any]] = []
        after = None
        while True:
            params: dict[str, Any] = {"limit": 100, "points": 5}
            if after is not None:
                params["after"] = after
            answer = client.get(f"/v1/jobs/{job_id}/metrics", params=params)
            answer.raise_for_status()
            pages.append(answer.json())
            after = answer.json()["next"]
            assert answer.headers.get("X-Next-Cursor") == after
            if after is None:
                break
        assert [len(page["series"]) for page in pages] == [100, 100, 56]
        names = [name for page in pages for name in page["series"]]
        assert names == [f"m{series:03d}" for series in range(SERIES)], "each once, in order"
        first = pages[0]["series"]["m000"]
        assert first[0] == [0, 0.0] and first[-1] == [POINTS - 1, (POINTS - 1) * 0.5]
        assert len(first) == 5 and pages[2]["newest"]["m255"] == (POINTS - 1) * 0.5
        too_many = client.get(f"/v1/jobs/{job_id}/metrics", params={"limit": 257})
        assert too_many.status_code == 422

        # The largest page, all points, asked again and again while another client polls.
        stop = threading.Event()

        def fetch_whole() -> None:
            with daemon.client() as other:
                while not stop.is_set():
                    params = {"points": POINTS}
                    other.get(f"/v1/jobs/{job_id}/metrics", params=params).raise_for_status()

        fetcher = threading.Thread(target=fetch_whole, daemon=True)
        fetcher.start()
        took = []
        try:
            for _ in range(40):
                started = time.perf_counter()
                httpx.get(f"{daemon.url}/healthz", timeout=30).raise_for_status()
                took.append(time.perf_counter() - started)
                time.sleep(0.05)
        finally:
            stop.set()
            fetcher.join(timeout=60)
    assert statistics.quantiles(took, n=20)[18] < 0.25, f"/healthz took {max(took):.2f} s"
