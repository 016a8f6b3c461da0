"""A live run read back from its daemon's events (workloads/live.py), as `stoker demo
--compare` and bench/bench_live_gain.py read it."""

from typing import Any

import pytest

from workloads.live import RunSpan


def event(at: float, kind: str, **data: Any) -> dict[str, Any]:
    return {"at": at, "kind": kind, "data": data}


def test_a_run_spans_first_submission_to_last_end_and_its_plans_predict_the_gain() -> None:
    events = [
        event(100.0, "submitted"),
        event(102.0, "plan", predicted_makespan_s=50.0, balance_makespan_s=60.0),
        event(101.0, "submitted"),
        event(110.0, "plan", predicted_makespan_s=20.0, balance_makespan_s=23.0),
        event(130.0, "state", to="completed"),
        event(131.0, "plan", predicted_makespan_s=1.0, balance_makespan_s=9.0),  # too late
        event(140.0, "state", to="running"),
        event(145.0, "state", to="failed"),
    ]
    run = RunSpan.of(events)
    assert (run.submitted, run.first_end, run.last_end) == (100.0, 130.0, 145.0)
    assert run.makespan_s == 45.0 and len(run.plans) == 3
    # The last plan before the first end, 10 s into the run: (10 + 23) / (10 + 20) - 1.
    assert run.planned_gain() == pytest.approx(0.1)
    balance = RunSpan.of([e for e in events if e["kind"] != "plan"] + [event(102.0, "plan")])
    assert balance.planned_gain() is None
