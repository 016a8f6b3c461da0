"""The examples in examples/, each at a tiny size: alone as `python examples/X.py`, and
under a live daemon from its TOML file or as a command."""

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.data import make_dataset
from tests.integration.cli import stoker
from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Daemon]]:
    # As users run it: from the environment whose `python` has torch and stoker.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield from daemon_factory(tmp_path)


def alone(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=workdir, capture_output=True, text=True, timeout=180,
        check=False,
    )  # fmt: skip


def ended(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in ("completed", "failed", "cancelled") else None


def test_the_tabular_example_runs_alone_and_picks_up_where_it_stopped(tmp_path: Path) -> None:
    first = alone(tmp_path, str(EXAMPLES / "tabular.py"), "--epochs", "1", "--rows", "256")
    assert first.returncode == 0, first.stderr
    assert "epoch 0" in first.stdout
    again = alone(tmp_path, str(EXAMPLES / "tabular.py"), "--epochs", "2", "--rows", "256")
    assert again.returncode == 0, again.stderr
    assert "epoch 0" not in again.stdout and "epoch 1" in again.stdout, "it resumed"
    assert len(list((tmp_path / "stoker-out" / "checkpoints").glob("*.pt"))) == 2


def test_the_image_example_trains_alone_on_a_made_dataset(tmp_path: Path) -> None:
    make_dataset(tmp_path / "data", images=64, size=32)
    run = alone(tmp_path, str(EXAMPLES / "image_classifier.py"), "data", "--epochs", "1")
    assert run.returncode == 0, run.stderr
    assert "epoch 0: loss" in run.stdout


def test_the_tabular_example_runs_under_the_daemon_from_its_toml(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve()
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    submitted = stoker("submit", EXAMPLES / "tabular.toml", *where)
    assert submitted.code == 0, submitted.stderr
    job = submitted.json()
    with daemon.client() as client:
        done = wait_for("tabular to end", partial(ended, client, str(job["id"])), 120)
        assert done["state"] == "completed", done
        losses = client.get(f"/v1/jobs/{job['id']}/metrics").json()["series"]["loss"]
    assert len(losses) == 3 * 64 and losses[-1][1] < losses[0][1]


def test_the_image_example_runs_under_the_daemon(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    make_dataset(tmp_path / "data", images=64, size=32)
    daemon = serve()
    body = {
        "name": "images",
        "command": ["python", str(EXAMPLES / "image_classifier.py"), "data", "--epochs", "1"],
        "workdir": str(tmp_path),
        "batch_size": 32,
        "gpus": 1,
    }
    with daemon.client() as client:
        job = client.post("/v1/jobs", json=body).json()
        done = wait_for("images to end", partial(ended, client, job["id"]), 120)
        assert done["state"] == "completed", done
        assert client.get(f"/v1/jobs/{job['id']}/metrics").json()["series"]["loss"]
