"""The daemon's service on its own: the core's commands carried out against a real SQLite
state dir, on a hand-held clock, with recorded processes (tests/unit/daemon/service_harness)."""

import asyncio
import logging
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from agents.protocol import (
    LAST_STEP_MARKER,
    PROTOCOL_VARIABLE,
    VERSION,
    AgentMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricPoint,
    MetricsMessage,
    PausedMessage,
    write_finished_marker,
    write_last_step_marker,
)
from daemon.agentargs import PASSED_ON
from daemon.api import submit_under_a_free_id
from daemon.config import NodeConfig
from daemon.dashboard import gpu_idle
from daemon.items import FromAgent, IdTaken
from daemon.jobbook import new_job_id
from daemon.restore import Restorer
from daemon.store import Store
from daemon.wording import waiting_words
from scheduler.config import SchedulerConfig
from tests.unit.daemon.service_harness import Driver

# Windows of 0, and the 10-s silence limit these scenarios were written around.
NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)
ONE_GPU = NodeConfig(gpus=1, cpu_workers=8, max_jobs_per_gpu=1)  # one job at a time


def test_a_submitted_job_is_placed_launched_and_recorded(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a", gpus=2)
        assert driver.state("a") == "starting"
        stored = driver.service.store.job("a")
        assert stored is not None and stored.placement == (0, 1) and stored.pid == 40_001
        ((job_id, argv, env),) = driver.launcher.launches
        assert job_id == "a" and argv[argv.index("--job") + 1] == "a"
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and "PYTHONPATH" in env
        ours = {"PYTHONPATH", "CUDA_VISIBLE_DEVICES", "STOKER_JOB_ID", "STOKER_JOB_DIR"}
        ours |= {"STOKER_AGENT_SECRET", PROTOCOL_VARIABLE}
        assert set(env) <= {*PASSED_ON, *ours}, "no token"
        assert env[PROTOCOL_VARIABLE] == str(VERSION), "the version this daemon reads"
        assert env["STOKER_JOB_DIR"] == str(driver.service.launcher.jobs_dir / "a")
        moves = [(e["from"], e["to"]) for e in driver.events("a", "state")]
        assert moves == [("submitted", "pending"), ("pending", "starting")]
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        node = driver.service.snapshot()
        assert node.jobs["a"].gpu_indices == (0, 1)
        allocation = node.jobs["a"].allocation
        assert allocation is not None
        assert node.loader_processes == 2 * allocation.workers_per_gpu
        await driver.close()

    asyncio.run(scenario())


def test_a_job_waiting_for_gpus_is_cancelled_without_ever_holding_one(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a", gpus=2)
        driver.at(2.0).submit("b")
        assert driver.service.snapshot().waiting_for_gpus == ("b",)
        driver.at(3.0).cancel("b")
        assert driver.state("b") == "cancelled"
        assert driver.events("b", "state")[-1]["why"] == "cancelled by alice while waiting"
        stored = driver.service.store.job("b")
        assert stored is not None and stored.placement == ()
        assert driver.launcher.launched() == ["a"]
        await driver.close()

    asyncio.run(scenario())


def beat(job: str, gen: int, iteration: int) -> HeartbeatMessage:
    return HeartbeatMessage(
        job=job,
        gen=gen,
        iteration=iteration,
        samples=64 * iteration,
        idle_s=0.1,
        step_s=0.9,
        samples_per_s=64.0,
        workers=2,
    )


def test_an_agent_that_dies_is_relaunched_within_its_restarts_then_fails(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=1)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(1.8).agent(beat("a", 1, 30))  # it made progress
        driver.launcher.exit("a", 1)
        driver.at(2.0).tick()
        assert driver.events("a", "restart") == [{"restarts": 1, "why": "exited with code 1"}]
        assert driver.events("a", "state")[-1]["why"] == "restart 1 in 10 s: exited with code 1"
        driver.at(11.9).tick()
        assert len(driver.launcher.launches) == 1, "it backs off 10 s (restart_backoff_s)"
        driver.at(12.0).tick()
        assert driver.launcher.launched() == ["a", "a"]
        stored = driver.service.store.job("a")
        assert stored is not None and stored.restarts == 1 and driver.state("a") == "starting"
        driver.at(12.5).agent(Hello(job="a", gen=2, pid=40_002, iteration=20))
        driver.at(12.8).agent(beat("a", 2, 45))
        driver.launcher.exit("a", -9)
        driver.at(13.0).tick()
        assert driver.state("a") == "failed"
        assert driver.events("a", "state")[-1]["why"] == "killed by signal 9 (SIGKILL)"
        await driver.close()

    asyncio.run(scenario())


def test_a_job_that_fails_before_its_first_step_is_not_relaunched(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=3)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.launcher.exit("a", 1)
        driver.at(2.0).tick()
        assert driver.state("a") == "failed"
        assert len(driver.launcher.launches) == 1, "one launch only"
        why = driver.events("a", "state")[-1]["why"]
        assert why == "exited with code 1; not relaunched: it failed before its first step"
        await driver.close()

    asyncio.run(scenario())


def test_a_crash_s_exit_read_before_its_last_heartbeat_still_counts_its_steps(
    tmp_path: Path,
) -> None:
    # The agent's last heartbeat and its exit come by separate ways: the exit may be seen
    # first. The marker it left says the steps it completed, as `finished.json` does.
    async def scenario() -> None:
        driver = Driver(tmp_path, replace(NOW, restart_backoff_s=0.0), max_restarts=3)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        write_last_step_marker(driver.service.launcher.job_dir("a"), 4)
        driver.launcher.exit("a", 1)
        driver.at(2.0).tick()
        assert len(driver.launcher.launches) == 2, "relaunched: it had made progress"
        assert not (driver.service.launcher.job_dir("a") / LAST_STEP_MARKER).exists()
        await driver.close()

    asyncio.run(scenario())


def test_a_job_that_fails_twice_at_one_iteration_is_not_relaunched_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="daemon.actions")

    async def scenario() -> None:
        driver = Driver(tmp_path, replace(NOW, restart_backoff_s=0.0), max_restarts=5)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(1.8).agent(beat("a", 1, 30))
        driver.launcher.exit("a", 1)  # a bug at iteration 30
        driver.at(2.0).tick()
        driver.at(2.5).agent(Hello(job="a", gen=2, pid=40_002, iteration=20))
        driver.at(2.8).agent(beat("a", 2, 30))
        driver.launcher.exit("a", 1)  # the same bug, at the same iteration
        driver.at(3.0).tick()
        assert driver.state("a") == "failed"
        assert len(driver.launcher.launches) == 2
        why = driver.events("a", "state")[-1]["why"]
        assert why.endswith("not relaunched: it failed twice after completing step 30")
        await driver.close()
        # The operator's line: how it ended and why it stays ended, not its stderr.
        (line,) = [r.getMessage() for r in caplog.records if "job a: failed" in r.getMessage()]
        assert line.startswith("job a: failed (exited with code 1")
        assert line.endswith("not relaunched: it failed twice after completing step 30)")

    asyncio.run(scenario())


def test_a_job_that_ends_keeps_the_steps_it_reached_in_the_store(tmp_path: Path) -> None:
    # Heartbeats' iterations are not written as they come: what a restarted daemon shows of
    # a cancelled or failed job is what was written when it ended.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=0)
        for job_id in ("a", "b"):
            driver.at(1.0).submit(job_id)
        for pid, job_id in enumerate(("a", "b"), start=40_001):
            driver.at(1.5).agent(Hello(job=job_id, gen=1, pid=pid))
        driver.at(1.8).agent(beat("a", 1, 25))
        driver.at(1.8).agent(beat("b", 1, 12))
        driver.at(2.0).cancel("a")
        driver.launcher.exit("b", 1)
        driver.at(2.5).tick()
        assert (driver.state("a"), driver.state("b")) == ("cancelled", "failed")
        stored = {job_id: driver.service.store.job(job_id) for job_id in ("a", "b")}
        assert {job_id: r.iteration for job_id, r in stored.items() if r} == {"a": 25, "b": 12}
        await driver.close()

    asyncio.run(scenario())


def test_a_busy_heartbeat_becomes_a_training_sample_once_per_period(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, tpm_sample_every_s=5.0)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        # Each heartbeat tells of the seconds since the one before: 1 % waiting, 99 % busy.
        for second, since, iteration in ((2.0, 0.5, 10), (4.0, 2.0, 20), (8.0, 4.0, 40)):
            driver.at(second).agent(
                HeartbeatMessage(
                    job="a",
                    gen=1,
                    iteration=iteration,
                    samples=iteration * 64,
                    idle_s=0.01 * since,
                    step_s=0.99 * since,
                    samples_per_s=640.0,
                    workers=2,
                )
            )
        (row,) = driver.service.store.samples("training")
        assert float(row["step_time_s"]) == pytest.approx(6.0 / 30)  # busy 6 s over 30 steps
        assert driver.service.snapshot().counts.telemetry_samples == 1
        measured = driver.service.snapshot().jobs["a"].heartbeat
        assert measured is not None and measured.idle_fraction == pytest.approx(0.01)
        await driver.close()

    asyncio.run(scenario())


def test_a_restart_brings_back_each_job_as_the_core_decides(tmp_path: Path) -> None:
    async def first_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        for job in ("done", "lost", "queued"):
            driver.at(1.0).submit(job, gpus=1)
        for job, pid in (("done", 40_001), ("lost", 40_002)):
            driver.at(1.5).agent(Hello(job=job, gen=1, pid=pid))
        driver.killed()

    asyncio.run(first_daemon())
    write_finished_marker(tmp_path / "state" / "jobs" / "done", 500)

    async def second_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        driver.service.restorer.restore()
        assert driver.state("done") == "completed"  # it finished while no daemon listened
        # No agent runs with the recorded pid: relaunched, counting one restart.
        stored = driver.service.store.job("lost")
        assert stored is not None and stored.restarts == 1 and driver.state("lost") == "starting"
        queued = driver.service.store.job("queued")
        assert queued is not None and queued.restarts == 0, "it never started: no restart"
        await driver.close()

    asyncio.run(second_daemon())


def test_a_node_configured_smaller_keeps_what_it_cannot_place_waiting(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_GPU)
        driver.at(1.0).submit("a")
        driver.at(1.0).submit("b")
        assert driver.service.snapshot().waiting_for_gpus == ("b",)
        assert driver.state("b") == "submitted"
        await driver.close()
        db = sqlite3.connect(tmp_path / "state" / "stoker.db")
        assert db.execute("SELECT placement FROM jobs WHERE id = 'b'").fetchone() == ("[]",)

    asyncio.run(scenario())


def test_a_checkpoint_outside_the_jobs_folder_is_never_kept_nor_started_from(
    tmp_path: Path,
) -> None:
    """Issue 17, finding 4: a forged `paused` naming /tmp/evil.pt was stored, and the next
    launch started from it."""
    evil = tmp_path / "evil.pt"
    evil.write_text('{"iteration": 999999}')

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        job_dir = driver.service.launcher.job_dir("a")
        link = job_dir / "link.json"
        link.symlink_to(evil)  # inside by its name, outside where it leads
        for forged in (str(evil), str(job_dir / ".." / ".." / "evil.pt"), str(link)):
            driver.at(2.0).agent(PausedMessage(job="a", gen=1, iteration=5, checkpoint=forged))
            stored = driver.service.store.job("a")
            assert stored is not None and stored.checkpoint == "", forged
        own = job_dir / "checkpoint.json"
        own.write_text('{"iteration": 5}')
        driver.at(2.5).agent(PausedMessage(job="a", gen=1, iteration=5, checkpoint=str(own)))
        stored = driver.service.store.job("a")
        assert stored is not None and stored.checkpoint == str(own), "its own: kept"
        await driver.close()

    asyncio.run(scenario())


def test_a_new_jobs_id_that_is_taken_is_drawn_again_never_a_500(tmp_path: Path) -> None:
    """Issue 17, finding 9: two random ids collided in 8,000 same-name submissions and the
    insert's IntegrityError answered 500."""

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        writer = asyncio.create_task(driver.service.run())
        driver.at(1.0).submit("twin-000000000000")
        taken = replace(driver.service.records["twin-000000000000"], state="submitted")
        with pytest.raises(IdTaken):  # the writer refuses it, and writes nothing
            await driver.service.submit(taken)
        kept = await submit_under_a_free_id(driver.service, taken)
        assert kept.id != taken.id and kept.id.startswith("twin-000000000000"[:40] + "-")
        assert {record.id for record in driver.service.store.jobs(None)} == {taken.id, kept.id}
        writer.cancel()
        await driver.close()

    asyncio.run(scenario())


def test_job_ids_carry_48_random_bits() -> None:
    drawn = {new_job_id("same") for _ in range(20_000)}
    assert len(drawn) == 20_000 and all(len(i) == len("same-") + 12 for i in drawn)


@pytest.mark.parametrize("mode", ["required", "when-sent"])
def test_an_agent_proves_its_launch_and_after_that_nothing_else_speaks_for_the_job(
    tmp_path: Path, mode: str
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, agent_secrets=mode)
        driver.at(1.0).submit("a")
        ((_, _, env),) = driver.launcher.launches
        secret = env["STOKER_AGENT_SECRET"]
        stored = driver.service.store.job("a")
        assert stored is not None and stored.agent_secret == secret and secret not in repr(stored)
        legacy = Hello(job="a", gen=1, pid=40_001)
        # An older SDK sends none: refused, unless the node is told to take it at its word.
        assert driver.service.authentic(legacy) is (mode == "when-sent")
        assert not driver.service.authentic(legacy.model_copy(update={"secret": "a-guess"}))
        assert driver.service.authentic(legacy.model_copy(update={"secret": secret}))
        assert not driver.service.authentic(legacy), "once proved, a message without it is not"
        await driver.close()

    asyncio.run(scenario())


def test_an_agent_launched_without_a_secret_is_taken_back_after_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon from before launch secrets left a running job; its agent, which carries
    none, says hello to the next daemon. The check that refuses unproved messages for jobs
    without an agent asked the core about the job, which a restore holds but does not plan
    yet: it raised, and on the agent link that ended the link's task."""

    async def first_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("old", gpus=1)
        driver.at(1.5).agent(Hello(job="old", gen=1, pid=40_001))
        driver.service.store.update_job("old", 0.0, agent_secret="")  # as that daemon left it
        driver.killed()

    asyncio.run(first_daemon())
    monkeypatch.setattr("daemon.restore.is_agent", lambda pid, job_id, folder: pid == 40_001)

    async def second_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        driver.service.restorer.restore()
        assert driver.service.restorer.awaiting("old")
        hello = Hello(job="old", gen=1, pid=40_001, state="running", iteration=7, workers=4, v=6)
        assert driver.service.launched_by(hello), "the link's question, answered"
        driver.at(2.0).agent(hello)
        assert driver.state("old") == "running", "re-attached"
        # An SDK from before the daemon's upgrade: it would refuse a message of version 7.
        assert driver.service.keys.version("old", 7) == 6
        await driver.close()

    asyncio.run(second_daemon())


def test_no_unproved_message_speaks_for_a_job_waiting_for_its_relaunch(tmp_path: Path) -> None:
    """With `agent_secrets = "when-sent"` an older SDK's agent is taken at its word until it
    sends the secret; a job that failed and waits for its relaunch has no agent, so a
    `finished` without the secret must not complete it unrun."""

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, agent_secrets="when-sent")
        driver.at(1.0).submit("a")
        older_sdk: list[AgentMessage] = [Hello(job="a", gen=1, pid=40_001), beat("a", 1, 30)]
        # ... each without a secret, as an SDK from before secrets sends them
        for seconds, message in zip((1.5, 1.8), older_sdk, strict=True):
            driver.at(seconds).service.step(FromAgent(message))  # as it comes off the socket
        assert driver.state("a") == "running"
        driver.launcher.exit("a", 1)
        driver.at(2.0).tick()
        assert driver.state("a") == "submitted", "waiting out its back-off"
        forged = FinishedMessage(job="a", gen=1, iteration=30)
        assert not driver.service.authentic(forged)
        driver.service.step(FromAgent(forged))  # as it comes off the socket: no secret
        assert driver.state("a") == "submitted"
        await driver.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("node", "cores"),
    [
        (NodeConfig(gpus=0, cpu_slots=2, cpu_workers=4), True),  # trains on its CPUs
        (NodeConfig(gpus=0, cpu_slots=2, cpu_workers=4, cpu_sets=True), False),  # own cores
        (NodeConfig(gpus=1, cpu_workers=4), False),  # the loaders have the CPUs
    ],
)
def test_a_node_that_trains_on_shared_cpus_is_planned_on_one_budget_of_them(
    tmp_path: Path, node: NodeConfig, cores: bool
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=node)
        planned = driver.service.scheduler.node.cpu_cores
        assert planned == (float(driver.service.node.cpus.usable) if cores else None)
        await driver.close()

    asyncio.run(scenario())


