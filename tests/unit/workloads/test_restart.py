"""A workload's daemon restart and refit: the simulator builds a fresh core and feeds it what
the daemon's restore feeds (scheduler/restore.py decides), and a refit as the model keeper
feeds one."""

from typing import Any

import pytest

from scheduler.messages import (
    Command,
    Event,
    HelloMissed,
    JobSubmitted,
    ModelRefitted,
    Reattached,
    Released,
    Restored,
)
from tests.unit.workloads.builders import job, workload
from workloads.errors import WorkloadError
from workloads.simrestart import REATTACH_TIMEOUT_S
from workloads.simulator import Simulation, SimulationOptions

SCHEDULER = {"arrival_window_s": 5.0, "completion_window_s": 5.0}


def run(*jobs: dict[str, Any], **node: Any) -> tuple[list[tuple[Event, list[Command]]], Any]:
    simulation = Simulation(
        workload(*jobs, node={"gpus": 2, "cpu_workers": 12, **node}, scheduler=SCHEDULER),
        SimulationOptions(policy="optimal"),
    )
    seen: list[tuple[Event, list[Command]]] = []
    simulation.observer = lambda event, now, commands: seen.append((event, commands))
    return seen, simulation.run()


def test_a_restart_holds_running_jobs_for_their_hello_and_submits_the_rest_again() -> None:
    seen, result = run(
        job("a", iterations=2000),
        job("b", iterations=2000, max_restarts=1),
        job("c", iterations=300, max_restarts=1),  # waits for a GPU, never launched by then
        restart_at_s=60.0,
    )
    events = [event for event, _ in seen]
    restored = [event.job_id for event in events if isinstance(event, Restored)]
    assert restored == ["a", "b"], "both agents outlived the daemon"
    reattached = [event for event in events if isinstance(event, Reattached)]
    assert [event.request.id for event in reattached] == ["a", "b"]
    assert all(not event.unmanaged and event.iteration > 0 for event in reattached)
    released = [event.job_id for event in events if isinstance(event, Released)]
    assert released == ["c"], "it held nothing, and is submitted again"
    submitted = [e.job.restarts for e in events if isinstance(e, JobSubmitted) and e.job.id == "c"]
    assert submitted == [0, 0], "submitted again; it never started: no restart"
    assert {one.id for one in result.jobs} == {"a", "b", "c"}
    assert all(one.end_s > 60.0 for one in result.jobs), "every job finished after it"


def test_a_job_not_running_at_the_restart_is_relaunched_counting_a_restart() -> None:
    seen, result = run(
        job("a", iterations=2000, max_restarts=1),
        restart_at_s=6.0,  # launched at 5 s, its agent not heard yet: started, not running
    )
    events = [event for event, _ in seen]
    assert not any(isinstance(event, Restored) for event in events)
    submitted = [event.job for event in events if isinstance(event, JobSubmitted)]
    assert [request.restarts for request in submitted] == [0, 1]
    assert Released("a") in events
    assert result.jobs[0].end_s > 6.0


def test_a_hung_agent_says_no_hello_and_is_relaunched_once_the_core_says_it_missed() -> None:
    times: list[float] = []
    simulation = Simulation(
        workload(
            job("a", iterations=2000, silent_at=50, max_restarts=1),
            node={"gpus": 2, "cpu_workers": 12, "restart_at_s": 30.0},
            scheduler=SCHEDULER,
        ),
        SimulationOptions(policy="optimal"),
    )
    seen: list[tuple[Event, list[Command]]] = []

    def observe(event: Event, now: float, commands: list[Command]) -> None:
        seen.append((event, commands))
        times.extend(now for command in commands if isinstance(command, HelloMissed))

    simulation.observer = observe
    result = simulation.run()
    events = [event for event, _ in seen]
    assert Restored("a", (0,), hello_within_s=REATTACH_TIMEOUT_S) in events, "it was running"
    assert times == [30.0 + REATTACH_TIMEOUT_S], "the core's timer, as the daemon's"
    after = events[next(i for i, (_, out) in enumerate(seen) if HelloMissed("a") in out) + 1 :]
    assert after[0] == Released("a")
    submitted = [event.job.restarts for event in after if isinstance(event, JobSubmitted)]
    assert submitted == [1], "relaunched, one restart counted"
    assert result.jobs[0].end_s > 40.0


def test_a_refit_is_fed_as_the_model_keeper_feeds_it() -> None:
    seen, _ = run(job("a", iterations=500), refit_at_s=10.0)
    (refit,) = [event for event, _ in seen if isinstance(event, ModelRefitted)]
    assert refit.quality is not None, "judged by its held-out R^2"


@pytest.mark.parametrize("field", ["restart_at_s", "refit_at_s"])
def test_a_restart_or_refit_before_time_began_is_refused_by_field(field: str) -> None:
    with pytest.raises(WorkloadError) as refused:
        workload(job("a"), node={"gpus": 1, "cpu_workers": 4, field: -1.0})
    assert f"node.{field}" in refused.value.where
