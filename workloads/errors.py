"""Errors of the workload tools and the simulator, rooted in `WorkloadError`."""

from dataclasses import dataclass


@dataclass
class WorkloadError(ValueError):
    """Bad workload input: `where` names the field (and file, when known), `message` the fix."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


class SimulationError(RuntimeError):
    """The simulated node reached a state it must never reach: a bug, not bad input."""
