"""The messages the daemon sends an agent: `pause`, `resume`, `share` and `cancel`.
agents/protocol.py holds their union (`DaemonMessage`) and the encoding; an agent's own
messages are in agents/agentmessages.py. No torch here: the daemon imports it.
"""

from typing import Literal

from pydantic import Field

from agents.bounded import Share, Workers
from agents.envelope import Message
from allocator.types import DecodeMode  # the one vocabulary of decode modes


class PauseMessage(Message):
    type: Literal["pause"] = "pause"


class ResumeMessage(Message):
    type: Literal["resume"] = "resume"
    workers_per_gpu: Workers = Field(ge=1)
    decoder_share: Share = 0.0
    decode_mode: DecodeMode = "cpu"


class ShareMessage(Message):
    """Since version 2: a running job's new decoder share, applied live (no pause)."""

    type: Literal["share"] = "share"
    decoder_share: Share


class CancelMessage(Message):
    type: Literal["cancel"] = "cancel"
