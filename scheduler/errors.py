"""Errors of the scheduler core, rooted in `SchedulerError`."""

from dataclasses import dataclass


class SchedulerError(Exception):
    """Base class for what the scheduler core refuses."""


@dataclass
class IllegalTransition(SchedulerError):
    """A job was asked to move between two states the transition table does not link."""

    job_id: str
    current: str
    requested: str

    def __str__(self) -> str:
        return f"job {self.job_id}: cannot go from {self.current} to {self.requested}"


@dataclass
class UnknownJob(SchedulerError):
    """An event names a job the scheduler has never seen."""

    job_id: str

    def __str__(self) -> str:
        return f"no job {self.job_id!r}"


@dataclass
class RefitRejected(SchedulerError):
    """A refitted throughput model that cannot plan this node's jobs; the old one stays."""

    reason: str

    def __str__(self) -> str:
        return f"the new fit cannot plan this node's jobs: {self.reason}"
