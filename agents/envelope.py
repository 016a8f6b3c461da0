"""The envelope every message of the agent protocol shares (agents/protocol.py): its
version `v`, `job`, `gen`, `ts` and the launch's secret, with the rules every message keeps
(unknown fields refused, frozen, no infinite or NaN number).

It sits below the two message modules (agents/agentmessages.py, agents/daemonmessages.py)
so that both derive from it, and agents/protocol.py, which encodes and decodes them, can
import them without a circle. No torch here: the daemon imports it.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.bounded import Count, WallClock

VERSION = 10  # the newest protocol version; agents/protocol.py's docstring says what each added


class Message(BaseModel):
    # No float is infinite or NaN; each number has its range (agents/bounded.py).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    v: Literal[1, 2, 3, 4, 5, 6, 7, 8, 9, 10] = 10  # VERSION; 1 to 9 are still understood
    job: str = Field(min_length=1, max_length=128)
    gen: Count = 0
    ts: WallClock = Field(0.0, description="sender's wall clock, seconds since the epoch")
    # The launch's STOKER_AGENT_SECRET, on every message an agent sends when its launch gave
    # one; left out of the bytes when empty, so that an older daemon reads them still.
    secret: str = Field("", max_length=128, repr=False)  # never in a log (docs/daemon.md)
