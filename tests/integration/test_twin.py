"""The twin test: the daemon's service and the simulator's driver run the same scheduler
core, so the same events get the same commands, in the same order.

The daemon's service is driven from its edges (submissions, cancels, agents' messages,
processes' exits) on a hand-held clock (`twin_scenarios.py`); every event it feeds its core
is recorded with the commands the core answered. The simulator's driver, built on the same
node, model and settings, is then fed exactly those events at the same times. Any decision
made on one side only (admission, restarts, timeouts) shows up as a difference; between
them the scenarios feed every kind of event the core takes."""

import asyncio
import typing
from dataclasses import dataclass
from pathlib import Path

import pytest

from scheduler.exits import AfterEnd
from scheduler.messages import (
    Cancel,
    Command,
    EndReason,
    Event,
    ExitNoted,
    Launch,
    LaunchFailed,
    LaunchFailure,
    LaunchRetrying,
    Placed,
    Restarting,
    Stalled,
    StateChanged,
    StopProcesses,
    StopReason,
    Tick,
)
from tests.integration.twin_scenarios import NODE, SCENARIOS, Scenario
from tests.unit.daemon.service_harness import Driver, Fed
from workloads.simulator import Simulation, SimulationOptions
from workloads.spec import parse_workload


@dataclass(frozen=True)
class Twins:
    daemon: list[Fed]  # what the service fed its core, and the core's answers
    simulated: list[Fed]  # the same events fed to the simulator's driver, and its answers

    def commands(self) -> list[Command]:
        return [command for fed in self.daemon for command in fed.commands]

    def events(self) -> list[Event]:
        return [fed.event for fed in self.daemon]


_RUNS: dict[str, Twins] = {}


def run_twins(scenario: Scenario, tmp_path: Path) -> Twins:
    """The scenario on the daemon's service, then its events on the simulator (once per
    session: the event-kind check reads every scenario's run)."""
    if scenario.name in _RUNS:
        return _RUNS[scenario.name]
    workload = parse_workload(scenario.workload(), scenario.name)
    options = SimulationOptions(policy="optimal", heartbeat_s=scenario.heartbeat_s)
    simulation = Simulation(workload, options)
    driver = Driver(tmp_path, simulation.config, model=simulation.model, node=dict(NODE))
    asyncio.run(scenario.drive(driver))
    simulated = []
    for index, fed in enumerate(driver.fed):
        if index in driver.restarted_at:  # the daemon restarted: a fresh core, as its own
            simulation.new_core()
        simulated.append(Fed(fed.event, fed.now, simulation.feed(fed.event, fed.now)))
    _RUNS[scenario.name] = Twins(driver.fed, simulated)
    return _RUNS[scenario.name]


def without_quiet_ticks(fed: list[Fed]) -> list[Fed]:
    return [one for one in fed if one.commands or not isinstance(one.event, Tick)]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[scenario.name for scenario in SCENARIOS])
def test_the_simulator_and_the_daemon_answer_the_same_events_alike(
    scenario: Scenario, tmp_path: Path
) -> None:
    twins = run_twins(scenario, tmp_path)
    daemon_side = without_quiet_ticks(twins.daemon)
    simulated = without_quiet_ticks(twins.simulated)
    assert [fed.event for fed in simulated] == [fed.event for fed in daemon_side]
    for ours, theirs in zip(simulated, daemon_side, strict=True):
        assert ours.commands == theirs.commands, f"at {theirs.now:.1f}: {theirs.event}"


def test_the_rounds_reach_every_part_they_claim_to(tmp_path: Path) -> None:
    commands = run_twins(SCENARIOS[0], tmp_path).commands()
    assert Placed("c", (0,)) in commands, "c waited for a GPU, then took a's"
    assert any(isinstance(c, Restarting) and c.job_id == "c" for c in commands)
    restarts = [c for c in commands if isinstance(c, Restarting)]
    assert [c.job_id for c in restarts] == ["c", "b"]
    assert sum(isinstance(c, Launch) for c in commands) >= 4


def test_the_other_scenarios_reach_what_they_claim_to(tmp_path: Path) -> None:
    by_name = {scenario.name: scenario for scenario in SCENARIOS}
    cancels = run_twins(by_name["cancels"], tmp_path / "cancels").commands()
    assert Cancel("a") in cancels and Cancel("c") not in cancels, "c never ran"
    silence = run_twins(by_name["silence"], tmp_path / "silence").commands()
    stalls = [(c.job_id, c.stalled) for c in silence if isinstance(c, Stalled)]
    assert ("b", True) in stalls and ("b", False) in stalls
    assert ("a", True) not in stalls, "a long setup said by `alive` is no stall"
    assert any(isinstance(c, Restarting) and c.job_id == "a" for c in silence), "a was lost"
    cold = run_twins(by_name["cold resize"], tmp_path / "cold resize")
    relaunches = [c for c in cold.commands() if isinstance(c, Launch) and c.job_id == "d"]
    assert len(relaunches) == 1, "the core launched d once: its resume is the relaunch"
    stops = run_twins(by_name["stops"], tmp_path / "stops").commands()
    stopped = [(c.job_id, c.reason) for c in stops if isinstance(c, StopProcesses)]
    grace, overran, asked = StopReason.GRACE_OVER, StopReason.OVERRAN, StopReason.ASKED
    assert stopped == [("b", overran), ("a", grace), ("c", asked)]
    noted = {c.job_id: c.after_end for c in stops if isinstance(c, ExitNoted)}
    assert noted == {"a": None, "b": AfterEnd.OVERRAN, "c": AfterEnd.STOPPED}
    failures = run_twins(by_name["launch failures"], tmp_path / "launch failures")
    retries = [(c.job_id, c.tries, c.pause_s) for c in failures.commands()
               if isinstance(c, LaunchRetrying)]  # fmt: skip
    assert retries == [("a", 1, 0.5), ("a", 2, 1.0), ("c", 1, 0.5), ("c", 2, 1.0)]
    kinds = [(e.job_id, e.kind) for e in failures.events() if isinstance(e, LaunchFailed)]
    assert ("b", LaunchFailure.REFUSED) in kinds, "b's program is missing: its failure"
    ended = [c for c in failures.commands() if isinstance(c, StateChanged) and c.new.final]
    assert [(c.job_id, c.ending and c.ending.reason) for c in ended] == [
        ("b", EndReason.LAUNCH_FAILED),
        ("c", EndReason.CANCELLED),
    ]


def test_every_event_kind_has_a_twin(tmp_path: Path) -> None:
    """Every kind of event the core takes is fed in some scenario: a new kind of `Event`
    fails here until a scenario feeds it to both sides."""
    fed: set[type[Event]] = set()
    for index, scenario in enumerate(SCENARIOS):
        twins = run_twins(scenario, tmp_path / str(index))
        fed |= {type(one.event) for one in twins.daemon}
    assert fed == set(typing.get_args(Event))
