"""Why a job is in its state is kept typed on its row (`jobs.reason`, issue 38): written with
each state change that says why, each stop of an ended job's processes and each failure of
its work after its end; read back after a restart; served in the words the job's events
say, never found again by searching them."""

import asyncio
from pathlib import Path

import pytest

from agents.protocol import FailedMessage, FinishedMessage, Hello
from daemon.api.views import job_view
from daemon.config import NodeConfig
from daemon.restorereasons import Relaunch, RelaunchCause, RestoreEnd, Restoring
from daemon.store import JobRecord, Store, reason_words
from daemon.store.reasons import (
    FailedAfterEnd,
    JobReason,
    Moved,
    StoppedAfterEnd,
    Worded,
    decode,
    encode,
)
from scheduler.config import SchedulerConfig
from scheduler.exits import AfterEnd
from scheduler.messages import (
    Ending,
    EndReason,
    NotRelaunched,
    RelaunchRefusal,
    StateReason,
)
from tests.unit.daemon.service_harness import Driver
from tests.unit.daemon.test_service import beat

NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)


def reason_of(driver: Driver, job_id: str) -> JobReason | None:
    record = driver.service.store.job(job_id)
    assert record is not None, job_id
    return record.reason


def served(driver: Driver, job_id: str) -> str:
    """The job's `reason` as `GET /v1/jobs/{id}` serves it."""
    record = driver.service.store.job(job_id)
    assert record is not None, job_id
    return job_view(driver.service, record).reason


def last_why(driver: Driver, job_id: str, kind: str) -> str:
    return str(driver.events(job_id, kind)[-1]["why"])


def test_a_restart_and_an_end_are_kept_typed_and_served_as_their_events_say(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, max_restarts=1)
        driver.at(1.0).submit("a")
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(1.8).agent(beat("a", 1, 30))  # it made progress: relaunched
        driver.launcher.exit("a", 1)
        driver.at(2.0).tick()
        exited = Ending(EndReason.EXITED, said="exited with code 1")
        assert reason_of(driver, "a") == Moved(StateReason.RESTARTING, exited, 1, 10.0)
        assert driver.service.store.reason("a") == "restart 1 in 10 s: exited with code 1"
        assert driver.service.store.reason("a") == last_why(driver, "a", "state")
        driver.at(12.0).tick()
        assert driver.state("a") == "starting"
        assert reason_of(driver, "a") is None, "a move that says nothing clears it"
        driver.at(12.5).agent(Hello(job="a", gen=2, pid=40_002, iteration=20))
        driver.at(12.8).agent(beat("a", 2, 45))
        driver.launcher.exit("a", -9)
        driver.at(13.0).tick()
        assert driver.state("a") == "failed"
        none_left = NotRelaunched(RelaunchRefusal.NONE_LEFT)  # its one restart is spent
        killed = Ending(EndReason.EXITED, "killed by signal 9 (SIGKILL)", not_relaunched=none_left)
        assert reason_of(driver, "a") == Moved(StateReason.ENDED, killed)
        assert served(driver, "a") == last_why(driver, "a", "state")
        # A failure kept failed, with why it is not relaunched.
        driver.at(14.0).submit("b", max_restarts=3)
        driver.at(14.5).agent(Hello(job="b", gen=3, pid=40_003))
        driver.launcher.exit("b", 1)
        driver.at(15.0).tick()
        before_first_step = NotRelaunched(RelaunchRefusal.BEFORE_FIRST_STEP, started_at=0)
        ended = Ending(EndReason.EXITED, "exited with code 1", not_relaunched=before_first_step)
        assert reason_of(driver, "b") == Moved(StateReason.ENDED, ended)
        assert served(driver, "b") == (
            "exited with code 1; not relaunched: it failed before its first step"
        )
        # A cancel says who asked.
        driver.at(16.0).submit("c")
        driver.at(16.5).cancel("c", by="bob")
        assert reason_of(driver, "c") == Moved(
            StateReason.ENDED, Ending(EndReason.CANCELLED, by="bob")
        )
        assert served(driver, "c") == last_why(driver, "c", "state") == "cancelled by bob"
        kept = {job: (reason_of(driver, job), served(driver, job)) for job in "abc"}
        driver.restart()  # a kill -9, and another daemon on the same state dir
        assert {job: (reason_of(driver, job), served(driver, job)) for job in "abc"} == kept
        await driver.close()

    asyncio.run(scenario())


def test_a_stop_and_a_failure_after_the_end_are_kept_typed_across_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW, node=NodeConfig(gpus=2, cpu_workers=18))
        for job in ("saves", "cut"):
            driver.at(1.0).submit(job)
        for pid, job in enumerate(("saves", "cut"), start=40_001):
            driver.at(1.5).agent(Hello(job=job, gen=1, pid=pid))
            driver.at(2.0).agent(FinishedMessage(job=job, gen=1, iteration=500))
        assert reason_of(driver, "saves") == Moved(StateReason.ENDED, Ending(EndReason.FINISHED))
        driver.launcher.exit("saves", 1)  # its save raised
        driver.at(5.0).cancel("cut")  # its work after its end, stopped as asked
        driver.launcher.exit("cut", -15)
        driver.at(6.0).tick()
        saves = reason_of(driver, "saves")
        assert isinstance(saves, FailedAfterEnd)
        assert (saves.after, saves.since_s, saves.limit_s) == (AfterEnd.FAILED, 3.0, 600.0)
        assert saves.said.startswith("exited with code 1")
        assert served(driver, "saves") == last_why(driver, "saves", "exited")
        assert reason_of(driver, "cut") == StoppedAfterEnd("alice")
        assert served(driver, "cut") == last_why(driver, "cut", "stopped")
        assert served(driver, "cut") == (
            "its processes, running on after its end, were stopped by alice"
        )
        kept = {job: (reason_of(driver, job), served(driver, job)) for job in ("saves", "cut")}
        await driver.stop()
        driver.restart()  # a clean stop, and another daemon
        assert {job: (reason_of(driver, job), served(driver, job)) for job in kept} == kept
        await driver.close()

    asyncio.run(scenario())


