"""A command job's processes through a daemon's stops and restarts, and after its end: the
daemon's decisions, on the service harness's hand-held clock (the scenarios of
tests/integration/test_command_jobs.py whose property is the decision, not the script's
behaviour; that file keeps one real end-to-end test of each feature)."""

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.protocol import FinishedMessage, Hello
from cli.job_view import _described
from daemon.api.views import job_view
from daemon.config import NodeConfig
from daemon.launcher import log_file
from scheduler.config import SchedulerConfig
from tests.unit.daemon.service_harness import Driver

NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)
ONE_SLOT = NodeConfig(gpus=1, cpu_workers=8, max_jobs_per_gpu=1)  # one job at a time
# A command reads as `starting` for a minute before it is taken for one without the SDK;
# a restarted daemon waits a second for a hello.
FIRST_SECONDS: dict[str, Any] = {"node": ONE_SLOT, "reattach_timeout_s": 1.0}
EARLY = replace(NOW, unmanaged_after_s=60.0)


def command(*args: str, **spec: Any) -> dict[str, Any]:
    """A command job's spec: its script's argv; no model, no length of its own."""
    return {"model": None, "iterations": None, "command": ["python", *args], **spec}


async def stop(driver: Driver, how: str) -> None:
    """The daemon stopped by `how` (a kill -9, or a clean stop's SIGTERM), and another
    started on its state dir, restoring its jobs."""
    if how == "SIGTERM":
        await driver.stop()  # the processes it leaves running stay live
    driver.restart()


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_a_command_in_its_first_seconds_outlives_a_daemon_stop_and_is_not_run_twice(
    tmp_path: Path, how: str
) -> None:
    # Stopped before the command could be taken for one without the SDK (it said no hello
    # in `unmanaged_after_s`): the next daemon waits for its hello, then adopts it.
    async def scenario() -> None:
        driver = Driver(tmp_path, EARLY, **FIRST_SECONDS)
        driver.at(1.0).submit("early", max_restarts=1, **command("plain.py", "8", "0"))
        driver.at(3.0).tick()
        assert driver.state("early") == "starting"
        stored = driver.service.store.job("early")
        assert stored is not None and stored.pid is not None
        pid = stored.pid
        await stop(driver, how)
        driver.at(3.5).tick()
        assert driver.service.scheduler.awaiting_hello("early"), "its hello awaited"
        driver.at(4.5).tick()  # a second without a hello: adopted as it runs
        assert driver.service.scheduler.status("early").unmanaged
        assert driver.launcher.live["early"] == pid, "the same process, not stopped"
        assert driver.state("early") == "running"
        driver.launcher.exit("early", None)  # not this daemon's child: no exit code read
        driver.at(9.0).tick()
        done = driver.service.store.job("early")
        assert done is not None and (done.state, done.restarts) == ("completed", 0)
        assert driver.launcher.launched() == ["early"], "one run, never started again"
        await driver.close()

    asyncio.run(scenario())


def test_a_command_in_its_first_seconds_that_ends_while_no_daemon_runs_is_not_run_again(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, EARLY, **FIRST_SECONDS)
        driver.at(1.0).submit("brief", max_restarts=1, **command("plain.py", "2", "0"))
        assert driver.state("brief") == "starting"
        await driver.stop()  # a clean stop leaves it running; it ends meanwhile
        assert "brief" in driver.launcher.live, "left running"
        driver.launcher.live.pop("brief")
        driver.at(5.0).restart()
        driver.at(6.5).tick()  # the second a hello is awaited, if it is, has passed
        done = driver.service.store.job("brief")
        assert done is not None and (done.state, done.restarts) == ("completed", 0), done
        assert "not run again" in driver.service.store.reason("brief")
        assert driver.launcher.launched() == ["brief"], "one run"
        await driver.close()

    asyncio.run(scenario())


def test_a_cancelled_script_the_killed_daemon_was_stopping_is_stopped_by_the_new_one(
    tmp_path: Path,
) -> None:
    # Cancelled, it ignored SIGTERM; the daemon was killed before its SIGKILL 5 s later.
    # Left alone, it would run on beside the jobs the new daemon starts on its slot.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_SLOT)
        driver.at(1.0).submit("stubborn", **command("plain.py", "120", "0"))
        driver.launcher.stop = lambda job_id, grace_s=5.0: None  # type: ignore[method-assign]
        driver.at(2.0).cancel("stubborn")
        assert driver.state("stubborn") == "cancelled"
        assert driver.launcher.running("stubborn"), "it outlives the daemon"
        driver.at(3.0).restart()
        assert driver.state("stubborn") == "cancelled"
        assert not driver.launcher.running("stubborn"), "the new daemon stopped it"
        await driver.close()

    asyncio.run(scenario())


def shown(driver: Driver, job_id: str) -> dict[str, Any]:
    """The job as the API shows it (GET /v1/jobs/ID)."""
    record = driver.service.store.job(job_id)
    assert record is not None, job_id
    return job_view(driver.service, record).model_dump(mode="json")