def test_the_writer_stops_when_it_is_cancelled_as_an_item_arrives(tmp_path: Path) -> None:
    # A stop cancels the writer; an agent's message may come in the same turn of the loop.
    # Python 3.11's asyncio.wait_for then returned the message and dropped the cancel, and
    # the writer went on: a daemon that a SIGTERM never ended (make test, twice).
    async def scenario() -> None:
        driver = Driver(tmp_path, SchedulerConfig())
        writer = asyncio.create_task(driver.service.run())
        await asyncio.sleep(0.05)  # it waits for an item, within its poll
        await driver.service.deliver(FinishedMessage(job="ghost", gen=1))  # does not yield
        writer.cancel()
        done, _ = await asyncio.wait([writer], timeout=2.0)
        assert writer in done and writer.cancelled()
        await driver.close()

    asyncio.run(scenario())


def test_a_finished_jobs_script_may_go_on_until_finished_exit_s(tmp_path: Path) -> None:
    # After its final step a script may evaluate or save for a while: a lost or failed
    # job's processes are stopped after 5 s, a completed one's only after finished_exit_s.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, finished_exit_s=60.0)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(2.0).agent(FinishedMessage(job="a", gen=1, iteration=500))
        assert driver.state("a") == "completed"
        driver.at(30.0).tick()
        assert driver.launcher.running("a"), "its evaluation goes on"
        driver.at(63.0).tick()
        assert not driver.launcher.running("a"), "stopped once finished_exit_s passed"
        await driver.close()

    asyncio.run(scenario())


