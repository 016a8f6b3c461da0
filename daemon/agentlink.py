"""The daemon's end of the agent protocol: one ROUTER socket on zmq.asyncio.

The socket is `ipc://<state dir>/agents.sock`, made readable by its owner only (mode
0600). Each agent's DEALER identity is its job id. A message that does not decode, or
whose `job` is not the sender's identity, is logged and counted and never stops the
daemon (`malformed`).
"""

import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import zmq
import zmq.asyncio

from agents.protocol import (
    AgentMessage,
    CancelMessage,
    PauseMessage,
    ProtocolError,
    ResumeMessage,
    ShareMessage,
    decode_agent,
    encode,
)

log = logging.getLogger(__name__)

DaemonMessage = PauseMessage | ResumeMessage | ShareMessage | CancelMessage


class AgentLink:
    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.endpoint = f"ipc://{socket_path}"
        self.malformed = 0  # messages refused since start
        self.unreachable = 0  # commands to agents that were not connected
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a drop
        # A relaunched agent takes its job's identity over from a stale connection (one a
        # dead agent's orphaned DataLoader workers may hold open for a few seconds).
        self._socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self._socket.setsockopt(zmq.LINGER, 0)

    def bind(self) -> None:
        self.socket_path.unlink(missing_ok=True)  # left by a daemon that was killed
        old_mask = os.umask(0o177)  # created 0600: no window where others could connect
        try:
            self._socket.bind(self.endpoint)
        finally:
            os.umask(old_mask)
        os.chmod(self.socket_path, 0o600)

    async def serve(self, deliver: Callable[[AgentMessage], Awaitable[None]]) -> None:
        """Receive forever, handing each valid message to `deliver`."""
        while True:
            frames = await self._socket.recv_multipart()
            if len(frames) != 2:
                self._refuse(frames[0] if frames else b"?", f"{len(frames)} frames, expected 2")
                continue
            identity, data = frames
            try:
                message = decode_agent(data)
            except ProtocolError as error:
                self._refuse(identity, error.reason)
                continue
            if message.job.encode() != identity:
                self._refuse(identity, f"job {message.job!r} is not the sender's identity")
                continue
            await deliver(message)

    async def receive(self, timeout_s: float) -> AgentMessage | None:
        """One valid message, or None when none came within `timeout_s` (for shutdown,
        when `serve` no longer runs)."""
        if not await self._socket.poll(timeout=int(max(0.0, timeout_s) * 1000)):
            return None
        identity, *rest = await self._socket.recv_multipart()
        try:
            return decode_agent(rest[-1]) if rest else None
        except ProtocolError as error:
            self._refuse(identity, error.reason)
            return None

    async def send(self, message: DaemonMessage) -> bool:
        """Send to the message's job; False when its agent is not connected."""
        try:
            await self._socket.send_multipart([message.job.encode(), encode(message)])
        except zmq.ZMQError as error:
            self.unreachable += 1
            log.warning("job %s: agent not reachable for %s: %s", message.job, message.type, error)
            return False
        return True

    def _refuse(self, identity: bytes, reason: str) -> None:
        self.malformed += 1
        log.warning("agent %r: message refused: %s", identity[:64], reason)

    def close(self) -> None:
        # destroy, not term: term waits for every socket of the context to close, and a
        # receive cancelled at shutdown must not be able to hang the daemon's exit.
        self._context.destroy(linger=0)
        self.socket_path.unlink(missing_ok=True)
