"""Errors raised by the allocator, all rooted in `AllocatorError`."""

from dataclasses import dataclass


class AllocatorError(ValueError):
    """Base class for everything the allocator refuses."""


@dataclass
class InvalidRequest(AllocatorError):
    """An allocation request that cannot be planned; `field` names the offending input."""

    field: str
    problem: str

    def __str__(self) -> str:
        return f"{self.field}: {self.problem}"


@dataclass
class UnknownPolicy(AllocatorError):
    """A policy name that is not in the registry."""

    name: str
    known: tuple[str, ...]

    def __str__(self) -> str:
        return f"unknown policy {self.name!r}; choose one of: {', '.join(self.known)}"