def test_the_next_job_starts_on_a_gpu_only_once_the_last_ones_processes_are_gone(
    tmp_path: Path,
) -> None:
    # On a GPU node the next job's CUDA context would meet a finished script still
    # evaluating there, or a cancelled one in its grace: the GPU waits for their exit.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_GPU, finished_exit_s=60.0)

        driver.at(1.0).submit("a")
        driver.at(1.0).submit("b")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(2.0).agent(FinishedMessage(job="a", gen=1, iteration=500))
        assert driver.state("a") == "completed"
        driver.at(20.0).tick()
        assert driver.launcher.launched() == ["a"], (
            "a's script runs on after its final step on GPU 0"
        )
        assert driver.service.snapshot().waiting_for_gpus == ("b",)
        (gpu,) = gpu_idle(driver.service.snapshot())
        assert (gpu["jobs"], gpu["exiting"], gpu["idle_fraction"]) == (0, 1, 1.0)
        driver.launcher.exit("a", 0)
        driver.at(21.0).tick()
        assert driver.launcher.launched() == ["a", "b"]
        driver.at(21.5).agent(Hello(job="b", gen=2, pid=40_002))
        driver.at(22.0).submit("c")
        driver.at(23.0).cancel("b")
        driver.at(24.0).tick()
        assert driver.launcher.launched() == ["a", "b"], "b is still stopping"
        driver.at(29.0).tick()  # not gone 5 s after the cancel: stopped
        assert driver.launcher.launched() == ["a", "b", "c"]
        await driver.close()

    asyncio.run(scenario())


