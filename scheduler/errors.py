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


@dataclass
class RefitUntrusted(SchedulerError):
    """A refit whose held-out R^2 is below `scheduler.min_refit_r2`; the old model stays."""

    part: str  # training or loading
    r2: float | None  # None: nothing could be held out
    threshold: float

    def __str__(self) -> str:
        figure = "could not be measured (too few samples)" if self.r2 is None else f"{self.r2:.3f}"
        return (
            f"refit refused: the {self.part} model's held-out R^2 {figure} is below "
            f"scheduler.min_refit_r2 = {self.threshold:g}; the model in use stays. Add samples "
            "(`stoker profile`, POST /v1/tpm/samples) or lower the threshold"
        )
