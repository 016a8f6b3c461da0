"""Caps on what a tenant holds open: event streams (`max_streams_per_tenant`,
`max_streams`) and log follows (`limits.max_follows_per_tenant`, `limits.max_follows`);
`install_caps` puts them, with the submit rate (daemon/ratelimit.py), on the app."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import HTTPException

from daemon.config import DaemonConfig
from daemon.limits import Limits
from daemon.ratelimit import SubmitRate


class Streams:
    """Open streams of one kind, counted per tenant and in all: past `per_tenant` or `total`
    a new one is refused with a 429 naming the setting, so streams cannot crowd out the API
    (issue 17; log follows, issue 37)."""

    def __init__(
        self,
        per_tenant: int,
        total: int,
        what: str = "event streams",
        settings: tuple[str, str] = ("max_streams_per_tenant", "max_streams"),
        instead: str = "poll GET /v1/events?after=N",
    ) -> None:
        self.per_tenant, self.total = per_tenant, total
        self.what, self.settings, self.instead = what, settings, instead
        self.open: dict[str, int] = {}

    def take(self, tenant: str) -> None:
        if self.open.get(tenant, 0) >= self.per_tenant:
            raise HTTPException(
                429,
                f"{tenant} has {self.per_tenant} {self.what} open ({self.settings[0]});"
                f" close one, or {self.instead}",
            )
        if sum(self.open.values()) >= self.total:
            raise HTTPException(
                429, f"the node has {self.total} {self.what} open ({self.settings[1]}); try later"
            )
        self.open[tenant] = self.open.get(tenant, 0) + 1

    def give_back(self, tenant: str) -> None:
        self.open[tenant] -= 1
        if not self.open[tenant]:
            del self.open[tenant]

    @contextmanager
    def held(self, tenant: str) -> Iterator[None]:
        """One of `tenant`'s streams, taken for the block and given back after it."""
        self.take(tenant)
        try:
            yield
        finally:
            self.give_back(tenant)


def log_follows(limits: Limits) -> Streams:
    """The cap on log follows (`GET /v1/jobs/ID/logs?follow=true`): 1,500 of them took 73 %
    of a core (issue 37, finding 14)."""
    return Streams(
        limits.max_follows_per_tenant,
        limits.max_follows,
        "log follows",
        ("limits.max_follows_per_tenant", "limits.max_follows"),
        "read the log without following it",
    )


def install_caps(state: Any, config: DaemonConfig) -> None:
    """Put the app's per-tenant caps on its `state`: event streams, log follows, submits."""
    state.streams = Streams(config.max_streams_per_tenant, config.max_streams)
    state.follows = log_follows(config.limits)
    state.submits = SubmitRate(config.limits.submits_per_minute)
