"""Issue 17's adversarial suite: each finding replayed against a live daemon on loopback,
bounded in time. docs/security.md states the threat model these tests hold it to."""

import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory, job_body, wait_for

ADMIN = "admin-token-never-logged-0123456789"
ALICE = "alice-token-never-logged-0123456789"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def test_a_token_in_a_query_string_never_reaches_the_log(serve: Callable[..., Daemon]) -> None:
    """Finding 2: signing in with `/?token=` (and any `?token=`, even refused) wrote the
    token into the access log."""
    daemon = serve(tokens={"admin": ADMIN, "alice": ALICE})
    daemon.log_level = "info"  # every request logged: the worst case
    daemon.stop()
    daemon.start()
    with httpx.Client(base_url=daemon.url, timeout=10, follow_redirects=True) as browser:
        signed_in = browser.get("/", params={"token": ALICE})
        assert signed_in.status_code == 200 and browser.cookies, "signed in, by its cookie"
    with httpx.Client(base_url=daemon.url, timeout=10) as client:  # no cookie
        refused = client.get("/v1/jobs", params={"token": "WRONG-never-logged-either"})
        assert refused.status_code == 401
        client.get("/v1/jobs", params={"x": "1", "Token": ADMIN})
    text = wait_for("the access log's lines", lambda: _access_lines(daemon), timeout_s=10)
    assert "never-logged" not in text, text
    assert "token=[redacted]" in text and "Token=[redacted]" in text


def _access_lines(daemon: Daemon) -> str | None:
    text = daemon.log_path.read_text()
    return text if text.count("token=[redacted]") + text.count("Token=[redacted]") >= 3 else None