def test_a_failed_or_cancelled_job_still_running_keeps_its_gpu_until_stopped(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_GPU, finished_exit_s=60.0)

        driver.at(1.0).submit("a", max_restarts=0)
        driver.at(1.0).submit("b")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(2.0).agent(FailedMessage(job="a", gen=1, error="boom"))  # said, then exits
        assert driver.state("a") == "failed"
        driver.at(3.0).tick()
        assert driver.launcher.launched() == ["a"], "a's process has not exited yet"
        driver.launcher.exit("a", 1)
        driver.at(3.5).tick()
        assert driver.launcher.launched() == ["a", "b"]
        driver.at(4.0).agent(Hello(job="b", gen=2, pid=40_002))
        driver.at(5.0).agent(FinishedMessage(job="b", gen=2, iteration=500))
        driver.at(5.0).submit("c")
        driver.at(6.0).tick()
        assert driver.launcher.launched() == ["a", "b"], "b's script saves after its final step"
        # Its owner stops it: its processes go, its GPU with them, the job stays completed.
        driver.at(7.0).cancel("b")
        assert driver.state("b") == "completed" and driver.launcher.launched() == ["a", "b", "c"]
        assert driver.events("b", "stopped") == [
            {"by": "alice", "why": "its processes, running on after its end, were stopped by alice"}
        ]
        assert driver.service.store.reason("b") == driver.events("b", "stopped")[0]["why"]
        await driver.close()

    asyncio.run(scenario())


