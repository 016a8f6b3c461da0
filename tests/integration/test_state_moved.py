"""A state dir moved away under a running daemon (issue 37, finding 15): its jobs' last
checkpoints and markers made `state/jobs/<id>` again at the old path on their way out, and
the next start there refused ("database missing but jobs holds 1 folder"). A job's process
never makes its job's folder; only the moved state dir holds the state."""

import os
import sys
from pathlib import Path

from daemon.processes import group_alive
from tests.integration.cli import stoker
from tests.integration.daemon_harness import daemon_factory, ended, stored_pid, wait_for

ENDLESS = """
import time
import stoker

job = stoker.init()
for step in job.steps(None, samples=1):
    time.sleep(0.01)
"""


def test_a_moved_state_dir_is_not_made_again_by_the_jobs_on_their_way_out(
    tmp_path: Path,
) -> None:
    daemons = daemon_factory(tmp_path)
    serve = next(daemons)
    daemon = serve(agent_mode="process", shutdown_grace_s=3.0)
    script = tmp_path / "endless.py"
    script.write_text(ENDLESS)
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    job_id = stoker("submit", *where, "--", sys.executable, str(script)).stdout.strip()
    with daemon.client() as client:
        wait_for("a few steps", lambda: client.get(f"/v1/jobs/{job_id}").json()["iteration"] > 5)
    os.rename(daemon.state_dir, tmp_path / "moved")
    pid = stored_pid(tmp_path / "moved", job_id)
    assert pid is not None
    daemon.stop()  # its agents are told to checkpoint and leave
    # The job's process may outlive the daemon by a moment: once it is gone, nothing is left
    # that could make the folder.
    wait_for("the job's processes to be gone", lambda: not group_alive(pid), 10.0)
    assert not daemon.state_dir.exists(), sorted(map(str, daemon.state_dir.rglob("*")))
    again = serve(state="moved")  # the moved state dir starts, with its job
    with again.client() as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        # Relaunched and not heard from yet, a stop would leave it stepping for ever with no
        # daemon (`daemon/shutdown.py` left_running), a process past the test's end.
        client.delete(f"/v1/jobs/{job_id}").raise_for_status()
        wait_for("the cancel", lambda: ended(client, job_id), timeout_s=60.0)
    for _ in daemons:
        pass  # the factory stops what it started
