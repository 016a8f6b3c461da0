"""Issue 37, finding 2: a local user with no token opened thousands of connections, each
sending a request line and one header, and the daemon ran out of file descriptors. Here
another user's half-open connections are closed after the header timeout, are capped per
user, and leave a tenant's requests fast (the heavy version: bench/bench_slow_clients.py)."""

import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.bench_slow_clients import NOBODY, SlowClient, closed, timed_gets
from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for

TOKENS = {"admin": "admin-token-slow-clients-0123456789", "alice": "alice-token-0123456789ab"}
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the flood runs as another user")


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


@pytest.mark.serial
@as_root
def test_half_open_connections_are_closed_and_leave_others_fast(
    serve: Callable[..., Daemon],
) -> None:
    limits = {"header_timeout_s": 1.0, "max_connections_per_client": 1000}
    daemon = serve(tokens=TOKENS, limits=limits)
    flood = SlowClient(daemon.port, 400, user=NOBODY).start()
    try:
        wait_for("400 half-open connections", lambda: flood.opened.value >= 400, timeout_s=30)
        took = timed_gets(daemon.url, TOKENS["alice"], 200)
    finally:
        end = flood.stop(wait_s=20)
    assert flood.closed_by_daemon.value >= 400, end  # every one closed
    assert end["still_open"] == 0, end
    p99 = statistics.quantiles(took, n=100)[98]
    assert p99 < 0.1, f"alice's p99 {p99 * 1000:.0f} ms under 400 half-open connections"


@as_root
def test_a_half_open_connection_waits_for_the_header_timeout_only(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(tokens=TOKENS, limits={"header_timeout_s": 1.0})
    half = socket.create_connection(("127.0.0.1", daemon.port))
    half.sendall(b"GET /healthz HTTP/1.1\r\nHost: stoker\r\n")
    opened = time.monotonic()
    wait_for("the half-open connection to be closed", lambda: closed(half), timeout_s=15)
    assert time.monotonic() - opened >= 0.9  # not before its time
    half.close()


@as_root
def test_one_user_past_its_connection_cap_is_refused_and_others_are_not(
    serve: Callable[..., Daemon],
) -> None:
    limits = {"header_timeout_s": 30.0, "max_connections_per_client": 20}
    daemon = serve(tokens=TOKENS, limits=limits)
    flood = SlowClient(daemon.port, 100, user=NOBODY).start()
    try:
        wait_for("100 connections tried", lambda: flood.opened.value >= 100, timeout_s=30)
        # The 80 past nobody's cap are aborted at once; its 20 wait for their timeout.
        wait_for("80 refused", lambda: flood.closed_by_daemon.value >= 80, timeout_s=15)
        time.sleep(0.5)
        assert flood.closed_by_daemon.value == 80
        took = timed_gets(daemon.url, TOKENS["alice"], 30)  # root: a count of its own
    finally:
        flood.stop(wait_s=0.5)
    assert len(took) == 30
