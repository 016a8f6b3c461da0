"""HTTP connections as the daemon accepts them (issue 37, finding 2): a client that opens
thousands of connections and sends each a request line and one header, then nothing, held
every one open (uvicorn times a connection out only once it answered a request) until the
daemon ran out of file descriptors and its API, and its job launches, stopped.

`ConnectionGuard` bounds them where they are accepted, before any of the app runs:
- a connection has `header_timeout_s` to send a whole request head, from when it is opened
  and again from when its last answer was sent; then it is aborted;
- a kept-alive connection that sends nothing is closed after `idle_timeout_s` (uvicorn's
  `timeout_keep_alive`, set in cli/serve.py);
- one client holds `max_connections_per_client`, the node `max_connections`; a connection
  past either is aborted at once, before uvicorn reads it, so a refused one costs nothing.

A client is a remote address, or on this machine the unix user that owns the client's
socket (daemon/peers.py): every local user connects from 127.0.0.1, and counted by address
one of them could shut the others out.
"""

import asyncio
import logging
import resource
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from daemon.limits import Limits
from daemon.peers import PeerUsers

log = logging.getLogger(__name__)

# Descriptors kept out of `max_connections`: job launches (pipes, log files), SQLite,
# ZeroMQ, the state lock. At least this many, and at least half the open-file limit.
RESERVED_FILES = 512
# The listen backlog, which is also how many connections asyncio accepts in one turn of the
# event loop: uvicorn's 2,048 let a flood of connects stall every request for 190 ms at a
# time (bench/bench_slow_clients.py: p99 190 ms at 2,048, 29 ms at 256).
ACCEPT_BACKLOG = 256


def raise_open_file_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 2**20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as error:  # a container that forbids it: keep the soft
            log.warning("open-file limit left at %d (hard %d): %s", soft, hard, error)
    return soft


def connection_cap(configured: int, open_files: int) -> int:
    """`configured` (`limits.max_connections`), lowered to leave the daemon's other files
    room under `open_files` (its open-file limit): at most half of it, and RESERVED_FILES
    spare."""
    room = max(8, min(open_files // 2, open_files - RESERVED_FILES))
    if configured > room:
        log.warning(
            "limits.max_connections %d is over what the open-file limit %d leaves for HTTP"
            " connections; %d are allowed (raise the hard limit, `ulimit -Hn` or systemd's"
            " LimitNOFILE, for more)",
            configured,
            open_files,
            room,
        )
        return room
    return configured


class ConnectionGuard:
    """The open connections, by client: a local one's unix user, a remote one's address."""

    def __init__(self, limits: Limits, max_connections: int | None = None) -> None:
        self.header_timeout_s = limits.header_timeout_s
        self.per_client = limits.max_connections_per_client
        self.total = limits.max_connections if max_connections is None else max_connections
        self.open: dict[str, int] = {}
        self.count = 0
        self.refused = 0
        self.timed_out = 0
        self.peers = PeerUsers()

    def client_of(self, transport: asyncio.BaseTransport) -> str:
        """Whom a connection counts against: `uid N` for a local user's, else its address."""
        peer = transport.get_extra_info("peername")
        ours = transport.get_extra_info("sockname")
        if not (isinstance(peer, tuple) and isinstance(ours, tuple)):
            return "local"  # a unix socket
        uid = self.peers.uid((str(peer[0]), int(peer[1])), (str(ours[0]), int(ours[1])))
        return f"uid {uid}" if uid is not None else str(peer[0])

    def admit(self, client: str) -> bool:
        """Count a connection of `client` in; False (refuse it) past either cap."""
        if self.open.get(client, 0) >= self.per_client:
            return self._refuse(client, "max_connections_per_client", self.per_client)
        if self.count >= self.total:
            return self._refuse(client, "max_connections", self.total)
        self.open[client] = self.open.get(client, 0) + 1
        self.count += 1
        return True

    def _refuse(self, client: str, setting: str, cap: int) -> bool:
        self.refused += 1
        if self.refused in (1, 10, 100) or self.refused % 1000 == 0:  # said, not flooded
            log.warning(
                "connection from %s refused: %d open (limits.%s); %d refused so far",
                client,
                cap,
                setting,
                self.refused,
            )
        return False

    def release(self, client: str) -> None:
        self.open[client] -= 1
        if not self.open[client]:
            del self.open[client]
        self.count -= 1


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol under a `ConnectionGuard` (the class attribute `guard`, set by
    `guarded_protocol`): counted in, and timed while it waits for a request head."""

    guard: ConnectionGuard

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # uvicorn's own set-up (an h11 parser, its state) waits until the connection is let
        # in: a refused one costs only its count.
        self._arguments = (args, kwargs)
        self._client = ""
        self._admitted = False  # counted in the guard
        self._made = False  # uvicorn's connection_made ran
        self._head_timer: asyncio.TimerHandle | None = None
        self._awaited: object = None  # the request cycle current when the wait began

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._client = self.guard.client_of(transport)
        if not self.guard.admit(self._client):
            transport.abort()  # its descriptor is free now; connection_lost does nothing
            return
        self._admitted = self._made = True
        args, kwargs = self._arguments
        super().__init__(*args, **kwargs)
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_head_timer()
        if self._admitted:
            self._admitted = False
            self.guard.release(self._client)
        if self._made:
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # A request whose head arrived makes a new request cycle: the wait is over.
        if self._head_timer is not None and self.cycle is not self._awaited:
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        answered = self.cycle
        super().on_response_complete()
        if self._admitted and self.cycle is answered and not self.transport.is_closing():
            self._await_head()  # the next request's head, on a kept-alive connection

    def _await_head(self) -> None:
        self._awaited = self.cycle
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.guard.header_timeout_s, self._head_late)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if self._admitted and self.cycle is self._awaited:
            self.guard.timed_out += 1
            if self.guard.timed_out in (1, 10, 100) or self.guard.timed_out % 1000 == 0:
                log.warning(
                    "connection from %s closed: no whole request head in %g s"
                    " (limits.header_timeout_s); %d so far",
                    self._client,
                    self.guard.header_timeout_s,
                    self.guard.timed_out,
                )
            self.transport.abort()


def guarded_protocol(guard: ConnectionGuard) -> type[GuardedH11]:
    """The protocol class to give uvicorn (`Config(http=...)`): every connection under
    `guard`."""
    return type("GuardedH11", (GuardedH11,), {"guard": guard})
