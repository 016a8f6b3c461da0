"""What the service's one queue carries: REST calls that wait for their answer, agents'
messages, finished fits and plans made (daemon/planner.py)."""

import asyncio
from dataclasses import dataclass

from agents.protocol import AgentMessage
from daemon.store import JobRecord
from scheduler.messages import PlanOutcome
from tpm import FitResult


class IdTaken(Exception):
    """A new job's id is some other job's already: draw another."""


class QuotaExceeded(Exception):
    """A tenant asked for more than its quota allows; the message names the setting."""


class SubmitError(ValueError):
    """A job the node cannot take; `field` names what to change."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass
class SubmitCall:
    record: JobRecord
    done: asyncio.Future[None]
    # The client's Idempotency-Key and a digest of its body: a retry finds the first job.
    idempotency: tuple[str, str] | None = None


class Replayed(Exception):
    """A submit whose Idempotency-Key was used before: the job it made, and the digest of
    the body it came with."""

    def __init__(self, job_id: str, body_digest: str) -> None:
        super().__init__(job_id)
        self.job_id, self.body_digest = job_id, body_digest


@dataclass
class CancelCall:
    job_id: str
    by: str  # the tenant who asked
    done: asyncio.Future[None]


@dataclass
class FromAgent:
    message: AgentMessage


@dataclass
class SamplesCall:
    kind: str
    rows: list[dict[str, object]]
    source: str
    done: asyncio.Future[None]


@dataclass
class Fitted:
    result: FitResult
    done: asyncio.Future[None]


@dataclass
class PlanDone:
    """The plan the core asked for with `ticket`, made in the planner's thread."""

    ticket: int
    outcome: PlanOutcome


Item = SubmitCall | CancelCall | FromAgent | SamplesCall | Fitted | PlanDone


def resolve(done: asyncio.Future[None]) -> None:
    """Answer a waiting REST call, unless its client went away and cancelled it."""
    if not done.done():
        done.set_result(None)
