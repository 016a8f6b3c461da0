"""A launch that fails for the daemon's own reasons (no file descriptors, memory or
processes left) is tried again after a pause, and is neither the job's failure nor one of
its restarts (issue 37, the launch half of finding 2); one that fails for the job's (its
program missing) fails it as before. The OSError is raised where Popen would raise it."""

import asyncio
import errno
from collections.abc import Mapping, Sequence
from pathlib import Path

from agents.protocol import Hello
from daemon.eventlog import RETRY_EVENT
from scheduler.config import SchedulerConfig
from tests.unit.daemon.service_harness import Driver

NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)


def failing_launches(driver: Driver, errors: list[OSError]) -> None:
    """The driver's launcher raises `errors`, one a launch, before it starts as usual."""
    launcher = driver.launcher
    started = launcher.launch

    def launch(job_id: str, argv: Sequence[str], env: Mapping[str, str]) -> int:
        if errors:
            raise errors.pop(0)
        return started(job_id, argv, env)

    launcher.launch = launch  # type: ignore[method-assign]


def test_a_launch_out_of_file_descriptors_waits_and_is_tried_again(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=0)
        out_of_files = [OSError(errno.EMFILE, "Too many open files")] * 2
        failing_launches(driver, out_of_files)
        driver.at(1.0).submit("a")
        assert driver.state("a") == "starting", "not failed: the node's lack, not the job's"
        assert driver.launcher.launched() == []
        driver.at(1.6).tick()  # the first pause (0.5 s) passed: tried, failed again
        assert driver.launcher.launched() == [] and driver.state("a") == "starting"
        driver.at(2.0).tick()  # the second pause (1 s) has not
        assert driver.launcher.launched() == []
        driver.at(2.7).tick()
        assert driver.launcher.launched() == ["a"]
        driver.at(3.0).agent(Hello(job="a", gen=1, pid=40_001))
        assert driver.state("a") == "running"
        stored = driver.service.store.job("a")
        assert stored is not None and stored.restarts == 0
        said = driver.events("a", RETRY_EVENT)
        assert [event["tries"] for event in said] == [1, 2]
        assert "Too many open files" in said[0]["why"]
        await driver.close()

    asyncio.run(scenario())


def test_a_launch_of_a_missing_program_fails_the_job_as_before(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=0)
        missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "nope")
        failing_launches(driver, [missing])
        driver.at(1.0).submit("a", model=None, command=["nope"], iterations=None)
        assert driver.state("a") == "failed"
        assert driver.events("a", RETRY_EVENT) == []
        await driver.close()

    asyncio.run(scenario())


def test_a_launch_waiting_to_be_tried_again_is_dropped_when_the_job_is_cancelled(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        failing_launches(driver, [OSError(errno.EAGAIN, "Resource temporarily unavailable")])
        driver.at(1.0).submit("a")
        driver.at(1.2).cancel("a")
        driver.at(5.0).tick()
        assert driver.launcher.launched() == [] and driver.state("a") == "cancelled"
        await driver.close()

    asyncio.run(scenario())