def test_how_a_completed_jobs_script_exits_after_its_final_step_is_kept(tmp_path: Path) -> None:
    # Its save raises: a failure of its work, said. A cancel of that work: asked for, not
    # one. And an exit read before its `finished` (its marker written): completed, failed.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=NodeConfig(gpus=3, cpu_workers=18))
        for job in ("saves", "cut", "quick"):
            driver.at(1.0).submit(job)
        for pid, job in enumerate(("saves", "cut", "quick"), start=40_001):
            driver.at(1.5).agent(Hello(job=job, gen=1, pid=pid))
        driver.at(2.0).agent(FinishedMessage(job="saves", gen=1, iteration=500))
        driver.at(2.0).agent(FinishedMessage(job="cut", gen=1, iteration=500))
        driver.launcher.exit("saves", 1)
        driver.at(5.0).cancel("cut")
        driver.launcher.exit("cut", -15)
        write_finished_marker(driver.service.launcher.job_dir("quick"), 500)
        driver.launcher.exit("quick", 1)  # its `finished` never read
        driver.at(6.0).tick()
        assert [driver.state(job) for job in ("saves", "cut", "quick")] == ["completed"] * 3
        (saves,) = driver.events("saves", "exited")
        assert saves["code"] == 1 and saves["after_end"] == "failed"
        assert saves["why"].startswith("completed its final step; then, 3 s after it, its"
                                       " script failed: exited with code 1")  # fmt: skip
        assert driver.service.store.reason("saves") == saves["why"]
        assert driver.events("cut", "exited") == [{"code": -15, "after_end": "stopped"}]
        assert driver.service.store.reason("cut").endswith("were stopped by alice")
        (quick,) = driver.events("quick", "exited")
        assert quick["after_end"] == "failed" and "not relaunched" not in quick["why"]
        await driver.close()

    asyncio.run(scenario())


