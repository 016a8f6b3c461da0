"""Scripts without a DataLoader on `job.steps` (examples/language_model.py,
time_sequence.py, regression.py, docs/sdk.md): alone they print what their plain versions
print, a stopped run goes on from its checkpoint to the same numbers, and under the daemon
they complete, counted in steps, a cancelled one resumed where it stopped."""

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.cli import stoker
from tests.integration.daemon_harness import Daemon, daemon_factory, ended, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# One thread each, as the daemon gives a job its slot's share: OpenMP's spinning threads
# doubled these scripts' CPU on a busy 2-core host, and every run of a comparison gets it.
ENV = os.environ | {"PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def run(script: Path, *args: str, cwd: Path) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(script), *args], cwd=cwd, capture_output=True, text=True,
        check=True, timeout=120, env=ENV,
    )  # fmt: skip
    return done.stdout.splitlines()


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("language_model", ("--epochs", "2")),
        ("time_sequence", ("--steps", "2")),
        ("regression", ()),
    ],
)
def test_each_adopts_the_sdk_and_trains_as_its_plain_version(
    name: str, args: tuple[str, ...], tmp_path: Path
) -> None:
    plain = run(EXAMPLES / "plain" / f"{name}_plain.py", *args, cwd=tmp_path)
    assert run(EXAMPLES / f"{name}.py", *args, cwd=tmp_path) == plain


def test_a_step_loop_stopped_goes_on_from_its_checkpoint_to_the_same_numbers(
    tmp_path: Path,
) -> None:
    script = str(EXAMPLES / "time_sequence.py")
    whole = run(Path(script), "--steps", "3", cwd=tmp_path)
    (tmp_path / "stoker-out").rename(tmp_path / "whole-out")
    with subprocess.Popen(
        [sys.executable, "-u", script, "--steps", "3"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV,
    ) as first:  # fmt: skip
        assert first.stdout is not None
        lines = [first.stdout.readline().rstrip("\n")]
        first.send_signal(signal.SIGINT)  # a Ctrl-C after its first step: stops at the next
        lines += first.stdout.read().splitlines()
        assert first.wait(timeout=60) == 128 + signal.SIGINT
    rest = run(Path(script), "--steps", "3", cwd=tmp_path)
    assert rest, "the stopped run left steps of its 3 to this one"
    assert lines + rest == whole, "every step once, and the same numbers"


def test_under_the_daemon_a_step_loop_completes_and_a_cancelled_one_resumes(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    daemon = serve(agent_mode="process")
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    # 24 epochs of 43 steps: the cancel lands after 100 of them, ten times as many to go.
    command = ("--", sys.executable, str(EXAMPLES / "language_model.py"), "--epochs", "24")
    job_id = stoker("submit", *where, "--name", "lm", *command, cwd=tmp_path).stdout.strip()
    quick = stoker(
        "submit", *where, "--", sys.executable, str(EXAMPLES / "regression.py"), cwd=tmp_path
    ).stdout.strip()
    with daemon.client() as client:
        wait_for("a few epochs", lambda: client.get(f"/v1/jobs/{job_id}").json()["iteration"] > 100)
        assert stoker("cancel", job_id, *where).code == 0  # it checkpoints, then leaves
        wait_for("its cancel", lambda: ended(client, job_id) is not None)
        wait_for("its exit", lambda: not client.get(f"/v1/jobs/{job_id}").json()["exiting"])
        stopped = client.get(f"/v1/jobs/{job_id}").json()["iteration"]
        again = stoker("resume", job_id, *where)
        assert again.code == 0, again.stderr
        resumed = again.stdout.strip()
        wait_for("its end", lambda: ended(client, resumed) is not None, timeout_s=120.0)
        job = client.get(f"/v1/jobs/{resumed}").json()
        assert job["state"] == "completed", job["reason"]
        assert job["iteration"] == 24 * 43, "24 epochs of 43 steps (674 rows, bptt 16), once"
        assert job["unmanaged"] is False
        assert job["lineage"] == [job_id, resumed], "one history, as Slurm's requeue keeps"
        assert f"{job_id} -> this job" in stoker("show", resumed, *where).stdout
        log = stoker("logs", resumed, "--stderr", *where).stderr
        assert f"step {stopped}" in log, log  # "resuming from ... (epoch E, step N)"
        try:
            wait_for("the regression", lambda: ended(client, quick) is not None)
        except AssertionError:  # what it was doing, for the CI log
            print(client.get(f"/v1/jobs/{quick}/events").text, flush=True)
            raise
        done = client.get(f"/v1/jobs/{quick}").json()
        assert done["state"] == "completed", done["reason"]
        assert done["iteration"] > 100
    time.sleep(0)  # nothing left running: the harness stops the daemon


SLOW_SETUP = """
import sys, time
import stoker

job = stoker.init()
time.sleep(float(sys.argv[1]))  # tokenising, building a model: the daemon may resize meanwhile
for step in job.steps(40, samples=8):
    time.sleep(0.01)
"""


def test_a_step_loop_paused_before_it_said_it_has_no_loader_is_resumed(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    # Its hello at `stoker.init()` says resizable; a round during its setup pauses it;
    # `job.steps` then says it has no loader. Its resume asked for 0 workers, which the
    # protocol refuses: it stayed `resuming` for good (CI, 2026-12-07).
    daemon = serve(agent_mode="process")
    script = tmp_path / "slow_setup.py"
    script.write_text(SLOW_SETUP)
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    slow = stoker("submit", *where, "--", sys.executable, str(script), "4", cwd=tmp_path)
    with daemon.client() as client:
        wait_for("its setup", lambda: client.get(f"/v1/jobs/{slow.stdout.strip()}").json()["phase"])
        other = stoker("submit", *where, "--", sys.executable, str(script), "0", cwd=tmp_path)
        for job_id in (slow.stdout.strip(), other.stdout.strip()):
            wait_for(f"{job_id}'s end", lambda: ended(client, job_id), timeout_s=90.0)  # noqa: B023
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "completed", job["reason"]
            assert job["iteration"] == 40 and job["restarts"] == 0, job["reason"]
        kinds = client.get(f"/v1/jobs/{slow.stdout.strip()}/events").json()
        moves = [event["data"].get("to") for event in kinds if event["kind"] == "state"]
        assert "paused" in moves, f"the round during its setup paused it: {moves}"
        assert "submitted" not in moves, f"resumed, never relaunched: {moves}"
    # A loaderless job's heartbeat divided by its planned rate, 0: an error at each one.
    assert "Traceback" not in daemon.log_path.read_text()
