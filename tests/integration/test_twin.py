"""The twin test: the daemon's service and the simulator's driver run the same scheduler
core, so the same events get the same commands, in the same order.

The daemon's service is driven from its edges (submissions, agents' messages, a process
exit) on a hand-held clock; every event it feeds its core is recorded with the commands
the core answered. The simulator's driver, built on the same node, model and settings, is
then fed exactly those events at the same times. Any decision made on one side only
(admission, restarts, timeouts) shows up as a difference."""

import asyncio
from pathlib import Path

from agents.protocol import (
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    ResumedMessage,
)
from scheduler.messages import Launch, Pause, Placed, Restarting, Resume, Tick
from tests.unit.daemon.service_harness import Driver, Fed
from workloads.simulator import Simulation, SimulationOptions
from workloads.spec import parse_workload

# Two GPUs, one job each; `c` (a smaller model) waits for a GPU, and when it gets one `b`
# must give workers up. Short windows and a 5 s pause timeout.
MODELS = {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"}
WORKLOAD = {
    "name": "twin",
    "node": {"gpus": 2, "cpu_workers": 10, "max_jobs_per_gpu": 1},
    "scheduler": {
        "arrival_window_s": 1.0,
        "completion_window_s": 1.0,
        "pause_timeout_s": 5.0,
        "gate": False,
        "restart_backoff_s": 0.5,
    },
    "jobs": [
        {"id": job, "model": model, "batch_size": 64, "gpus": 1, "iterations": 500}
        for job, model in MODELS.items()
    ],
}


def beat(job: str, gen: int, iteration: int, workers: int) -> HeartbeatMessage:
    return HeartbeatMessage(
        job=job,
        gen=gen,
        iteration=iteration,
        samples=iteration * 64,
        idle_s=0.1,
        step_s=0.9,
        samples_per_s=300.0,
        workers=workers,
    )


def launched(driver: Driver, job: str) -> Launch:
    return [
        c for fed in driver.fed for c in fed.commands if isinstance(c, Launch) and c.job_id == job
    ][-1]


async def drive_the_daemon(driver: Driver) -> None:
    """Arrivals, heartbeats, a completion, a pause that times out, an agent crash."""
    for job, model in MODELS.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()  # the arrival window closes: `a` and `b` launch, `c` waits
    for job in ("a", "b"):
        gen = launched(driver, job).gen
        driver.at(1.5).agent(Hello(job=job, gen=gen, pid=41_000, state="starting"))
    for second in (2.0, 3.0):
        for job in ("a", "b"):
            workers = launched(driver, job).allocation.workers_per_gpu
            driver.at(second).agent(beat(job, launched(driver, job).gen, int(second * 10), workers))
    driver.at(4.0).agent(FinishedMessage(job="a", gen=launched(driver, "a").gen, iteration=500))
    driver.launcher.exit("a", 0)  # its script ends after its final step: its GPU is free
    driver.at(4.5).tick()  # `c` is placed
    driver.at(5.5).tick()  # its arrival window closes: `c` launches, `b` is asked to pause
    pauses = [c for fed in driver.fed for c in fed.commands if isinstance(c, Pause)]
    assert [pause.job_id for pause in pauses] == ["b"], "the scenario needs b to shrink"
    for second in (6.0, 8.0, 9.0):  # `b` never pauses, but goes on training
        workers = launched(driver, "b").allocation.workers_per_gpu
        driver.at(second).agent(beat("b", launched(driver, "b").gen, 40 + int(second), workers))
        driver.at(second).tick()
    driver.at(10.5).tick()  # the pause timed out: `b` keeps its workers, `c` gets the rest
    driver.at(11.0).agent(Hello(job="c", gen=launched(driver, "c").gen, pid=41_001))
    driver.at(11.5).agent(beat("c", launched(driver, "c").gen, 5, 1))  # progress, then a crash
    driver.at(12.0).agent(FailedMessage(job="c", gen=launched(driver, "c").gen, error="boom"))
    driver.at(12.5).tick()  # `c`'s back-off is over: it joins the arrivals
    driver.at(13.5).tick()  # `c` is planned again, and `b` asked again to give workers up
    pauses = [c for fed in driver.fed for c in fed.commands if isinstance(c, Pause)]
    assert [pause.job_id for pause in pauses] == ["b", "b"]
    driver.at(14.0).agent(PausedMessage(job="b", gen=pauses[-1].gen, iteration=60))
    (resume,) = [c for c in driver.fed[-2].commands if isinstance(c, Resume)]  # [-1]: a tick
    driver.at(14.5).agent(Hello(job="c", gen=launched(driver, "c").gen, pid=41_002))
    workers = resume.allocation.workers_per_gpu
    driver.at(14.5).agent(ResumedMessage(job="b", gen=resume.gen, workers=workers, gap_s=0.5))
    driver.launcher.exit("b", 1)  # its process died
    driver.at(16.0).tick()
    driver.at(17.5).tick()
    await driver.close()


def test_the_simulator_and_the_daemon_answer_the_same_events_alike(tmp_path: Path) -> None:
    workload = parse_workload(WORKLOAD, "twin")
    simulation = Simulation(workload, SimulationOptions(policy="optimal"))
    driver = Driver(
        tmp_path,
        simulation.config,
        model=simulation.model,
        node={"gpus": 2, "cpu_workers": 10, "max_jobs_per_gpu": 1},
    )
    asyncio.run(drive_the_daemon(driver))

    daemon_side = [fed for fed in driver.fed if fed.commands or not isinstance(fed.event, Tick)]
    simulated = [Fed(fed.event, fed.now, simulation.feed(fed.event, fed.now)) for fed in driver.fed]
    simulated = [fed for fed in simulated if fed.commands or not isinstance(fed.event, Tick)]
    assert [fed.commands for fed in simulated] == [fed.commands for fed in daemon_side]

    # The scenario did reach every part it claims to.
    commands = [command for fed in daemon_side for command in fed.commands]
    assert Placed("c", (0,)) in commands, "c waited for a GPU, then took a's"
    assert any(isinstance(c, Restarting) and c.job_id == "c" for c in commands)
    restarts = [c for c in commands if isinstance(c, Restarting)]
    assert [c.job_id for c in restarts] == ["c", "b"]
    assert sum(isinstance(c, Launch) for c in commands) >= 4
