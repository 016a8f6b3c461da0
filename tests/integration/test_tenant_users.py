"""Per-tenant unix users under a live root daemon: a tenant's job runs as its user (here
`nobody`), sees that user's name and home, cannot read the daemon's state or another job's
files, and its directory, logs and output are its own, closed to others. A job on the SDK
runs there end to end: it reaches the daemon over its user's agent socket."""

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="jobs change user only under root")
NOBODY = pwd.getpwnam("nobody")
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
TOKENS = {"admin": "admin-secret-token-0123456789", "alice": "alice-secret-token-0123456789"}
SCRIPTS = Path(__file__).resolve().parent / "scripts"
SCRIPT = SCRIPTS / "as_user.py"
REPO = Path(__file__).resolve().parents[2]


# Found, not imported: an import of torch costs the probe 1.5 s of CPU, and the job's own
# import says the rest (its log is in the test's failure).
FINDS_THE_SDK = (
    "import importlib.util as u, sys; missing = [m for m in ('torch', 'stoker')"
    " if u.find_spec(m) is None]; sys.exit(f'cannot find {missing}' if missing else 0)"
)


def reachable_by_nobody(python: str, env: dict[str, str]) -> str:
    """Why `nobody` cannot run this interpreter with torch and stoker ('' when it can)."""
    try:
        probe = subprocess.run(
            ["runuser", "-u", "nobody", "--", "env", *(f"{k}={v}" for k, v in env.items()),
             python, "-c", FINDS_THE_SDK],
            check=False, capture_output=True, text=True, timeout=120, cwd="/",
        )  # fmt: skip
    except FileNotFoundError:
        return "no runuser"
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]


def python_for_nobody() -> tuple[str, dict[str, str]]:
    """An interpreter `nobody` runs the SDK with, and the variables it needs: this one, or
    else /usr/bin's with this environment's packages and the repository on PYTHONPATH, as a
    site shares one environment (a Python under /root, 0700, as on the development VM, is
    out of nobody's reach). Skips the test when neither works."""
    why = reachable_by_nobody(sys.executable, {})
    if not why:
        return sys.executable, {}
    if SYSTEM_PYTHON is not None:
        packages = sysconfig.get_paths()["purelib"]
        env = {"PYTHONPATH": f"{packages}:{REPO}"}
        if not (also := reachable_by_nobody(SYSTEM_PYTHON, env)):
            return SYSTEM_PYTHON, env
        why += f"; nor {SYSTEM_PYTHON} with {env}: {also}"
    pytest.skip(f"nobody cannot run {sys.executable} with torch: {why}")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder `nobody` may read (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="stoker-tenant-"))
    path.chmod(0o755)
    shutil.copy(SCRIPT, path / SCRIPT.name)
    (path / SCRIPT.name).chmod(0o644)
    yield path
    shutil.rmtree(path)


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no python3 in /usr/bin for nobody to run")
def test_a_tenants_job_runs_as_its_unix_user_and_keeps_its_files_to_itself(
    shared_dir: Path,
) -> None:
    factory = daemon_factory(shared_dir)  # the state dir's parents: passable by `nobody`
    daemon: Daemon = next(factory)(tokens=TOKENS, unix_users={"alice": "nobody"})
    try:
        with daemon.client("admin") as admin, daemon.client("alice") as alice:
            warnings = admin.get("/v1/node").json()["warnings"]
            assert any("admin run as root" in warning for warning in warnings), warnings
            assert not any("lets no other user through" in said for said in warnings), warnings
            mine = admin.post("/v1/jobs", json=job("admins", ["sleep", "30"], shared_dir))
            theirs = alice.post(
                "/v1/jobs",
                json=job(
                    "alices", [str(SYSTEM_PYTHON), SCRIPT.name, mine.json()["id"]], shared_dir
                ),
            )
            assert theirs.status_code == 201, theirs.text
            job_id = theirs.json()["id"]
            done = wait_for("alice's job", lambda: ended(alice, job_id), timeout_s=60)
            assert done["state"] == "completed", done
            out = alice.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stdout"}).text
            admin.delete(f"/v1/jobs/{mine.json()['id']}")
    finally:
        next(factory, None)
    assert f"uid={NOBODY.pw_uid} user=nobody home={NOBODY.pw_dir}" in out
    assert "db=denied jobs=denied" in out and "other=denied" in out, out
    job_dir = daemon.state_dir / "jobs" / job_id
    for path, mode in (
        (job_dir, 0o700),
        (job_dir / "stdout.log", 0o600),
        (job_dir / "output" / "result.txt", None),
    ):
        info = path.stat()
        assert info.st_uid == NOBODY.pw_uid, path
        assert mode is None or stat.S_IMODE(info.st_mode) == mode, path
    admins_dir = daemon.state_dir / "jobs" / mine.json()["id"]
    assert admins_dir.stat().st_uid == 0 and stat.S_IMODE(admins_dir.stat().st_mode) == 0o700


