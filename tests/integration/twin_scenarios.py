"""The twin test's scenarios: the daemon's service driven from its edges (submissions,
cancels, agents' messages, processes' exits) on a hand-held clock. Each names the workload
the simulator's driver is built on (the same job ids, node and settings) and the options it
runs with; `test_twin.py` feeds the simulator every event the service fed its core.

Between them they make the service feed every kind of event the core takes (`Event`): a
new kind with no scenario here fails `test_every_event_kind_has_a_twin`."""

import errno
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from agents.protocol import (
    AliveMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    PausedMessage,
    ResumedMessage,
)
from scheduler.messages import Launch, Pause, Resume
from tests.unit.daemon.service_harness import Driver

NODE = {"gpus": 2, "cpu_workers": 10, "max_jobs_per_gpu": 1}
SCHEDULER = {
    "arrival_window_s": 1.0,
    "completion_window_s": 1.0,
    "pause_timeout_s": 5.0,
    "gate": False,
    "restart_backoff_s": 0.5,
}


@dataclass(frozen=True)
class Scenario:
    name: str
    drive: Callable[[Driver], Coroutine[Any, Any, None]]
    models: dict[str, str]  # job id -> zoo model, as the simulator's workload has them
    scheduler: dict[str, Any] = field(default_factory=dict)  # over SCHEDULER
    heartbeat_s: float = 5.0  # the simulator's agents' period (its heartbeat timeout's floor)
    # job id -> the workload's settings of its incidents, as the scenario gives them
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)

    def workload(self) -> dict[str, Any]:
        return {
            "name": f"twin {self.name}",
            "node": NODE,
            "scheduler": {**SCHEDULER, **self.scheduler},
            "jobs": [
                {"id": job, "model": model, "batch_size": 64, "gpus": 1, "iterations": 500}
                | self.incidents.get(job, {})
                for job, model in self.models.items()
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


def pauses(driver: Driver) -> list[Pause]:
    return [c for fed in driver.fed for c in fed.commands if isinstance(c, Pause)]


def hello(driver: Driver, job: str, pid: int) -> None:
    driver.agent(Hello(job=job, gen=launched(driver, job).gen, pid=pid, state="starting"))


def heartbeat(driver: Driver, job: str, iteration: int) -> None:
    launch = launched(driver, job)
    driver.agent(beat(job, launch.gen, iteration, launch.allocation.workers_per_gpu))


# ---- scenarios -----------------------------------------------------------------------------


async def rounds(driver: Driver) -> None:
    """Arrivals, heartbeats, a completion whose script exits later, a pause that times out,
    an agent crash and its restart, a pause and resume, a process that died."""
    for job, model in ROUNDS.models.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()  # the arrival window closes: `a` and `b` launch, `c` waits
    for job in ("a", "b"):
        driver.at(1.5)
        hello(driver, job, 41_000)
    for second in (2.0, 3.0):
        for job in ("a", "b"):
            driver.at(second)
            heartbeat(driver, job, int(second * 10))
    driver.at(4.0).agent(FinishedMessage(job="a", gen=launched(driver, "a").gen, iteration=500))
    driver.launcher.exit("a", 0)  # its script ends after its final step: its GPU is free
    driver.at(4.5).tick()  # `c` is placed
    driver.at(5.5).tick()  # its arrival window closes: `c` launches, `b` is asked to pause
    assert [pause.job_id for pause in pauses(driver)] == ["b"], "the scenario needs b to shrink"
    for second in (6.0, 8.0, 9.0):  # `b` never pauses, but goes on training
        driver.at(second)
        heartbeat(driver, "b", 40 + int(second))
        driver.at(second).tick()
    driver.at(10.5).tick()  # the pause timed out: `b` keeps its workers, `c` gets the rest
    driver.at(11.0).agent(Hello(job="c", gen=launched(driver, "c").gen, pid=41_001))
    driver.at(11.5).agent(beat("c", launched(driver, "c").gen, 5, 1))  # progress, then a crash
    driver.at(12.0).agent(FailedMessage(job="c", gen=launched(driver, "c").gen, error="boom"))
    driver.at(12.5).tick()  # `c`'s back-off is over: it joins the arrivals
    driver.at(13.5).tick()  # `c` is planned again, and `b` asked again to give workers up
    assert [pause.job_id for pause in pauses(driver)] == ["b", "b"]
    driver.at(14.0).agent(PausedMessage(job="b", gen=pauses(driver)[-1].gen, iteration=60))
    (resume,) = [c for c in driver.fed[-2].commands if isinstance(c, Resume)]  # [-1]: a tick
    driver.at(14.5).agent(Hello(job="c", gen=launched(driver, "c").gen, pid=41_002))
    workers = resume.allocation.workers_per_gpu
    driver.at(14.5).agent(ResumedMessage(job="b", gen=resume.gen, workers=workers, gap_s=0.5))
    driver.launcher.exit("b", 1)  # its process died
    driver.at(16.0).tick()
    driver.at(17.5).tick()
    await driver.close()


async def cancels(driver: Driver) -> None:
    """A cancel while waiting for a GPU (nothing runs: `exited`), a cancel of a running job
    (its process checkpoints and exits later: `Exited`), and a script that exits well after
    its final step (`Finished(exited=False)`, then `Exited`)."""
    for job, model in CANCELS.models.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()
    for job in ("a", "b"):
        driver.at(1.5)
        hello(driver, job, 42_000)
    driver.at(2.0)
    heartbeat(driver, "a", 20)
    heartbeat(driver, "b", 20)
    driver.at(2.5).cancel("c")  # still waiting for a GPU
    driver.at(3.0).cancel("a")  # running: told to stop, its GPU kept until its process exits
    assert driver.state("a") == "cancelled"
    driver.at(3.5).tick()
    driver.launcher.exit("a", 0)  # it checkpointed and left
    driver.at(4.0).tick()
    driver.at(5.0).agent(FinishedMessage(job="b", gen=launched(driver, "b").gen, iteration=500))
    driver.at(6.0).tick()  # its script saves on: its GPU stays held
    driver.launcher.exit("b", 0)
    driver.at(9.0).tick()
    await driver.close()


async def silence(driver: Driver) -> None:
    """A long setup said by `alive`, a job that makes no progress (stalled, then moving
    again), and one whose link goes silent (lost, then relaunched by its restart policy)."""
    for job, model in SILENCE.models.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()
    for job in ("a", "b"):
        driver.at(1.5)
        hello(driver, job, 43_000)
    for second in (2.0, 3.0, 4.0, 5.0):  # `a` sets up; `b` heartbeats without a step
        driver.at(second).agent(AliveMessage(job="a", phase="setup"))
        driver.at(second)
        heartbeat(driver, "b", 10)
        driver.at(second).tick()
    driver.at(6.0)
    heartbeat(driver, "a", 5)  # `a` trains, then falls silent
    heartbeat(driver, "b", 30)  # `b` moves again
    for second in (7.0, 8.0, 9.0, 10.0, 11.0):
        driver.at(second)
        heartbeat(driver, "b", 30 + int(second))
        driver.at(second).tick()
    driver.launcher.exit("a", None)  # the hung process is gone
    for second in (12.0, 13.0, 14.0):
        driver.at(second).tick()
    await driver.close()


async def cold_resize(driver: Driver) -> None:
    """A command job that resizes cold: its pause ends its process, its resume relaunches
    it (a new hello, then `resumed`)."""
    driver.at(0.0).submit("a", model="Resnet18")
    command: dict[str, Any] = {"model": None, "iterations": None, "command": ["./run.sh"]}
    command["resize"] = "cold"
    driver.at(0.0).submit("d", **command)
    driver.at(1.0).tick()
    driver.at(1.5)
    hello(driver, "a", 44_000)
    hello(driver, "d", 44_001)
    for second in (2.0, 3.0):
        driver.at(second)
        heartbeat(driver, "a", int(second * 10))
        heartbeat(driver, "d", int(second * 10))
    driver.at(3.5).submit("c", model="smResnet20")  # it waits for `a`'s GPU
    driver.at(4.0).agent(FinishedMessage(job="a", gen=launched(driver, "a").gen, iteration=500))
    driver.launcher.exit("a", 0)
    for second in (4.5, 5.5, 6.5):
        driver.at(second).tick()
    cold = [pause for pause in pauses(driver) if pause.job_id == "d"]
    assert cold, "the scenario needs d to shrink"
    driver.at(7.0).agent(PausedMessage(job="d", gen=cold[-1].gen, iteration=70))
    # Its `paused` and the resume came together: its process left, and a new one starts
    # from the checkpoint with its new workers (the launcher stops the old one if need be).
    (resume,) = [c for fed in driver.fed for c in fed.commands if isinstance(c, Resume)]
    assert driver.launcher.launched().count("d") == 2, "its resume relaunched it"
    assert resume.cold_paused_at is not None, "the core's resume says it is a relaunch"
    driver.at(7.5).tick()
    driver.at(9.0).agent(Hello(job="d", gen=resume.gen, pid=44_002))
    workers = resume.allocation.workers_per_gpu
    driver.at(9.5).agent(ResumedMessage(job="d", gen=resume.gen, workers=workers, gap_s=2.5))
    driver.at(10.0)
    hello(driver, "c", 44_003)
    driver.at(11.0).tick()
    await driver.close()


async def stops(driver: Driver) -> None:
    """The core stops ended jobs' processes (`StopProcesses`): a cancelled job's that
    outlive the grace, a completed job's script still saving past `finished_exit_s`, and
    one whose work after its end is cancelled (`StopRequested`); each exit then comes
    (`ProcessExited`), said overrun or stopped."""
    for job, model in STOPS.models.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()  # `a` and `b` launch, `c` waits for a GPU
    for job in ("a", "b"):
        driver.at(1.5)
        hello(driver, job, 46_000)
    driver.at(2.0)
    heartbeat(driver, "a", 20)
    heartbeat(driver, "b", 20)
    driver.at(2.5).cancel("a")  # told to stop: it does not
    driver.at(3.0).agent(FinishedMessage(job="b", gen=launched(driver, "b").gen, iteration=500))
    for second in (4.0, 5.0, 6.0, 7.0):  # 7.0: `b` ran past finished_exit_s, and is stopped
        driver.at(second).tick()
    driver.launcher.exit("b", -15)
    driver.at(7.2).tick()
    driver.at(7.5).tick()  # `a`'s grace is over: stopped
    driver.launcher.exit("a", -15)
    for second in (8.0, 9.0):  # `c` takes a GPU
        driver.at(second).tick()
    driver.at(9.5)
    hello(driver, "c", 46_001)
    driver.at(10.0)
    heartbeat(driver, "c", 10)
    driver.at(10.5).agent(FinishedMessage(job="c", gen=launched(driver, "c").gen, iteration=500))
    driver.at(11.0).cancel("c")  # its script saves on: stopped as asked
    driver.launcher.exit("c", -15)
    driver.at(11.5).tick()
    await driver.close()


def emfile() -> OSError:
    """What a launch raises when the node is out of file descriptors (`daemons_own`)."""
    return OSError(errno.EMFILE, os.strerror(errno.EMFILE))


async def launch_failures(driver: Driver) -> None:
    """Launches that raise (`LaunchFailed`): `a`'s twice for the node's lack (EMFILE: tried
    again after 0.5 s, then 1 s, then it starts), `b`'s refused (its program missing: its
    failure), and `c`'s, on the GPU `b` freed, short twice and cancelled while it waits to
    be tried again (forgotten)."""
    launcher = driver.launcher
    launcher.failures["a"] = [emfile(), emfile()]
    launcher.failures["b"] = [FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), "x")]
    launcher.failures["c"] = [emfile(), emfile()]
    for job, model in FAILURES.models.items():
        driver.at(0.0).submit(job, model=model)
    driver.at(1.0).tick()  # `a` and `b` launch; `a` waits to be tried again, `b` failed
    assert driver.state("a") == "starting" and driver.state("b") == "failed"
    # `a` is tried at 1.6 (fails again) and 2.7 (starts); `c` takes `b`'s GPU and launches
    # at 2.0 (the node is short), is tried at 2.7 (short again), to be tried at 3.7
    for second in (1.2, 1.6, 2.0, 2.7):
        driver.at(second).tick()
    assert launcher.launched() == ["a"], "a started at its third try, c not yet"
    driver.at(3.0)
    hello(driver, "a", 47_000)
    assert driver.state("c") == "starting"
    driver.at(3.2).cancel("c")  # before its retry: it is forgotten
    driver.at(4.5).tick()
    assert launcher.launched() == ["a"] and driver.state("c") == "cancelled"
    driver.at(5.0)
    heartbeat(driver, "a", 10)
    await driver.close()