def test_a_job_that_said_it_failed_keeps_its_own_words(tmp_path: Path) -> None:
    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a", max_restarts=0)
        driver.at(1.5).agent(Hello(job="a", gen=1, pid=40_001))
        driver.at(2.0).agent(FailedMessage(job="a", gen=1, error="boom"))
        reason = reason_of(driver, "a")
        assert isinstance(reason, Moved) and reason.ending is not None
        assert (reason.ending.reason, reason.ending.said) == (EndReason.JOB_SAID, "boom")
        assert served(driver, "a") == last_why(driver, "a", "state")
        await driver.close()

    asyncio.run(scenario())


EVERY_KIND: list[JobReason] = [
    Moved(StateReason.RAN_UNMANAGED),
    Moved(StateReason.RESTARTING, Ending(EndReason.LOST, seconds=12.5, limit_s=10.0), 2, 20.0),
    Moved(
        StateReason.ENDED,
        Ending(
            EndReason.STALLED,
            said="",
            by=None,
            waiting=False,
            seconds=601.0,
            limit_s=600.0,
            phase="evaluation",
            not_relaunched=NotRelaunched(RelaunchRefusal.FAILED_AGAIN_BEFORE, 40, 45, 50),
        ),
    ),
    Moved(StateReason.ENDED, Ending(EndReason.TIME_LIMIT, waiting=True, limit_s=3600.0)),
    Moved(StateReason.ENDED, None),
    StoppedAfterEnd("alice"),
    FailedAfterEnd(AfterEnd.FAILED, "exited with code 1; stderr ends:\nValueError", 3.2, 600.0),
    FailedAfterEnd(AfterEnd.OVERRAN, "", None, 90.0),
    Restoring(RestoreEnd.NO_RESTARTS_LEFT, Relaunch(RelaunchCause.DAEMON_RESTARTED, "running")),
    Restoring(RestoreEnd.CANCELLED, by="bob"),
    Restoring(RestoreEnd.UNRESTORABLE, said="unknown model 'Resnet99'"),
    Worded("the daemon restarted while it was running; no restarts left"),
]


@pytest.mark.parametrize("reason", EVERY_KIND, ids=lambda reason: type(reason).__name__)
def test_every_kind_of_reason_is_read_back_as_it_was_written(
    tmp_path: Path, reason: JobReason
) -> None:
    assert decode(encode(reason)) == reason
    store = Store(tmp_path / "stoker.db")
    store.add_job(
        JobRecord("a", "alice", "a", {"model": "Resnet18"}, "submitted", 1.0, 1.0, 0, "", None)
    )
    store.update_job("a", 2.0, state="cancelled", reason=reason)
    store.close()
    again = Store(tmp_path / "stoker.db")
    found = again.job("a")
    assert found is not None and found.reason == reason
    assert again.reason("a") == reason_words(reason)


def test_only_a_reason_is_written_as_one(tmp_path: Path) -> None:
    store = Store(tmp_path / "stoker.db")
    store.add_job(
        JobRecord("a", "alice", "a", {"model": "Resnet18"}, "submitted", 1.0, 1.0, 0, "", None)
    )
    with pytest.raises(TypeError, match="not a job's reason"):
        store.update_job("a", 2.0, reason="finished")  # words are not a reason
    store.update_job("a", 2.0, reason=StoppedAfterEnd("bob"))
    store.update_job("a", 3.0, reason=None)  # nothing said
    found = store.job("a")
    assert found is not None and found.reason is None and store.reason("a") == ""


def test_a_restart_that_ends_a_job_keeps_why_typed(tmp_path: Path) -> None:
    """A job whose agent died with the daemon, and no restarts left: failed by the restore,
    its reason the restore's own, typed, and worded as before."""

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        driver.at(1.0).submit("a", iterations=500, max_restarts=0)
        driver.at(1.5).tick()
        driver.agent(Hello(job="a", gen=1, pid=driver.launcher.live["a"]))
        driver.launcher.live.clear()  # the node lost it with the daemon
        driver.at(3.0).restart()
        assert driver.state("a") == "failed"
        relaunch = Relaunch(RelaunchCause.DAEMON_RESTARTED, "running")
        assert reason_of(driver, "a") == Restoring(RestoreEnd.NO_RESTARTS_LEFT, relaunch)
        said = "the daemon restarted while it was running; no restarts left"
        assert served(driver, "a") == said == last_why(driver, "a", "state")
        await driver.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("column", ['{"kind": "new-in-some-future"}', "not json", '{"kind": 1}'])
def test_a_reason_this_daemon_cannot_read_is_told_not_raised(column: str) -> None:
    read = decode(column)
    assert isinstance(read, Worded) and read.text.startswith("(a reason this daemon cannot read")
    assert column[:20] in read.text
