"""Issue 37, findings 10, 12 (its submit rate) and 14: a token whose query name was
URL-encoded reached the access log; a tenant could submit without bound; log follows had no
cap. Each against a live daemon."""

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.integration.daemon_harness import FAST, Daemon, daemon_factory, job_body, wait_for

ADMIN = "admin-token-never-logged-0123456789"
ALICE = "alice-token-never-logged-0123456789"
BOB = "bob-token-never-logged-0123456789ab"
TOKENS = {"admin": ADMIN, "alice": ALICE, "bob": BOB}
TALKER = "import time\nwhile True:\n    print('still here', flush=True)\n    time.sleep(0.2)\n"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def test_a_token_under_an_encoded_name_never_reaches_the_access_log(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(tokens=TOKENS, log_level="info")  # every request logged
    with httpx.Client(timeout=10, follow_redirects=True) as browser:
        signed_in = browser.get(f"{daemon.url}/?%74oken={ALICE}")  # as ?token=, decoded
        assert signed_in.status_code == 200 and browser.cookies, "signed in, by its cookie"
        browser.get(f"{daemon.url}/v1/jobs?a=1&TO%4BEN={ADMIN}")
    text = wait_for("the access log's lines", lambda: _redacted_twice(daemon), timeout_s=10)
    assert "never-logged" not in text, text


def _redacted_twice(daemon: Daemon) -> str | None:
    text = daemon.log_path.read_text()
    return text if text.count("=[redacted]") >= 2 else None


def test_a_tenant_past_its_submit_rate_is_told_when_to_come_back(
    serve: Callable[..., Daemon],
) -> None:
    # Only their submits count here: none of the 11 is launched (an agent each, for nothing)
    # within an arrival window of 5 minutes.
    waits = {"arrival_window_s": 300.0, "start_when_free": False}
    scheduler = {**FAST["scheduler"], **waits}  # type: ignore[dict-item]
    daemon = serve(tokens=TOKENS, limits={"submits_per_minute": 5}, scheduler=scheduler)
    with daemon.client("alice") as alice, daemon.client("bob") as bob:
        for n in range(5):  # the burst
            alice.post("/v1/jobs", json=job_body(f"a{n}")).raise_for_status()
        refused = alice.post("/v1/jobs", json=job_body("a5"))
        assert refused.status_code == 429
        assert "limits.submits_per_minute" in refused.json()["detail"]
        assert 1 <= int(refused.headers["Retry-After"]) <= 12  # one in 60/5 s
        bob.post("/v1/jobs", json=job_body("b0")).raise_for_status()  # a bucket of its own
    with daemon.client("admin") as admin:  # the admin too
        codes = [admin.post("/v1/jobs", json=job_body(f"x{n}")).status_code for n in range(6)]
    assert codes == [201] * 5 + [429]


def test_log_follows_are_capped_per_tenant_and_freed_when_closed(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(tokens=TOKENS, limits={"max_follows_per_tenant": 2, "max_follows": 3})
    with daemon.client("alice") as alice, daemon.client("bob") as bob:
        body = {"name": "talk", "command": [sys.executable, "-c", TALKER], "batch_size": 8}
        job_id = alice.post("/v1/jobs", json={**body, "gpus": 1}).raise_for_status().json()["id"]
        bob_job = bob.post("/v1/jobs", json={**body, "gpus": 1}).raise_for_status().json()["id"]
        stop = threading.Event()
        held: list[int] = []

        def follow(client: httpx.Client, job: str) -> None:
            params = {"follow": "true"}
            with client.stream("GET", f"/v1/jobs/{job}/logs", params=params) as answer:
                held.append(answer.status_code)
                stop.wait(30)

        threads = [threading.Thread(target=follow, args=(alice, job_id)) for _ in range(2)]
        threads.append(threading.Thread(target=follow, args=(bob, bob_job)))
        for thread in threads:
            thread.start()
        wait_for("three follows", lambda: len(held) == 3, timeout_s=20)
        third = alice.get(f"/v1/jobs/{job_id}/logs", params={"follow": "true"})
        assert third.status_code == 429 and "limits.max_follows_per_tenant" in third.text
        node = bob.get(f"/v1/jobs/{bob_job}/logs", params={"follow": "true"})
        assert node.status_code == 429 and "(limits.max_follows)" in node.text
        assert alice.get(f"/v1/jobs/{job_id}/logs").status_code == 200  # a read is no follow
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

        def another_follow_lets_in() -> bool:
            params = {"follow": "true"}
            with alice.stream("GET", f"/v1/jobs/{job_id}/logs", params=params) as answer:
                return answer.status_code == 200

        wait_for("a closed follow's place to be free", another_follow_lets_in, timeout_s=10)
        alice.delete(f"/v1/jobs/{job_id}")
        bob.delete(f"/v1/jobs/{bob_job}")
    assert held == [200, 200, 200]
