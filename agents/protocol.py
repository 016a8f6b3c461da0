"""The ZeroMQ messages between the daemon and each job's application master (DESIGN.md,
"Agent protocol"). No torch here: the daemon imports this module.

The messages themselves are in agents/agentmessages.py (agent to daemon) and
agents/daemonmessages.py (daemon to agent), on the envelope of agents/envelope.py; this
module holds the version, their unions, `encode` and `decode`, the launch's variables and
the job's state files (checkpoint names, markers), and hands the message classes on, so
that `from agents.protocol import Hello` is the one import a peer needs.

Every message is one JSON object with `type` (the discriminator), `v` (protocol version),
`job`, `gen` and `ts`. Unknown fields and unknown types are refused, so a misspelt field
is an error at the edge, not a silent default. `decode` turns bytes into a message or
raises `ProtocolError` saying what was wrong; `encode` is its inverse.

Version 2 added `share`: a live change of a running job's decoder share, applied without a
pause. Version 1 messages are still accepted; a daemon sends `share` only to agents whose
hello said version 2 (an older agent gets its new share with its next resume).
Version 3 added `metrics`: what a script reported with `job.report`, sent by the SDK.
Version 4 added the heartbeat's `loader_s`. An agent sends it only to a daemon that said,
in its launch's `STOKER_PROTOCOL`, that it reads version 4: an older daemon refuses a
field it does not know. Version 5 added the heartbeat's CPU clocks, `loader_cpu_s`,
`loader_wait_s` and `cpu_s`, on the same terms; version 6 the training thread's,
`train_cpu_s` and `train_wait_s`, and `refill_s`. Version 7 added the heartbeat's `last`:
the steps a script completed as it exits without finishing (an exception, most often), sent so
that the daemon knows how far it got; its interval is too short to measure a rate from.
Version 8 added the heartbeat's `total_iterations`: the step the script will end at, as
its `job.epochs(n)` and first loader count it. Version 9 added its `batch_samples`: the
samples a step of the script takes, all ranks (its global batch, which a command job's
submit gives only as a hint). Version 10 added `alive`: the link's own thread says the
process lives, every heartbeat period in which nothing else went out, whatever its training
thread is doing (a long setup, an evaluation, a save), with the phase the script is in.
"""

import json
import os
import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, TypeVar

from pydantic import Field, TypeAdapter, ValidationError

from agents.agentmessages import (
    MAX_METRIC_NAME,
    MAX_METRICS_PER_POINT,
    MAX_PHASE,
    MAX_POINTS_PER_MESSAGE,
    PHASE_PATTERN,
    AgentState,
    AliveMessage,
    FailedMessage,
    FinishedMessage,
    HeartbeatMessage,
    Hello,
    MetricPoint,
    MetricsMessage,
    PausedMessage,
    ResumedMessage,
)
from agents.daemonmessages import CancelMessage, PauseMessage, ResumeMessage, ShareMessage
from agents.envelope import VERSION, Message
from allocator.bounds import MAX_COUNT

__all__ = [
    "CHECKPOINTS",
    "CHECKPOINT_NAME",
    "FINISHED_MARKER",
    "LAST_STEP_MARKER",
    "MAX_MESSAGE_BYTES",
    "MAX_METRICS_PER_POINT",
    "MAX_METRIC_NAME",
    "MAX_PHASE",
    "MAX_POINTS_PER_MESSAGE",
    "PHASE_PATTERN",
    "PROTOCOL_VARIABLE",
    "SECRET_VARIABLE",
    "VERSION",
    "AgentMessage",
    "AgentState",
    "AliveMessage",
    "CancelMessage",
    "DaemonMessage",
    "FailedMessage",
    "FinishedMessage",
    "HeartbeatMessage",
    "Hello",
    "Message",
    "MetricPoint",
    "MetricsMessage",
    "PauseMessage",
    "PausedMessage",
    "ProtocolError",
    "ResumeMessage",
    "ResumedMessage",
    "ShareMessage",
    "connection_identity",
    "daemon_version",
    "decode_agent",
    "decode_daemon",
    "encode",
    "newest_checkpoint",
    "read_finished_marker",
    "read_last_step_marker",
    "read_stop_signal",
    "speaks_for",
    "write_finished_marker",
    "write_last_step_marker",
]