# A refit's report whose held-out R^2 the core trusts (scheduler/refit.py).
TRUSTED_FIT: dict[str, object] = {
    "training": {"chosen": "linear", "candidates": {"linear": {"r2": 0.99}}},
    "loading": {"r2": 0.99},
}


async def restart(driver: Driver) -> None:
    """A kill -9 of the daemon and a second one on its state dir: a running job whose agent
    outlived it is held for its hello (`Restored`), then taken over (`Reattached`); one whose
    agent is gone, and one that never launched, are given back (`Released`) and submitted
    again; then a refit (`ModelRefitted`) and the jobs' ends."""
    for job, model in RESTART.models.items():
        driver.at(0.0).submit(job, model=model, max_restarts=1)
    driver.at(1.0).tick()  # `a` and `b` launch, `c` waits for a GPU
    for job in ("a", "b"):
        driver.at(1.5)
        hello(driver, job, 45_000)
    for second in (2.0, 3.0):
        for job in ("a", "b"):
            driver.at(second)
            heartbeat(driver, job, int(second * 10))
    agent = driver.launcher.live["a"]
    gen, workers = launched(driver, "a").gen, launched(driver, "a").allocation.workers_per_gpu
    driver.launcher.stop("b")  # its process died while no daemon watched
    driver.at(4.0).restart()
    assert driver.service.restorer.awaiting("a"), "its agent outlived the daemon"
    assert driver.state("b") == "submitted" and driver.state("c") == "submitted"
    hi = Hello(job="a", gen=gen, pid=agent, state="running", iteration=40, workers=workers)
    driver.at(4.5).agent(hi)
    assert driver.state("a") == "running", "re-attached"
    driver.at(5.5).tick()  # the arrival window closes: `b` launches again
    driver.at(6.0).refit(TRUSTED_FIT)
    driver.at(6.5)
    hello(driver, "b", 45_001)
    driver.at(7.0).agent(FinishedMessage(job="a", gen=gen, iteration=500))
    driver.launcher.exit("a", 0)
    for second in (7.5, 8.5):  # `c` takes `a`'s GPU, and `b` is asked to give workers up
        driver.at(second).tick()
    driver.at(9.0).agent(PausedMessage(job="b", gen=pauses(driver)[-1].gen, iteration=60))
    (resume,) = [c for c in driver.fed[-2].commands if isinstance(c, Resume)]  # [-1]: a tick
    driver.at(9.5)
    hello(driver, "c", 45_002)
    workers = resume.allocation.workers_per_gpu
    driver.at(9.5).agent(ResumedMessage(job="b", gen=resume.gen, workers=workers, gap_s=0.5))
    driver.at(11.0).tick()
    await driver.close()


ROUNDS = Scenario("rounds", rounds, {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"})
CANCELS = Scenario("cancels", cancels, {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"})
SILENCE = Scenario(
    "silence",
    silence,
    {"a": "Resnet18", "b": "Resnet18"},
    scheduler={"heartbeat_timeout_s": 3.0, "stall_timeout_s": 3.5},
    heartbeat_s=1.0,
)
COLD = Scenario("cold resize", cold_resize, {"a": "Resnet18", "d": "Resnet18", "c": "smResnet20"})

RESTART = Scenario("restart", restart, {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"})

STOPS = Scenario(
    "stops",
    stops,
    {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"},
    scheduler={"finished_exit_s": 4.0},
)

FAILURES = Scenario(
    "launch failures",
    launch_failures,
    {"a": "Resnet18", "b": "Resnet18", "c": "smResnet20"},
    incidents={"a": {"launch_short": 2}, "c": {"launch_short": 2}},
)

SCENARIOS = (ROUNDS, CANCELS, SILENCE, COLD, RESTART, STOPS, FAILURES)