def test_an_sdk_job_runs_as_its_unix_user_over_that_users_agent_socket(shared_dir: Path) -> None:
    python, python_env = python_for_nobody()
    shutil.copy(SCRIPTS / "count_train.py", shared_dir / "count_train.py")
    (shared_dir / "count_train.py").chmod(0o644)
    factory = daemon_factory(shared_dir)
    daemon: Daemon = next(factory)(tokens=TOKENS, unix_users={"alice": "nobody"})
    try:
        with daemon.client("alice") as alice:
            command = [python, "count_train.py", "2", "0.02"]
            body = {**job("sdk", command, shared_dir), "env": python_env}
            submitted = alice.post("/v1/jobs", json=body)
            assert submitted.status_code == 201, submitted.text
            job_id = submitted.json()["id"]
            done = wait_for("the SDK job", lambda: ended(alice, job_id), timeout_s=120)
            out = alice.get(f"/v1/jobs/{job_id}/logs", params={"stream": "stdout"}).text
            assert done["state"] == "completed", (done, out)
            losses = alice.get(f"/v1/jobs/{job_id}/metrics").json()["series"]["loss"]
            # A third epoch, going on from its checkpoint: read by the job itself, as nobody.
            longer = [python, "count_train.py", "3", "0.02"]
            body = {**job("sdk", longer, shared_dir), "env": python_env, "continue_from": job_id}
            more = alice.post("/v1/jobs", json=body)
            assert more.status_code == 201, more.text
            more_id = more.json()["id"]
            went_on = wait_for("the job that goes on", lambda: ended(alice, more_id), timeout_s=120)
            assert went_on["state"] == "completed", went_on
        socket = (daemon.state_dir / "agents-nobody.sock").stat()
    finally:
        next(factory, None)
    assert "done: weight" in out, out
    assert len(losses) == 2 * 96 // 8, "every step's loss came over nobody's agent socket"
    assert socket.st_uid == NOBODY.pw_uid and stat.S_IMODE(socket.st_mode) == 0o600
    job_dir = daemon.state_dir / "jobs" / job_id
    seen = (job_dir / "output" / "seen.txt").read_text().split("\n")
    assert sorted(line for line in seen if line) == sorted(
        f"{epoch} {index}" for epoch in range(2) for index in range(96)
    ), "every sample once an epoch"
    checkpoints = list((job_dir / "checkpoints").iterdir())
    assert checkpoints and all(path.stat().st_uid == NOBODY.pw_uid for path in checkpoints)
    third = (daemon.state_dir / "jobs" / more_id / "output" / "seen.txt").read_text().split()
    assert sorted(zip(third[::2], third[1::2], strict=True)) == sorted(
        ("2", str(index)) for index in range(96)
    ), "only the third epoch, from the first job's checkpoint"


def job(name: str, command: list[str], workdir: Path) -> dict[str, object]:
    return {"name": name, "command": command, "workdir": str(workdir), "batch_size": 8, "gpus": 1}


def ended(client: object, job_id: str) -> dict[str, object] | None:
    found = client.get(f"/v1/jobs/{job_id}").json()  # type: ignore[attr-defined]
    return found if found["state"] in ("completed", "failed", "cancelled") else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__]))