PROTOCOL_VARIABLE = "STOKER_PROTOCOL"  # the protocol version of the daemon that launched it
SECRET_VARIABLE = "STOKER_AGENT_SECRET"  # the launch's secret, in its environment only


class ProtocolError(ValueError):
    """Bytes that are not a message of this protocol version; `reason` says why."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


AgentMessage = Annotated[
    Hello
    | HeartbeatMessage
    | AliveMessage
    | MetricsMessage
    | PausedMessage
    | ResumedMessage
    | FinishedMessage
    | FailedMessage,
    Field(discriminator="type"),
]
DaemonMessage = Annotated[
    PauseMessage | ResumeMessage | ShareMessage | CancelMessage, Field(discriminator="type")
]
_FROM_AGENT: TypeAdapter[AgentMessage] = TypeAdapter(AgentMessage)
_FROM_DAEMON: TypeAdapter[DaemonMessage] = TypeAdapter(DaemonMessage)
MAX_MESSAGE_BYTES = 64 * 1024
M = TypeVar("M")


def encode(message: Message) -> bytes:
    return message.model_dump_json(exclude=_left_out(message)).encode()


def _left_out(message: Message) -> set[str] | None:
    """The fields an older peer would refuse: those newer than the version the message
    speaks, and the optional ones at their defaults."""
    fields = type(message).model_fields
    out = {
        name
        for name, since in _SINCE.items()
        if name in fields and (message.v < since or not getattr(message, name))
    }
    return out or None


# Optional fields and the version that brought them (the secret came without a new
# version: a daemon that gives none reads messages without it).
_SINCE = {
    "secret": 1,
    "loader_s": 4,
    "loader_cpu_s": 5,
    "loader_wait_s": 5,
    "cpu_s": 5,
    "train_cpu_s": 6,
    "train_wait_s": 6,
    "refill_s": 6,
    "last": 7,
    "total_iterations": 8,
    "batch_samples": 9,
}


def connection_identity(job: str) -> bytes:
    """A DEALER identity of one link of the job's: `job@nonce`. Each link has its own, so a
    relaunched agent never needs an identity a stale connection still holds (a dead agent's
    orphaned DataLoader workers keep its socket open), and the daemon's ROUTER can ignore a
    second connection with a live identity instead of handing the route to it: any process
    that reaches the socket could otherwise cut a job's agent off by connecting under its
    job id."""
    return f"{job}@{secrets.token_hex(_NONCE_BYTES)}".encode()


def speaks_for(identity: bytes, job: str) -> bool:
    """Whether a connection of `identity` may carry messages of `job`: its identity is the
    job's with a nonce, or the job id alone (an agent of an SDK from before the nonce)."""
    own = job.encode()
    if identity == own:
        return True
    nonce = identity.removeprefix(own + b"@")
    return nonce != identity and len(nonce) == 2 * _NONCE_BYTES and nonce.isalnum()


_NONCE_BYTES = 8


def daemon_version(environ: Mapping[str, str]) -> int:
    """The protocol version of the daemon that launched this agent: its `STOKER_PROTOCOL`,
    or 3 for a daemon from before it said (it reads 1 to 3)."""
    try:
        said = int(environ.get(PROTOCOL_VARIABLE, "3"))
    except ValueError:
        return 3
    return max(1, min(VERSION, said))


def decode_agent(data: bytes) -> AgentMessage:
    """A message an agent sent; ProtocolError names the field that is wrong."""
    return _decode(_FROM_AGENT, data)


def decode_daemon(data: bytes) -> DaemonMessage:
    """A message the daemon sent; ProtocolError names the field that is wrong."""
    return _decode(_FROM_DAEMON, data)


