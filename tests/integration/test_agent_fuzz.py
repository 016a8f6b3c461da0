"""Issue 37, finding 1, fuzzed: any message a job's process can send, every type and every
field, with values inside and outside their ranges (huge, negative, infinite, NaN, 2^64),
keeps planning alive and the store in agreement with the core. The service is driven
in-process on a real SQLite state dir (tests/unit/daemon/service_harness.py), bytes
taken as the agent link takes them, so that a few hundred messages run in seconds."""

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from agents.protocol import (
    AliveMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricsMessage,
    PausedMessage,
    ProtocolError,
    ResumedMessage,
    decode_agent,
)
from daemon.items import FromAgent
from scheduler.config import SchedulerConfig
from scheduler.states import JobState
from tests.unit.daemon.service_harness import Driver

NOW = SchedulerConfig(
    arrival_window_s=0.0, completion_window_s=0.0, gate=False, heartbeat_timeout_s=10.0
)
TYPES: list[type[BaseModel]] = [
    Hello,
    HeartbeatMessage,
    AliveMessage,
    MetricsMessage,
    PausedMessage,
    ResumedMessage,
    FinishedMessage,
    FailedMessage,
]
# A message that ends its job (finished, failed) is drawn rarely: the fuzz is of numbers.
ENDING = {"finished", "failed"}
BASE: dict[str, dict[str, Any]] = {
    "hello": {"pid": 40_001, "state": "running", "iteration": 3, "workers": 2},
    "heartbeat": {
        "iteration": 10,
        "samples": 640,
        "idle_s": 0.3,
        "step_s": 0.7,
        "samples_per_s": 64.0,
        "workers": 2,
    },
    "alive": {"phase": "training", "iteration": 10},
    "metrics": {"points": [{"step": 1, "values": {"loss": 0.5}}]},
    "paused": {"iteration": 10},
    "resumed": {"workers": 2, "gap_s": 1.0},
    "finished": {"iteration": 10},
    "failed": {"error": "boom"},
}
EDGES = [0, 1, -1, 2**53, 2**63, 2**64, 10**18, -(2**64), 1e308, -1e308, 1e-320, 604_801.0]
NUMBERS = st.one_of(
    st.sampled_from(EDGES),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),  # json writes NaN and Infinity
    st.floats(min_value=0.0, max_value=1e4),  # in range for most
)
VALUES = st.one_of(NUMBERS, st.booleans(), st.text(max_size=8), st.none())


@st.composite
def messages(draw: st.DrawFn, kind: str, job: str, gen: int, workers: int) -> dict[str, Any]:
    """A message of `kind` from `job`'s process: its base, at the workers its allocation
    has (so that a heartbeat is learned from), some fields of its type changed."""
    model = next(cls for cls in TYPES if cls.model_fields["type"].default == kind)
    names = sorted(set(model.model_fields) - {"type", "job", "secret", "v"})
    body: dict[str, Any] = {"type": kind, "job": job, "gen": gen, **BASE[kind]}
    if "workers" in body:
        body["workers"] = workers
    for name in draw(st.lists(st.sampled_from(names), max_size=3, unique=True)):
        body[name] = draw(VALUES)
    if kind == "metrics" and draw(st.booleans()):
        body["points"] = [{"step": draw(NUMBERS), "values": {"loss": draw(NUMBERS)}}]
    return body


class Errors(logging.Handler):
    """Log records at ERROR or above: a raise that the service caught and logged."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def said(driver: Driver, body: dict[str, Any]) -> None:
    """Bytes from the job's process, taken as the agent link takes them."""
    secret = driver.service.agent_secrets.get(body["job"], "")
    try:
        message = decode_agent(json.dumps({**body, "secret": secret}).encode())
    except ProtocolError as error:
        driver.service.link.refuse(body["job"].encode(), error.reason)
        return
    driver.service.step(FromAgent(message))


def settle(driver: Driver) -> None:
    """Each job the round paused says so, each it launched says hello, each it resumed
    says it did; then time passes."""
    core = driver.service.scheduler
    for job_id, status in core.jobs().items():
        gen, allocation = core.generation, status.allocation
        if status.state is JobState.PAUSING:
            driver.agent(PausedMessage(job=job_id, gen=gen, iteration=status.iteration))
        elif status.state is JobState.STARTING:
            driver.agent(Hello(job=job_id, gen=gen, pid=driver.launcher.live[job_id]))
        elif status.state is JobState.RESUMING and allocation is not None:
            workers = allocation.workers_per_gpu
            driver.agent(ResumedMessage(job=job_id, gen=gen, workers=workers, gap_s=1.0))
    driver.tick()


def agree(driver: Driver) -> None:
    for job_id, status in driver.service.scheduler.jobs().items():
        assert driver.state(job_id) == status.state.value, job_id


@pytest.mark.timeout(300)
def test_any_agent_message_keeps_planning_alive_and_the_store_consistent(tmp_path: Path) -> None:
    errors = Errors()
    logging.getLogger().addHandler(errors)

    async def scenario() -> None:
        driver = Driver(tmp_path, NOW)
        clock, jobs = [1.0], [""]

        def current() -> tuple[str, int]:
            """The job the fuzz speaks for, and its workers: a new one once it ended."""
            job = jobs[-1]
            if not job or driver.service.scheduler.status(job).state.final:
                if driver.launcher.running(job):  # its process exits: its GPU is free
                    driver.launcher.exit(job, 0)
                job = f"a{len(jobs)}"
                jobs.append(job)
                driver.at(clock[0]).submit(job, iterations=10**6)
                gen = driver.service.scheduler.generation
                driver.agent(Hello(job=job, gen=gen, pid=driver.launcher.live[job]))
            allocation = driver.service.scheduler.status(job).allocation
            return job, allocation.workers_per_gpu if allocation is not None else 1

        @settings(
            max_examples=300,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(data=st.data())
        def one(data: st.DataObject) -> None:
            kinds = [cls.model_fields["type"].default for cls in TYPES]
            kind = data.draw(st.sampled_from(kinds + ["heartbeat"] * 6))  # the most numbers
            if kind in ENDING and data.draw(st.integers(0, 9)) > 0:
                kind = "heartbeat"
            clock[0] += 0.05
            job, workers = current()
            gen = driver.service.scheduler.generation
            said(driver.at(clock[0]), data.draw(messages(kind, job, gen, workers)))
            driver.tick()
            agree(driver)
            assert not errors.seen, errors.seen

        one()
        refused = driver.service.link.malformed
        assert 50 < refused < 250, "both refused and accepted messages were drawn"
        # Planning lives: another tenant's job is planned and starts.
        driver.at(clock[0] + 1.0).submit("b", tenant="bob")
        for step in range(1, 6):  # each job does what its round asked
            settle(driver.at(clock[0] + 1.0 + step))
        assert driver.state("b") == "running"
        agree(driver)
        assert not errors.seen, errors.seen
        await driver.close()

    try:
        asyncio.run(scenario())
    finally:
        logging.getLogger().removeHandler(errors)
