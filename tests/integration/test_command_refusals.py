"""Command jobs refused: at submit, each mistake named by its field and its fix; where
submit cannot tell, the launch says it as the job's reason. A live daemon over REST."""

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_harness import Daemon, daemon_factory
from tests.integration.test_command_jobs import command_job, failed_for


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """One daemon for the submits it refuses: none leaves a job, so each case finds none."""
    factory = daemon_factory(tmp_path_factory.mktemp("refusing"))
    yield next(factory)()
    next(factory, None)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"command": []}, "command"),
        ({"command": ["python"], "model": "Resnet18"}, "model"),
        ({"workdir": "/no/such/dir"}, "workdir"),
        ({"command": ["no-such-program-on-path", "train.py"]}, "command"),
        ({"env": {"A": 1}}, "env.A"),
        ({"env": {"STOKER_JOB_ID": "x"}}, "env"),
        ({"gpus": 9}, "gpus"),
        ({"colour": "blue"}, "colour"),
    ],
)
def test_bad_command_jobs_name_the_field(
    refusing: Daemon, change: dict[str, Any], field: str
) -> None:
    with refusing.client() as client:
        reply = client.post("/v1/jobs", json={**command_job("bad", "count_train.py"), **change})
        assert reply.status_code == 422, reply.text
        assert field in {problem["field"] for problem in reply.json()["detail"]}, reply.text
        assert client.get("/v1/jobs").json() == [], "nothing half-written"


def test_a_program_the_job_could_not_start_is_refused_at_submit_with_the_fix(
    serve: Callable[..., Daemon], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `python` missing from the daemon's PATH (a daemon started outside the virtual
    environment, on a host with only python3) once queued the job, which failed at its turn
    with a traceback in the daemon's log."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    daemon = serve()
    with daemon.client() as client:
        body = {**command_job("mine", "count_train.py"), "command": ["no-such-python", "t.py"]}
        reply = client.post("/v1/jobs", json=body)
        assert client.get("/v1/jobs").json() == [], "nothing queued"
    assert reply.status_code == 422, reply.text
    (problem,) = reply.json()["detail"]
    assert problem["field"] == "command"
    assert problem["message"].startswith(
        "'no-such-python' is not on the PATH jobs run with, the daemon's (/usr/bin:/bin); give"
    )
    with daemon.client() as client:  # `stoker submit train.py`, without `-- python`
        body = {**command_job("mine", "count_train.py"), "command": ["t.py", "--lr", "0.1"]}
        script = client.post("/v1/jobs", json=body).json()["detail"][0]["message"]
    python = "python" if shutil.which("python", path="/usr/bin:/bin") else "python3"
    assert script == (
        "'t.py' is a script, not a program on the PATH: run it with its interpreter,"
        f" `stoker submit -- {python} t.py --lr 0.1`"
    )
    # torchrun under stoker ran its own ranks on one GPU's slot, said nowhere.
    for launcher in (
        ["torchrun", "--nproc-per-node", "2"],
        ["python", "-m", "torch.distributed.run"],
    ):
        with daemon.client() as client:
            body = {**command_job("m", "count_train.py"), "command": [*launcher, "t.py", "-v"]}
            said = client.post("/v1/jobs", json=body).json()["detail"][0]["message"]
        assert said == (
            f"{launcher[0]} starts ranks of its own, and stoker starts one per GPU itself, with"
            " torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...): submit the script"
            " alone, `stoker submit --gpus N -- python t.py -v`"
        )
    launched = {  # where submit does not look, the launch tells, as the job's reason
        ("./run.sh",): "launch failed: './run.sh' does not exist in ",
        ("no-such-python", "/usr/bin"): "launch failed: 'no-such-python' is not on the job's "
        "PATH (/usr/bin); give the program's full path, or start `stoker serve` with it on PATH",
    }
    with daemon.client() as client:
        for (program, *path), expected in launched.items():
            env = {"PATH": path[0]} if path else {}
            body = {**command_job("m", "count_train.py"), "command": [program], "env": env}
            reply = client.post("/v1/jobs", json=body)
            assert reply.status_code == 201, reply.text
            assert failed_for(client, reply.json()["id"]).startswith(expected)
    assert "Traceback" not in daemon.log_path.read_text(), "the user's mistake, not the daemon's"