def _decode(adapter: TypeAdapter[M], data: bytes) -> M:
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(f"message of {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        return adapter.validate_json(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "message"
        raise ProtocolError(f"{where}: {first['msg']}") from None


# ---- the job's checkpoints ----------------------------------------------------------------

CHECKPOINTS = "checkpoints"  # the folder in a job's directory the SDK writes them to
# The SDK's checkpoint names, numbered in order (`agents/checkpoints.py`): the daemon finds
# the newest a job left by them (`stoker resume`).
CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d{8})\.pt$")


def newest_checkpoint(directory: Path) -> Path | None:
    """The newest checkpoint in `directory` that is a plain file, or None. Neither the
    folder nor the file is followed if it is a link: the daemon looks into a folder its
    job's user owns, who could point it at another's."""
    try:
        folder = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:  # absent, not a folder, or a link
        return None
    try:
        for name in sorted(os.listdir(folder), reverse=True):
            if not CHECKPOINT_NAME.match(name):
                continue
            try:
                found = os.stat(name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:  # removed meanwhile
                continue
            if stat.S_ISREG(found.st_mode):
                return directory / name
        return None
    finally:
        os.close(folder)


# ---- the finished marker ------------------------------------------------------------------

FINISHED_MARKER = "finished.json"


# Beside its last heartbeat, an agent that exits without finishing leaves the steps it
# completed here: its exit may be seen before the message is read (daemon/actions.py).
LAST_STEP_MARKER = "last_step.json"


def write_finished_marker(directory: Path, iteration: int) -> None:
    """Before an agent says `finished`, it leaves this in its job directory (atomically):
    a daemon that was down when the message went out learns from it that the job ended."""
    _write_iteration(directory / FINISHED_MARKER, iteration)


def read_finished_marker(directory: Path) -> int | None:
    """The final iteration of a job that finished, or None."""
    return _read_iteration(directory / FINISHED_MARKER)


def write_last_step_marker(directory: Path, iteration: int, signal: int | None = None) -> None:
    """The steps a script completed, as it exits without finishing (`LAST_STEP_MARKER`),
    and the stop `signal` it had caught, if one sent it on its way (a script that leaves
    its loop on `job.should_stop()` may then exit 0: it was stopped, not done)."""
    extra = {"signal": signal} if signal is not None else {}
    _write_iteration(directory / LAST_STEP_MARKER, iteration, extra)


def read_last_step_marker(directory: Path) -> int | None:
    """The steps the job's last agent completed before it exited unfinished, or None."""
    found = _read_marker(directory / LAST_STEP_MARKER)
    return found[0] if found is not None else None


def read_stop_signal(directory: Path) -> int | None:
    """The stop signal the job's last agent had caught as it exited unfinished, or None."""
    found = _read_marker(directory / LAST_STEP_MARKER)
    return found[1] if found is not None else None


def _write_iteration(final: Path, iteration: int, extra: Mapping[str, int] | None = None) -> None:
    # The job's folder, made if it is not there, but never the state dir above it.
    final.parent.mkdir(mode=0o700, exist_ok=True)
    temporary = final.with_suffix(".tmp")
    with temporary.open("w") as handle:
        json.dump({"iteration": iteration, **(extra or {})}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(final)


def _read_iteration(path: Path) -> int | None:
    found = _read_marker(path)
    return found[0] if found is not None else None


def _read_marker(path: Path) -> tuple[int, int | None] | None:
    """The marker's iteration and signal; None when it is missing, unreadable, or not a
    plain file: the daemon reads it in a folder the job may own, where a link or a FIFO
    could be."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as marker:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        text = marker.read(4096)
    try:
        found = json.loads(text)
        signal, iteration = found.get("signal"), int(found["iteration"])
        stop = int(signal) if signal is not None else None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None
    # A step count or signal past any real one is the job's folder lying: not read.
    if not 0 <= iteration <= MAX_COUNT or not 0 <= (stop or 0) < 256:
        return None
    return iteration, stop