def test_a_job_lost_for_good_keeps_its_gpu_until_its_processes_are_gone(tmp_path: Path) -> None:
    # No heartbeat: a hung process may still hold GPU memory. It is stopped 5 s later.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=ONE_GPU)
        driver.at(1.0).submit("a", max_restarts=0)
        driver.at(1.0).submit("b")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(20.0).tick()  # 10 s without a heartbeat: lost, and no restarts left
        assert driver.state("a") == "failed"
        assert driver.launcher.launched() == ["a"]
        why = waiting_words(driver.service.scheduler.waiting("b", driver.clock.now))
        assert why is not None and "job(s) a ended but keep theirs" in why
        driver.at(25.0).tick()  # stopped after its 5 s: the GPU is b's
        assert driver.launcher.launched() == ["a", "b"]
        await driver.close()

    asyncio.run(scenario())


def test_a_restart_keeps_a_saving_jobs_gpu_from_the_jobs_it_relaunches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # j3 took GPU 0 after j1, finished, and saved on when the daemon was killed (before or
    # after its `finished` was read); j2, older, is relaunched and must not land on GPU 0.
    async def first_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        for job in ("j1", "j2", "j3"):
            driver.at(1.0).submit(job)
        driver.at(1.5).agent(Hello(job="j1", gen=1, pid=40_001))
        driver.at(2.0).agent(FinishedMessage(job="j1", gen=1, iteration=500))
        driver.launcher.exit("j1", 0)
        driver.at(2.5).tick()
        assert driver.service.scheduler.status("j3").gpu_indices == (0,)
        driver.killed()

    asyncio.run(first_daemon())
    write_finished_marker(tmp_path / "state" / "jobs" / "j3", 500)
    alive = {"j3"}  # its agent's pid is still its agent
    monkeypatch.setattr(Restorer, "_agent_alive", lambda self, job_id, pid: job_id in alive)

    async def second_daemon() -> None:
        driver = Driver(tmp_path, NOW)
        driver.service.restorer.restore()
        assert driver.state("j3") == "completed"
        assert driver.service.scheduler.exiting == {"j3"}
        assert driver.service.scheduler.status("j2").gpu_indices == (1,)
        shown = gpu_idle(driver.service.snapshot())
        assert [(gpu["name"], gpu["jobs"], gpu["exiting"]) for gpu in shown] == [
            ("GPU 0", 0, 1),
            ("GPU 1", 1, 0),
        ], "the dashboard says who keeps each GPU, j2 before its first heartbeat too"
        stored = driver.service.store.job("j3")
        assert stored is not None and stored.pid is not None, "watched until it exits"
        driver.at(1.0).submit("j4")
        assert driver.service.snapshot().waiting_for_gpus == ("j4",)
        driver.launcher.exit("j3", None)
        driver.at(2.0).tick()
        assert driver.service.scheduler.status("j4").gpu_indices == (0,)
        await driver.close()

    asyncio.run(second_daemon())


