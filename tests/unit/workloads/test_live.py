"""A live run read back from its daemon's events (workloads/live.py), as `stoker demo
--compare` and bench/bench_live_gain.py read it."""

from pathlib import Path
from typing import Any

import pytest

from workloads.errors import WorkloadError
from workloads.live import DEFAULT_DATASET_IMAGES, RunSpan, dataset_images
from workloads.spec import load_workload

CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "workloads"


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
        plan(131.0, 1.0, 9.0, {"a": 4}),
        event(140.0, "state", to="running"),
        event(145.0, "state", to="failed"),
    ]
    run = RunSpan.of(events)
    assert (run.submitted, run.first_end, run.last_end) == (100.0, 130.0, 145.0)
    assert run.makespan_s == 45.0 and len(run.plans) == 4
    # The plan where the run left balance's split, 10 s into it: (10 + 23) / (10 + 20) - 1.
    assert run.planned_gain() == pytest.approx(0.1)
    late = RunSpan.of([e for e in events if e["at"] not in (110.0, 120.0)])
    # The runs part only after the first end, 31 s in: (31 + 9) / (31 + 1) - 1.
    assert late.planned_gain() == pytest.approx(0.25)
    same = RunSpan.of([e for e in events if e["at"] not in (110.0, 120.0, 131.0)])
    assert same.planned_gain() == 0.0, "balance's split throughout: no gain predicted"
    balance = RunSpan.of([e for e in events if e["kind"] != "plan"] + [event(102.0, "plan")])
    assert balance.planned_gain() is None


def test_plans_that_do_not_say_balance_s_split_predict_nothing() -> None:
    untold = event(105.0, "plan", allocations={"a": {"workers_per_gpu": 3}})  # may depart
    events = [event(100.0, "submitted"), untold, plan(110.0, 20.0, 23.0, {"a": 3, "b": 1})]
    assert RunSpan.of([*events, event(120.0, "state", to="completed")]).planned_gain() is None
    no_makespans = plan(110.0, 20.0, 23.0, {"a": 3, "b": 1})
    del no_makespans["data"]["predicted_makespan_s"]
    run = RunSpan.of([events[0], no_makespans, event(120.0, "state", to="completed")])
    assert run.planned_gain() is None


def test_a_workload_says_how_many_images_its_datasets_hold_and_the_option_overrides() -> None:
    remote = load_workload(CONFIGS / "loader-remote-cpu.toml")
    assert dataset_images(remote) == 1024
    assert dataset_images(remote, 64) == 64
    assert dataset_images(load_workload(CONFIGS / "demo-cpu.toml")) == DEFAULT_DATASET_IMAGES


def test_a_workload_with_no_image_in_its_datasets_is_refused(tmp_path: Path) -> None:
    text = (CONFIGS / "demo-cpu.toml").read_text()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("[node]", "dataset_images = 0\n\n[node]", 1))
    with pytest.raises(WorkloadError, match="dataset_images"):
        load_workload(bad)
