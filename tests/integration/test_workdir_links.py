"""A tenant's workdir through a link (issue 37, finding 3): roots were checked at submit on
the resolved path but the launch used the link, so a link pointed elsewhere after the
submit ran alice's job in bob's folder, and as root's chdir, before the job became alice's
user, even a 0700 folder let it in. The workdir is resolved once, stored, and entered as
the job's user."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory, ended, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs change user only under root")
TOKENS = {"admin": "admin-secret-token-0123456789", "alice": "alice-secret-token-0123456789"}


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder `nobody` may pass (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="stoker-workdir-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_link_pointed_elsewhere_after_the_submit_leads_nowhere(shared_dir: Path) -> None:
    allowed, bobs = shared_dir / "allowed", shared_dir / "bob"
    allowed.mkdir()
    allowed.chmod(0o755)  # whatever the umask: an in-process Service leaves 077
    bobs.mkdir(mode=0o700)  # root's: `nobody` may not enter
    (bobs / "secret.txt").write_text("bob's secret\n")
    link = allowed / "proj"
    (allowed / "real").mkdir()
    (allowed / "real").chmod(0o755)
    link.symlink_to(allowed / "real")
    tenants = {"alice": {"workdir_roots": [str(allowed)], "max_running_jobs": 1}}
    factory = daemon_factory(shared_dir)
    daemon: Daemon = next(factory)(tokens=TOKENS, unix_users={"alice": "nobody"}, tenants=tenants)
    try:
        with daemon.client("alice") as alice:
            body = {"batch_size": 8, "gpus": 1, "workdir": str(link)}
            first = alice.post(
                "/v1/jobs", json={**body, "name": "wait", "command": ["sleep", "60"]}
            )
            assert first.status_code == 201, first.text
            waiting = f"/v1/jobs/{first.json()['id']}"
            holds = ("starting", "running")  # a plain command is `starting` until it says hello
            wait_for("the first", lambda: alice.get(waiting).json()["state"] in holds)
            look = ["sh", "-c", "pwd; cat secret.txt 2>&1 || true"]
            queued = alice.post("/v1/jobs", json={**body, "name": "look", "command": look})
            assert queued.status_code == 201, queued.text
            job_id = queued.json()["id"]
            assert queued.json()["workdir"] == str(allowed / "real"), "stored resolved"
            link.unlink()
            link.symlink_to(bobs)  # after the submit: the queued job launches later
            alice.delete(f"/v1/jobs/{first.json()['id']}")
            done = wait_for("the queued job", lambda: ended(alice, job_id), timeout_s=60)
            out = alice.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stdout"}).text
    finally:
        next(factory, None)
    assert "bob's secret" not in out, out
    assert done["state"] == "completed", done
    assert out.splitlines()[0].endswith(f" {allowed / 'real'}"), out  # "[rank 0] <its pwd>"
