"""Issue 37, findings 1 and 9, live: a real daemon running its jobs as processes; one
job's process speaks the protocol itself with absurd numbers over $STOKER_CONTROL with
its launch's secret, and another tenant's job must still start and complete. The
attacker's messages are refused at the edge, and its secret is in no line of the log."""

import sqlite3
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory, ended, wait_for

SCRIPTS = Path(__file__).resolve().parent / "scripts"
TOKENS = {"admin": "admin-token-0123456789abcdef", "alice": "alice-token-0123456789abcdef"}
TOKENS["bob"] = "bob-token-0123456789abcdef"


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def command(name: str, script: str, *args: str) -> dict[str, object]:
    return {
        "name": name,
        "command": [sys.executable, str(SCRIPTS / script), *args],
        "batch_size": 8,
        "gpus": 1,
    }


def test_a_job_speaking_absurd_numbers_stops_no_other_tenants_job(
    serve: Callable[..., Daemon],
) -> None:
    node = {"cpu_slots": 2, "cpu_workers": 4, "max_jobs_per_gpu": 1}
    daemon = serve(agent_mode="process", node=node, tokens=TOKENS, log_level="info")
    with daemon.client("alice") as alice, daemon.client("bob") as bob:
        attacker = alice.post("/v1/jobs", json=command("absurd", "absurd_agent.py", "8")).json()
        wait_for(
            "the attacker to run",
            lambda: alice.get(f"/v1/jobs/{attacker['id']}").json()["state"] == "running",
            timeout_s=60,
        )
        other = bob.post("/v1/jobs", json=command("plain", "plain.py", "1", "0")).json()
        done = wait_for("bob's job to end", lambda: ended(bob, other["id"]), timeout_s=90)
        assert done["state"] == "completed", done
        with daemon.client("admin") as admin:
            metrics = admin.get("/metrics").text
        refused = [line for line in metrics.splitlines() if "agent_messages_refused" in line]
        assert any(not line.startswith("#") and float(line.split()[-1]) > 0 for line in refused)
    db = sqlite3.connect(daemon.state_dir / "stoker.db")
    try:
        query = "SELECT agent_secret FROM jobs WHERE id = ?"
        (secret,) = db.execute(query, (attacker["id"],)).fetchone()
    finally:
        db.close()
    log = daemon.log_path.read_text()
    assert secret and secret not in log, "finding 9: the launch's secret is never logged"
    assert "Traceback" not in log and "ZeroDivisionError" not in log, log[-3000:]
    assert "refused" in log, "the refusals are said"
