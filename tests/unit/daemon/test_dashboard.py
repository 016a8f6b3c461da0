"""The dashboard's timeline, built from literal events and plans."""

from typing import Any

from daemon.dashboard import timelines
from daemon.store import EventRecord, JobRecord


def record(job_id: str, submitted_at: float) -> JobRecord:
    return JobRecord(job_id, "admin", job_id, {}, "running", submitted_at, 0.0, 0, "", None)


def state(seq: int, job_id: str, at: float, before: str, after: str) -> EventRecord:
    return EventRecord(seq, job_id, at, "state", {"from": before, "to": after})


def plan(at: float, **workers: int) -> dict[str, Any]:
    return {
        "at": at,
        "allocations": {
            job: {"workers_per_gpu": d, "decoder_share": 0.5} for job, d in workers.items()
        },
    }


def test_a_job_runs_with_the_plan_it_started_or_resumed_under() -> None:
    events = [
        state(1, "a", 2.0, "starting", "running"),
        state(2, "a", 10.0, "running", "pausing"),
        state(3, "a", 12.0, "resuming", "running"),
        EventRecord(4, "a", 15.0, "share", {"gen": 3, "share": 0.25}),
        state(5, "a", 20.0, "running", "completed"),
    ]
    plans = [plan(1.0, a=6), plan(9.0, a=3, b=3)]
    (job,) = timelines([record("a", 0.0)], events, plans).values()
    assert job["steps"] == [
        [0.0, 0, 0.0],
        [2.0, 6, 0.5],
        [10.0, 0, 0.0],
        [12.0, 3, 0.5],
        [15.0, 3, 0.25],
        [20.0, 0, 0.0],
    ]
    assert job["marks"] == [[0.0, "arrival"], [10.0, "pause"], [12.0, "resume"], [20.0, "finish"]]


def test_a_failure_ends_the_band_and_other_jobs_events_are_left_out() -> None:
    events = [
        state(1, "a", 1.0, "starting", "running"),
        state(2, "b", 2.0, "starting", "running"),
        state(3, "a", 3.0, "running", "failed"),
    ]
    result = timelines([record("a", 0.0)], events, [plan(0.5, a=2, b=2)])
    assert set(result) == {"a"}
    assert result["a"]["steps"][-1] == [3.0, 0, 0.0]
    assert result["a"]["marks"][-1] == [3.0, "failure"]
