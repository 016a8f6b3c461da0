"""A live run read back from its daemon's events (workloads/live.py), as `stoker demo
--compare` and bench/bench_live_gain.py read it."""

from typing import Any

import pytest

from workloads.live import RunSpan


def event(at: float, kind: str, **data: Any) -> dict[str, Any]:
    return {"at": at, "kind": kind, "data": data}


def plan(at: float, ours: float, shared: float, split: dict[str, int]) -> dict[str, Any]:
    """A `lookahead` plan giving `split`, where `balance` gives a and b 2 workers each."""
    return event(
        at,
        "plan",
        allocations={job: {"workers_per_gpu": workers} for job, workers in split.items()},
        predicted_makespan_s=ours,
        balance_makespan_s=shared,
        balance_workers={"a": 2, "b": 2},
    )


def test_a_run_spans_first_submission_to_last_end_and_its_plans_predict_the_gain() -> None:
    events = [
        event(100.0, "submitted"),
        plan(102.0, 50.0, 50.0, {"a": 2, "b": 2}),  # balance's split: the runs are the same
        event(101.0, "submitted"),
        plan(110.0, 20.0, 23.0, {"a": 3, "b": 1}),  # they part here
        plan(120.0, 9.0, 10.0, {"a": 3, "b": 1}),  # from a run already ahead: what is left
        event(130.0, "state", to="completed"),
        plan(131.0, 1.0, 9.0, {"a": 4}),  # too late
        event(140.0, "state", to="running"),
        event(145.0, "state", to="failed"),
    ]
    run = RunSpan.of(events)
    assert (run.submitted, run.first_end, run.last_end) == (100.0, 130.0, 145.0)
    assert run.makespan_s == 45.0 and len(run.plans) == 4
    # The plan where the run left balance's split, 10 s into it: (10 + 23) / (10 + 20) - 1.
    assert run.planned_gain() == pytest.approx(0.1)
    same = RunSpan.of([e for e in events if e["at"] != 110.0 and e["at"] != 120.0])
    assert same.planned_gain() == 0.0, "balance's split throughout: no gain predicted"
    balance = RunSpan.of([e for e in events if e["kind"] != "plan"] + [event(102.0, "plan")])
    assert balance.planned_gain() is None