def test_a_scripts_length_counts_unless_its_job_file_gives_one(tmp_path: Path) -> None:
    # Both scripts say they end at 300: the command job is taken at its word, the zoo
    # job's trainer stops at its job file's 500 (inside an epoch) and is counted to that.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a", model=None, iterations=None, command=["python", "train.py"])
        driver.at(1.0).submit("z")
        for job, gen in (("a", 1), ("z", 1)):
            driver.at(1.5).agent(Hello(job=job, gen=gen, pid=40_001))
        for second in range(2, 13):  # 10 iterations a second
            for job in ("a", "z"):
                said = beat(job, 1, 10 * (second - 2)).model_copy(
                    update={"total_iterations": 300, "batch_samples": 16}
                )
                driver.at(float(second)).agent(said)
        shown = {job: driver.service.live_job(job) for job in ("a", "z")}
        assert {job: live and live.total_iterations for job, live in shown.items()} == {
            "a": 300,
            "z": 500,
        }
        left = {job: live and live.seconds_left for job, live in shown.items()}
        assert left == {"a": pytest.approx(20.0), "z": pytest.approx(40.0)}
        assert [live and live.script_batch_size for live in shown.values()] == [16, 16]
        driver.at(13.0).agent(FinishedMessage(job="a", gen=1, iteration=300))
        driver.launcher.exit("a", 0)
        driver.at(14.0).tick()
        await driver.close()

    asyncio.run(scenario())

    async def next_daemon() -> None:  # "a" ended before it: its length is the stored one
        driver = Driver(tmp_path, NOW)
        driver.service.restorer.restore()
        service = driver.service
        lengths, batches = {}, {}
        for job in ("a", "z"):
            record = service.store.job(job)
            assert record is not None
            lengths[job] = service.views.length(record, service.live_job(job))
            batches[job] = service.views.script_batch(record, service.live_job(job))
        assert driver.state("a") == "completed"
        assert lengths == {"a": 300, "z": 500}
        assert batches == {"a": 16, "z": 16}, "what its script said, kept"
        await driver.close()

    asyncio.run(next_daemon())


