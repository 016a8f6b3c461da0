"""A workload's incidents: the simulator feeds its core the events the daemon would feed."""

import pytest

from scheduler.exits import AfterEnd
from scheduler.messages import (
    Alive,
    Command,
    EndReason,
    Event,
    Exited,
    ExitNoted,
    Finished,
    JobCancelled,
    Launch,
    LaunchFailed,
    LaunchFailure,
    LaunchRetrying,
    ProcessExited,
    Restarting,
    Stalled,
    StopProcesses,
    StopReason,
)
from tests.unit.workloads.builders import job, workload
from workloads.errors import WorkloadError
from workloads.simulator import Simulation, SimulationOptions

SCHEDULER = {"stall_timeout_s": 30.0, "arrival_window_s": 5.0, "completion_window_s": 5.0}


def fed(
    *jobs: dict[str, object], scheduler: dict[str, object] | None = None
) -> list[tuple[Event, list[Command]]]:
    settings = {**SCHEDULER, **(scheduler or {})}
    simulation = Simulation(
        workload(*jobs, node={"gpus": 4, "cpu_workers": 12}, scheduler=settings),
        SimulationOptions(policy="optimal"),
    )
    seen: list[tuple[Event, list[Command]]] = []
    simulation.observer = lambda event, now, commands: seen.append((event, commands))
    simulation.run()
    return seen


def test_a_crash_says_its_last_step_fails_and_is_relaunched() -> None:
    seen = fed(job("a", iterations=400, crash_at=200, max_restarts=1))
    events = [event for event, _ in seen]
    (crash, answer) = next((e, out) for e, out in seen if isinstance(e, ProcessExited))
    assert crash.facts.code == 1 and crash.facts.last_step == 200, "its marker: its last step"
    (restarting,) = [c for c in answer if isinstance(c, Restarting)]
    assert restarting.ending.reason is EndReason.EXITED, "its exit failed it"
    assert isinstance(events[-1], Finished)


def test_a_script_past_finished_exit_s_is_stopped_and_its_exit_says_it_overran() -> None:
    seen = fed(job("a", iterations=300, exit_after_s=60.0), scheduler={"finished_exit_s": 10.0})
    commands = [command for _, out in seen for command in out]
    assert StopProcesses("a", StopReason.OVERRAN) in commands
    (exit_,) = [e for e, _ in seen if isinstance(e, ProcessExited)]
    assert exit_.facts.code == -15 and exit_.facts.finished == 300
    (noted,) = [c for c in commands if isinstance(c, ExitNoted)]
    assert noted.after_end is AfterEnd.OVERRAN and noted.code == -15


def test_a_script_that_runs_on_and_a_cancel_end_with_their_exit() -> None:
    seen = fed(job("a", iterations=300, exit_after_s=30.0), job("b", cancel_at_s=30.0))
    events = [event for event, _ in seen]
    assert Finished("a", exited=False) in events
    assert JobCancelled("b", "simulation", exited=False) in events
    assert {e.job_id for e in events if isinstance(e, Exited)} == {"a", "b"}
    assert events.index(Exited("a")) > events.index(Finished("a", exited=False))
    exits = [e for e in events if isinstance(e, ProcessExited)]
    assert {e.job_id for e in exits} == {"a", "b"}
    for exit_ in exits:
        assert events.index(exit_) < events.index(Exited(exit_.job_id)), "reaped, then freed"


def test_silence_stalls_and_setups_are_the_cores_to_judge() -> None:
    seen = fed(
        job("a", iterations=400, silent_at=100, max_restarts=1),
        job("b", iterations=400, stall_at=100, stall_s=100.0, setup_s=20.0),
    )
    commands = [command for _, out in seen for command in out]
    assert any(isinstance(c, Restarting) and c.job_id == "a" for c in commands), "a was lost"
    stalls = [c.stalled for c in commands if isinstance(c, Stalled) and c.job_id == "b"]
    assert stalls[0] and not stalls[-1], "b stalled, then moved on"
    phases = {e.phase for e, _ in seen if isinstance(e, Alive)}
    assert phases == {"setup", "training"}


def test_a_cold_job_says_hello_again_when_its_resume_relaunches_it() -> None:
    seen = fed(
        job("a", iterations=3000, hot_resize=False),
        job("b", iterations=200, arrival_s=40.0),
    )
    kinds = [type(event).__name__ for event, _ in seen if type(event).__name__ != "Tick"]
    if "Resumed" in kinds:
        assert kinds[kinds.index("Resumed") - 1] == "AgentHello"


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"crash_at": 200}, "jobs.0.crash_at"),
        ({"stall_at": 10}, "jobs.0.stall_s"),
        ({"arrival_s": 10.0, "cancel_at_s": 5.0}, "jobs.0.cancel_at_s"),
    ],
)
def test_incidents_that_cannot_happen_are_refused_by_field(
    fields: dict[str, object], where: str
) -> None:
    with pytest.raises(WorkloadError) as refused:
        workload(job("a", **fields))
    assert where in refused.value.where


def test_launches_the_node_is_short_for_are_tried_again_by_the_core() -> None:
    seen = fed(job("a", iterations=300, launch_short=2))
    short = [(e, out) for e, out in seen if isinstance(e, LaunchFailed)]
    assert [e.kind for e, _ in short] == [LaunchFailure.SHORT] * 2
    retries = [c for _, out in short for c in out if isinstance(c, LaunchRetrying)]
    assert [(c.tries, c.pause_s) for c in retries] == [(1, 0.5), (2, 1.0)]
    launches = [c for _, out in seen for c in out if isinstance(c, Launch)]
    assert len(launches) == 3 and launches[1:] == [short[0][0].launch, short[1][0].launch]
    events = [event for event, _ in seen]
    assert isinstance(events[-1], Finished), "neither its failure nor a restart"
    assert not any(isinstance(c, Restarting) for _, out in seen for c in out)


def test_launch_short_is_a_count() -> None:
    with pytest.raises(WorkloadError, match=r"jobs\.0\.launch_short"):
        workload(job("a", launch_short=-1))
