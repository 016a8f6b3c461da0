"""A job's processes as one unit under a live root daemon (issue 37, findings 7 and 13): a
process that left the job's process group (`setsid cmd &`) dies with the job's cgroup on
cancel, and simulated agents of a tenant mapped to a unix user speak on that user's socket."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from daemon.cgroups import JobCgroups
from daemon.limits import Limits
from daemon.processes import alive
from tests.integration.daemon_harness import daemon_factory, ended, job_body, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups and users need root")
TOKENS = {"admin": "admin-secret-token-0123456789", "alice": "alice-secret-token-0123456789"}
ESCAPE = "setsid sh -c 'echo $$ > escaped.pid; while :; do sleep 1; done' & sleep 600"


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user may pass (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="stoker-isolation-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def processes_of(job_id: str) -> list[int]:
    """Every process whose environment names the job (root reads them all)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"STOKER_JOB_ID={job_id}".encode() in environ:
            found.append(int(entry.name))
    return found


def test_a_cancelled_job_leaves_no_process_behind_not_even_a_setsid_one(
    shared_dir: Path,
) -> None:
    cgroups, why = JobCgroups.start(Limits(), shared_dir / "probe")
    if cgroups is None:
        pytest.skip(f"no job cgroups here: {why}")
    factory = daemon_factory(shared_dir)
    daemon = next(factory)()
    try:
        with daemon.client() as client:
            body = {
                "name": "escapes",
                "command": ["sh", "-c", ESCAPE],
                "workdir": str(shared_dir),
                "batch_size": 8,
                "gpus": 1,
            }
            made = client.post("/v1/jobs", json=body)
            assert made.status_code == 201, made.text
            job_id = made.json()["id"]
            escaped = shared_dir / "escaped.pid"
            wait_for("the loop to leave the job's group", escaped.exists, timeout_s=60)
            loop = int(escaped.read_text())
            assert os.getsid(loop) == loop, "it runs in a session of its own"
            client.delete(f"/v1/jobs/{job_id}")
            done = wait_for("the cancel", lambda: ended(client, job_id), timeout_s=60)
            assert done["state"] == "cancelled", done
            wait_for("every process of the job to end", lambda: not processes_of(job_id), 30)
            wait_for("the loop to end", lambda: not alive(loop), 10)  # a zombie: killed
    finally:
        next(factory, None)


def test_a_mapped_tenants_simulated_agent_speaks_on_its_users_socket(shared_dir: Path) -> None:
    factory = daemon_factory(shared_dir)
    daemon = next(factory)(tokens=TOKENS, unix_users={"alice": "nobody"})
    try:
        with daemon.client("alice") as alice:
            made = alice.post("/v1/jobs", json=job_body("simulated", iterations=100))
            assert made.status_code == 201, made.text
            job_id = made.json()["id"]
            done = wait_for("the job to end", lambda: ended(alice, job_id), timeout_s=90)
            events = alice.get(f"/v1/jobs/{job_id}/events").json()
    finally:
        next(factory, None)
    assert done["state"] == "completed", done
    moves = [(e["data"]["from"], e["data"]["to"]) for e in events if e["kind"] == "state"]
    assert ("starting", "running") in moves, f"its agent was never heard: {moves}"