def test_the_next_job_gets_the_slot_once_the_finished_script_has_exited(
    tmp_path: Path,
) -> None:
    # The first job saves after its final step, on the node's one training slot (a GPU on
    # a GPU node): the second starts only after that, and says what it waits for.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_SLOT, finished_exit_s=60.0)
        saving = command("count_train.py", "1", "0", env={"EVAL_S": "8"})
        driver.at(1.0).submit("saving", **saving)
        driver.at(1.0).submit("next", **command("plain.py", "0", "0"))
        driver.at(1.5).agent(Hello(job="saving", gen=1, pid=40_001))
        driver.at(2.0).agent(FinishedMessage(job="saving", gen=1, iteration=24))
        done = shown(driver, "saving")
        assert done["state"] == "completed", done
        assert driver.launcher.running("saving"), "its script saves after its final step"
        assert done["exiting"] is True and done["gpu_indices"] == [0], done
        driver.at(9.0).tick()
        waiting = shown(driver, "next")
        assert waiting["state"] == "submitted", waiting
        assert "job(s) saving ended but keep theirs until" in waiting["reason"], waiting
        said = dict(_described(done, {}, driver.clock.now, "GPU"))  # `stoker show`'s lines
        assert said["state"].endswith("its GPUs are kept until they exit"), said
        assert not said["workers"], "it has none now"
        assert driver.launcher.launched() == ["saving"]
        driver.launcher.exit("saving", 0)  # its save done, 8 s after its final step
        driver.at(10.0).tick()
        assert driver.launcher.launched() == ["saving", "next"], "after the first's exit"
        driver.launcher.exit("next", 0)
        driver.at(11.0).tick()
        assert driver.state("next") == "completed"
        gone = shown(driver, "saving")
        assert gone["exiting"] is False and gone["gpu_indices"] == [], gone
        # It exited cleanly after its final step: completed, with its exit code, no failure.
        assert gone["state"] == "completed" and gone["exit_code"] == 0, gone
        assert gone["failed_after_end"] is False
        await driver.close()

    asyncio.run(scenario())


def test_a_command_without_the_sdk_runs_unmanaged_and_ends_by_its_exit_code(
    tmp_path: Path,
) -> None:
    # No hello in `unmanaged_after_s`: it runs unmanaged, never paused for a job that comes
    # after it; it, and others without the SDK, end by their exit codes.
    async def scenario() -> None:
        quick = replace(NOW, unmanaged_after_s=1.0)
        driver = Driver(tmp_path, quick, node=NodeConfig(gpus=3, cpu_workers=3))
        driver.at(1.0).submit("plain", batch_size=8, **command("plain.py", "8", "0"))
        driver.at(2.5).tick()
        assert [event["unmanaged"] for event in driver.events("plain", "unmanaged")] == [True]
        running = shown(driver, "plain")
        assert running["unmanaged"] is True and running["state"] == "running", running
        said = dict(_described(running, {}, driver.clock.now, "CPU slot"))  # `stoker show`
        assert said["progress"] == "not known: it runs without the SDK, which would report it"
        assert said["workers"].startswith("its script's own (it runs without the SDK")
        assert said["gpus"].endswith(", global batch 8 as submitted (without the SDK it says none)")
        driver.at(3.0).submit("sdk", batch_size=8, **command("count_train.py", "1", "0"))
        driver.at(3.0).submit("quick", batch_size=8, **command("plain.py", "0", "0"))
        driver.at(3.0).submit("broken", batch_size=8, **command("plain.py", "0.5", "3"))
        driver.at(3.5).agent(Hello(job="sdk", gen=1, pid=40_002))
        driver.launcher.exit("quick", 0)
        stderr = log_file(driver.service.launcher.job_dir("broken"), "stderr", 0)
        stderr.write_text("plain: giving up with 3\n")  # what the script says as it exits
        driver.launcher.exit("broken", 3)
        driver.at(4.0).tick()
        driver.at(5.0).agent(FinishedMessage(job="sdk", gen=1, iteration=12))
        driver.launcher.exit("sdk", 0)
        driver.launcher.exit("plain", 0)
        driver.at(9.0).tick()
        jobs = {job: shown(driver, job) for job in ("plain", "sdk", "quick", "broken")}
        moves = [event["to"] for event in driver.events("plain", "state")]
        assert jobs["plain"]["state"] == "completed" and "pausing" not in moves, "never paused"
        assert jobs["sdk"]["state"] == "completed" and jobs["quick"]["state"] == "completed"
        assert not jobs["sdk"]["unmanaged"], "it said hello"
        assert jobs["broken"]["state"] == "failed" and jobs["broken"]["restarts"] == 0
        failed = driver.events("broken", "state")[-1]
        assert "exited with code 3" in failed["why"] and "giving up with 3" in failed["why"]
        assert jobs["broken"]["reason"] == failed["why"], "the job says why it failed"
        assert driver.launcher.launched().count("plain") == 1
        await driver.close()

    asyncio.run(scenario())


def test_a_command_without_the_sdk_outlives_daemon_restarts_and_keeps_its_work(
    tmp_path: Path,
) -> None:
    # It has no checkpoint: stopped and relaunched, it would start over. A daemon killed,
    # then one stopped cleanly, each leave it running, and the next adopts it as it runs.
    async def scenario() -> None:
        quick = replace(NOW, unmanaged_after_s=1.0)
        driver = Driver(tmp_path, quick, node=ONE_SLOT)
        driver.at(1.0).submit("plain", max_restarts=0, **command("plain.py", "14", "0"))
        driver.at(2.5).tick()
        assert [event["unmanaged"] for event in driver.events("plain", "unmanaged")] == [True]
        pid = driver.launcher.live["plain"]
        await stop(driver, "SIGKILL")
        again = shown(driver, "plain")
        assert (again["state"], again["restarts"], again["unmanaged"]) == ("running", 0, True)
        assert "runs without the SDK and outlived the daemon" in again["reason"], again
        driver.at(5.0).tick()
        await stop(driver, "SIGTERM")
        assert driver.launcher.live["plain"] == pid, "a clean stop leaves it running too"
        driver.launcher.exit("plain", None)  # not this daemon's child: no exit code read
        driver.at(15.0).tick()
        done = shown(driver, "plain")
        assert done["state"] == "completed" and done["restarts"] == 0, done
        assert "left no exit code this daemon could read" in done["reason"], done
        assert driver.launcher.launched() == ["plain"], "one run, never restarted"
        await driver.close()

    asyncio.run(scenario())
