"""A tenant's submits a minute (`limits.submits_per_minute`, issue 37): a token bucket per
tenant, full at the start (a burst of that many), refilled at that rate. Past it a submit
is a 429 with Retry-After. The admin is limited too: its token is a script's as often as a
person's, and a loop that submits without end fills the state file as any tenant's does."""

import math
import time
from collections.abc import Callable

from fastapi import HTTPException

from daemon.buckets import Buckets


class SubmitRate:
    """Per-tenant token buckets of `per_minute` tokens, refilled at `per_minute` a minute."""

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets = Buckets(float(per_minute), per_minute / 60.0)

    def wait_s(self, tenant: str) -> float:
        """Take one submit of `tenant`'s: 0.0 if it may, else the seconds until it may."""
        return self._buckets.take(tenant, self._clock())

    def take(self, tenant: str) -> None:
        """Count a submit of `tenant`'s; a 429 with Retry-After past the rate."""
        wait = self.wait_s(tenant)
        if wait > 0.0:
            raise HTTPException(
                429,
                f"{tenant} submitted {self.per_minute} jobs in the last minute"
                f" (limits.submits_per_minute); submit again in {math.ceil(wait)} s",
                {"Retry-After": str(math.ceil(wait))},
            )