@pytest.mark.parametrize(
    ("caught", "pausing", "state", "why"),
    [
        (None, False, "completed", "exited with code 0 outside `job.epochs(n)`"),
        (15, False, "submitted", "after a SIGTERM from outside stoker"),  # relaunched
        (None, True, "submitted", "exited with code 0 before its final step"),
    ],
)
def test_an_sdk_scripts_exit_0_is_its_end_only_when_nothing_else_explains_it(
    tmp_path: Path, caught: int | None, pausing: bool, state: str, why: str
) -> None:
    # Its own end: a loop of its own finished. Not after a stop signal it caught (a loop on
    # `job.should_stop()` leaves then), nor while a round pauses it (a cold resize's exit
    # may come before its `paused` is read).
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(2.0).agent(beat("a", 1, 5))
        if pausing:
            driver.at(2.5).submit("b")
            assert driver.state("a") == "pausing"
        job_dir = driver.service.launcher.job_dir("a")
        write_last_step_marker(job_dir, 5, caught)
        driver.launcher.exit("a", 0)
        driver.at(3.0).tick()
        assert driver.state("a") == state
        said = [event["why"] for event in driver.events("a", "state") if "why" in event]
        assert any(why in text for text in said), said
        await driver.close()

    asyncio.run(scenario())


def test_a_command_without_the_sdk_that_ended_unseen_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Left running by a stopping daemon, it ended before the next one started: it has no
    # checkpoint, so a relaunch would run it all again.
    quick = replace(NOW, unmanaged_after_s=1.0)
    command: dict[str, Any] = {"model": None, "iterations": None, "command": ["./run.sh"]}

    async def first_daemon() -> None:
        driver = Driver(tmp_path, quick)
        driver.at(1.0).submit("a", **command)
        driver.at(3.0).tick()  # no hello: it runs unmanaged
        assert driver.service.scheduler.status("a").unmanaged
        driver.killed()

    asyncio.run(first_daemon())
    monkeypatch.setattr(Restorer, "_agent_alive", lambda self, job_id, pid: False)

    async def second_daemon() -> None:
        driver = Driver(tmp_path, quick)
        driver.service.restorer.restore()
        assert driver.state("a") == "completed" and driver.launcher.launched() == []
        assert driver.service.store.reason("a").startswith(
            "its process, started by an earlier daemon, ended before this one took it back"
        )
        await driver.close()

    asyncio.run(second_daemon())


def test_metrics_still_queued_when_the_daemon_stops_are_kept(tmp_path: Path) -> None:
    # A pause's checkpoint flushes the script's metrics just before a stop: the link may
    # have queued them when the writer is stopped.
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        point = MetricPoint(step=7, values={"loss": 0.5})
        secret = driver.service.agent_secrets["a"]
        await driver.service.deliver(MetricsMessage(job="a", points=[point], secret=secret))
        await driver.close()  # the writer never took it from its queue

    asyncio.run(scenario())
    kept = Store(tmp_path / "state" / "stoker.db").reported.series("a")
    assert kept["loss"].points == [(7, 0.5)]


def test_a_busy_daemon_reads_what_its_agents_said_before_it_judges_their_silence(
    tmp_path: Path,
) -> None:
    # Issue 36: under load, jobs were failed as lost exactly at the timeout while their
    # heartbeats waited in the daemon's own queue ("stale" a moment later).
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=NodeConfig(gpus=2, cpu_workers=8))
        for job in ("a", "b"):
            driver.at(1.0).submit(job)
        for job in ("a", "b"):
            driver.at(1.5).agent(
                Hello(job=job, gen=driver.service.scheduler.generation, pid=40_001)
            )
        secrets = driver.service.agent_secrets
        said = [beat(job, 1, 5).model_copy(update={"secret": secrets[job]}) for job in "ab"]
        driver.at(30.0)  # the writer was busy for 28 s: both beats waited in its queue
        driver.service._queue.put_nowait(FromAgent(said[1]))
        driver.service.step(FromAgent(said[0]))  # no tick yet: b's beat is still queued
        assert (driver.state("a"), driver.state("b")) == ("running", "running")
        driver.service.step(driver.service._queue.get_nowait())
        assert (driver.state("a"), driver.state("b")) == ("running", "running")
        driver.at(45.0).tick()  # and silence after that is silence: lost, to be relaunched
        for job in ("a", "b"):
            (restart,) = driver.events(job, "restart")
            assert restart["why"].startswith("lost: its link to the daemon was silent for 15 s")
        await driver.close()

    asyncio.run(scenario())
