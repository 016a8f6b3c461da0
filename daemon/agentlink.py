"""The daemon's end of the agent protocol: ROUTER sockets on zmq.asyncio.

The daemon's socket is `ipc://<state dir>/agents.sock`, made readable by its owner only
(mode 0600). With per-tenant unix users (`unix_users` in the config) each such user gets
its own socket, `agents-<user>.sock`, owned by that user (mode 0600): a job running as
alice can reach the daemon only through alice's socket, and a message that arrives there
for a job that is not alice's is refused, so no tenant can speak for another's job.

Each agent's DEALER identity is its job id and a nonce of its link's
(`agents.protocol.connection_identity`). A message that does not decode, or whose `job` is
not the sender's, is logged and counted and never stops the daemon (`malformed`). The
daemon answers a job on the connection its last trusted message came from (the launch's
secret, checked by `trusted`); the ROUTER hands no identity over, so a process that
connects under a live agent's identity is ignored, not given its route.
"""

import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
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
    speaks_for,
)
from daemon.tenants import UnixUser

log = logging.getLogger(__name__)

REFUSALS_SAID = 10  # refused messages logged one by one per window; the rest are counted
REFUSAL_WINDOW_S = 60.0

DaemonMessage = PauseMessage | ResumeMessage | ShareMessage | CancelMessage


class AgentLink:
    def __init__(
        self,
        socket_path: Path,
        users: Sequence[UnixUser] = (),
        owner: Callable[[str], str | None] = lambda job_id: None,
        trusted: Callable[[AgentMessage], bool] = lambda message: True,
    ) -> None:
        """`owner(job_id)`: the unix user the job runs as, None for the daemon's own;
        `trusted(message)`: whether it comes from the job's current launch (the service's
        check of its secret), which makes its connection the one the job is answered on."""
        self.socket_path = socket_path
        self.endpoint = f"ipc://{socket_path}"
        self.malformed = 0  # messages refused since start
        self._window_start = time.monotonic()  # of the refusals logged one by one
        self._said = self._unsaid = 0
        self.unreachable = 0  # commands to agents that were not connected
        self._owner = owner
        self._trusted = trusted
        self._routes: dict[str, bytes] = {}  # job -> the identity it is answered on
        self._context = zmq.asyncio.Context()
        self._sockets: dict[str | None, tuple[zmq.asyncio.Socket, Path, UnixUser | None]] = {
            None: (self._router(), socket_path, None)
        }
        for user in users:
            path = socket_path.with_name(f"agents-{user.name}.sock")
            self._sockets[user.name] = (self._router(), path, user)

    def _router(self) -> zmq.asyncio.Socket:
        socket = self._context.socket(zmq.ROUTER)
        socket.setsockopt(zmq.ROUTER_MANDATORY, 1)  # an unknown peer is an error, not a drop
        # No ROUTER_HANDOVER: with it, a process that connected under a live agent's
        # identity took its route, and the agent, cut off, was lost. A relaunched agent
        # connects under an identity of its own (a nonce), never a stale connection's.
        socket.setsockopt(zmq.LINGER, 0)
        return socket

    def endpoint_for(self, user: str | None) -> str:
        """The endpoint a job running as `user` (None: as the daemon) connects to."""
        return f"ipc://{self._sockets[user][1]}"

    def bind(self) -> None:
        for socket, path, user in self._sockets.values():
            path.unlink(missing_ok=True)  # left by a daemon that was killed
            old_mask = os.umask(0o177)  # created 0600: no window where others could connect
            try:
                socket.bind(f"ipc://{path}")
                if user is not None:  # still 0600 while it changes hands
                    os.chown(path, user.uid, user.gid)
            finally:
                os.umask(old_mask)
            os.chmod(path, 0o600)

    async def serve(self, deliver: Callable[[AgentMessage], Awaitable[None]]) -> None:
        """Receive forever, handing each valid message to `deliver`."""
        while True:
            for message in await self._ready(timeout_ms=None):
                await deliver(message)

    async def receive(self, timeout_s: float) -> AgentMessage | None:
        """One valid message, or None when none came within `timeout_s` (for shutdown,
        when `serve` no longer runs)."""
        ready = await self._ready(timeout_ms=int(max(0.0, timeout_s) * 1000), first=True)
        return ready[0] if ready else None

    async def _ready(self, timeout_ms: int | None, first: bool = False) -> list[AgentMessage]:
        """The valid messages of every socket that has one, after waiting for any."""
        poller = zmq.asyncio.Poller()
        for socket, _, _ in self._sockets.values():
            poller.register(socket, zmq.POLLIN)
        events = dict(await poller.poll(timeout_ms))
        messages = []
        for user, (socket, _, _) in self._sockets.items():
            if socket in events:
                message = self._decode(user, await socket.recv_multipart())
                if message is not None:
                    messages.append(message)
                    if first:
                        break
        return messages

    def _decode(self, user: str | None, frames: list[bytes]) -> AgentMessage | None:
        if len(frames) != 2:
            self.refuse(frames[0] if frames else b"?", f"{len(frames)} frames, expected 2")
            return None
        identity, data = frames
        try:
            message = decode_agent(data)
        except ProtocolError as error:
            self.refuse(identity, error.reason)
            return None
        if not speaks_for(identity, message.job):
            self.refuse(identity, f"job {message.job!r} is not the sender's identity")
            return None
        if self._owner(message.job) != user:
            where = f"{user}'s socket" if user else "the daemon's own socket"
            self.refuse(identity, f"job {message.job!r} spoke on {where}, not its user's")
            return None
        if self._trusted(message):
            self._routes[message.job] = identity
        return message

    async def send(self, message: DaemonMessage) -> bool:
        """Send to the message's job; False when its agent is not connected."""
        socket = self._sockets.get(self._owner(message.job), self._sockets[None])[0]
        route = self._routes.get(message.job)
        try:
            if route is None:  # no message of its launch yet, or its agent has left
                raise zmq.ZMQError(zmq.EHOSTUNREACH)
            await socket.send_multipart([route, encode(message)])
        except zmq.ZMQError as error:
            self.unreachable += 1
            log.warning("job %s: agent not reachable for %s: %s", message.job, message.type, error)
            return False
        return True

    def forget(self, job_id: str) -> None:
        """The job's agent has left, or a new launch begins: until the next trusted
        message, the job is answered nowhere."""
        self._routes.pop(job_id, None)

    def refuse(self, identity: bytes, reason: str) -> None:
        """Count a refused message; say it, `REFUSALS_SAID` per `REFUSAL_WINDOW_S` at most
        (a flood of garbage must not write an unbounded log), then how many were not."""
        self.malformed += 1
        now = time.monotonic()
        if now - self._window_start >= REFUSAL_WINDOW_S:
            if self._unsaid:
                log.warning(
                    "%d more agent messages refused in the last %.0f s, not logged one by one"
                    " (/metrics: stoker_agent_messages_refused_total counts every one)",
                    self._unsaid,
                    now - self._window_start,
                )
            self._window_start, self._said, self._unsaid = now, 0, 0
        if self._said < REFUSALS_SAID:
            self._said += 1
            log.warning("agent %r: message refused: %s", identity[:64], reason)
        else:
            self._unsaid += 1

    def close(self) -> None:
        # destroy, not term: term waits for every socket of the context to close, and a
        # receive cancelled at shutdown must not be able to hang the daemon's exit.
        self._context.destroy(linger=0)
        for _, path, _ in self._sockets.values():
            path.unlink(missing_ok=True)
