"""The examples in examples/, each at a tiny size: alone as `python examples/X.py`, and
under a live daemon from its TOML file or as a command."""

import collections
import json
import os
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import tomli_w
import torch

from agents.datafiles import make_dataset
from tests.integration.cli import stoker
from tests.integration.daemon_harness import Daemon, daemon_factory, job_body, wait_for

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def serve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Daemon]]:
    # As users run it: from the environment whose `python` has torch and stoker.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    yield from daemon_factory(tmp_path)


def alone(workdir: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    # One thread, as the daemon gives a job its slot's share and torchrun each rank.
    return subprocess.run(
        [sys.executable, *args], cwd=workdir, capture_output=True, text=True, timeout=180,
        check=False, env={**os.environ, "OMP_NUM_THREADS": "1", **env},
    )  # fmt: skip


def ended(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in ("completed", "failed", "cancelled") else None


def test_the_tabular_example_runs_alone_and_picks_up_where_it_stopped(tmp_path: Path) -> None:
    first = alone(tmp_path, str(EXAMPLES / "tabular.py"), "--epochs", "1", "--rows", "256")
    assert first.returncode == 0, first.stderr
    assert "epoch 0" in first.stdout
    # Trained on from its final checkpoint, as asked: one more epoch.
    again = alone(
        tmp_path, str(EXAMPLES / "tabular.py"), "--epochs", "2", "--rows", "256",
        STOKER_CONTINUE_FROM="stoker-out/checkpoints",
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "epoch 0" not in again.stdout and "epoch 1" in again.stdout, "it resumed"
    assert len(list((tmp_path / "stoker-out" / "checkpoints").glob("*.pt"))) == 2
    # It says so, and which run it goes on from: another command line than its own.
    assert "stoker: resuming from stoker-out/checkpoints/checkpoint-" in again.stderr
    assert "(epoch 1, step 4, a run of this script with other arguments)" in again.stderr
    # Run again without asking (a sweep's next run), it starts afresh, not from the
    # finished run's model, and says why.
    fresh = alone(tmp_path, str(EXAMPLES / "tabular.py"), "--epochs", "2", "--rows", "256")
    assert fresh.returncode == 0 and "epoch 0" in fresh.stdout and "epoch 1" in fresh.stdout
    assert (
        "is the final checkpoint of a finished run: kept as stoker-out/checkpoints/finished/"
        in (fresh.stderr)
    )


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
    submitted = stoker("submit", "--json", *where, EXAMPLES / "tabular.toml")
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


# ---- examples/ddp.py: two ranks, real gloo ----------------------------------------------------


def torchrun(workdir: Path, *args: str) -> subprocess.Popen[str]:
    """The DDP example on two ranks as torchrun starts them, audited (agents/audit.py) and
    checkpointing often, in a session of its own as a terminal's job is; each rank's output
    in <workdir>/ranks."""
    env = {
        **os.environ,
        "STOKER_AUDIT_DIR": str(workdir / "audit"),
        "STOKER_CHECKPOINT_EVERY_S": "0.2",  # the ranks must agree on when
    }
    return subprocess.Popen(
        [
            sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
            "--monitor-interval", "0.1",  # it notices the ranks ended at once (default: 5 s)
            "--log-dir", str(workdir / "ranks"), "--redirects", "3",
            str(EXAMPLES / "ddp.py"), *args,
        ],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip


def rank_log(workdir: Path, rank: int, stream: str) -> str:
    """What torchrun kept of one rank's stdout or stderr (its last run's)."""
    found = (workdir / "ranks").glob(f"**/attempt_0/{rank}/{stream}.log")
    newest = max(found, key=lambda path: path.stat().st_mtime, default=None)
    return newest.read_text() if newest is not None else ""


def audited(audit: Path) -> dict[int, list[tuple[int, int, int]]]:
    """Each rank's audit lines as (epoch, sample, offset of its global batch); a line still
    being written is left out."""
    return {
        int(path.stem.removeprefix("rank")): [
            (int(e), int(i), int(o))
            for e, i, o in (line.split() for line in path.read_text().split("\n")[:-1])
        ]
        for path in audit.glob("rank*.txt")
    }


def exactly_once(audit: Path, epochs: int, samples: int) -> None:
    """Every sample once an epoch over all ranks, and every global batch rank 1 had a part
    of split in halves (sizes one apart at most) with rank 0."""
    ranks = audited(audit)
    counts = collections.Counter((e, i) for lines in ranks.values() for e, i, _ in lines)
    assert set(counts.values()) == {1}, "no sample twice"
    assert sorted(counts) == [(e, i) for e in range(epochs) for i in range(samples)], "no gap"
    parts = {
        rank: collections.Counter((e, o) for e, _, o in lines) for rank, lines in ranks.items()
    }
    assert parts[1], "rank 1 trained"
    for batch, size in parts[1].items():
        assert abs(parts[0][batch] - size) <= 1, (batch, parts[0][batch], size)


def wait_for_lines(audit: Path, process: subprocess.Popen[str], count: int) -> None:
    def trained() -> bool:
        assert process.poll() is None, process.communicate()[0]
        return sum(len(lines) for lines in audited(audit).values()) >= count

    wait_for("the ranks to train", trained, timeout_s=60)


def signal_rank_1(torchrun: subprocess.Popen[str]) -> None:
    """SIGTERM to rank 1 alone, as a node's OOM killer or an operator might."""
    started = psutil.Process(torchrun.pid).children()  # torchrun's: the ranks
    (rank_1,) = [rank for rank in started if rank.environ().get("RANK") == "1"]
    rank_1.send_signal(signal.SIGTERM)


def ctrl_c(torchrun: subprocess.Popen[str]) -> None:
    """SIGINT to torchrun and both ranks, as Ctrl-C in its terminal."""
    os.killpg(torchrun.pid, signal.SIGINT)


def test_the_ddp_example_stops_on_both_ranks_together_and_resumes_exactly_once(
    tmp_path: Path,
) -> None:
    # 2 epochs of 4096: each stop comes after 1024 more samples, well before the end.
    samples, audit = 4096, tmp_path / "audit"
    args = ("--epochs", "2", "--samples", str(samples))
    trained = 0
    for stop in (signal_rank_1, ctrl_c):
        run = torchrun(tmp_path, *args)
        wait_for_lines(audit, run, trained + 1024)
        stop(run)
        output, _ = run.communicate(timeout=60)
        assert run.returncode != 0, output
        for rank in (0, 1):
            stderr = rank_log(tmp_path, rank, "stderr")
            assert "Traceback" not in stderr, (stop, stderr)
        assert "stoker: stopped by signal" in rank_log(tmp_path, 0, "stderr")
        ranks = audited(audit)
        batches = [{(e, o) for e, _, o in ranks[rank]} for rank in (0, 1)]
        assert batches[0] == batches[1], ("both ranks stopped after the same step", stop)
        trained = sum(map(len, ranks.values()))
        assert trained < 2 * samples, ("it stopped mid-run", stop)

    # One rank finishes it: the checkpoint holds the bare module, so any world size fits.
    again = alone(tmp_path, str(EXAMPLES / "ddp.py"), *args, STOKER_AUDIT_DIR=str(audit))
    assert again.returncode == 0, again.stderr
    assert "rank 0 epoch 1: loss" in again.stdout
    exactly_once(audit, epochs=2, samples=samples)
    lines = (tmp_path / "stoker-out" / "metrics.jsonl").read_text().splitlines()
    steps = [json.loads(line)["step"] for line in lines]
    assert steps == list(range(1, 2 * samples // 64 + 1)), "rank 0's loss, once a step"


def test_the_ddp_example_runs_two_ranks_under_the_daemon_and_is_resized_live(
    serve: Callable[..., Daemon], tmp_path: Path
) -> None:
    # Two GPUs, as NVML would count them (the job trains on CPUs with gloo all the same),
    # and four loader processes: alone the job takes two a rank, until a second job comes.
    daemon = serve(node={"gpus": 2, "cpu_workers": 4})
    job_file = tomllib.loads((EXAMPLES / "ddp.toml").read_text())
    job_file.update(workdir=str(EXAMPLES), audit_samples=True, checkpoint_every_s=0.5)
    job_file["command"] += ["--samples", "8192"]  # time for the resize while it runs
    (tmp_path / "ddp.toml").write_text(tomli_w.dumps(job_file))
    where = ("--url", daemon.url, "--state-dir", str(daemon.state_dir))
    submitted = stoker("submit", "--json", *where, tmp_path / "ddp.toml")
    assert submitted.code == 0, submitted.stderr
    job = submitted.json()
    job_dir = daemon.state_dir / "jobs" / str(job["id"])
    with daemon.client() as client:
        wait_for("both ranks to train", lambda: len(audited(job_dir / "audit")) == 2, 60)
        alone = client.get(f"/v1/jobs/{job['id']}").json()["workers_per_gpu"]
        client.post("/v1/jobs", json=job_body("other", iterations=40))
        done = wait_for("ddp to end", partial(ended, client, str(job["id"])), 120)
        assert done["state"] == "completed", done
        events = client.get(f"/v1/jobs/{job['id']}/events").json()
        logs = [
            client.get(f"/v1/jobs/{job['id']}/logs", params={"stream": "stdout", "rank": rank}).text
            for rank in (0, 1)
        ]
    resumed = [event["data"]["workers"] for event in events if event["kind"] == "resumed"]
    assert resumed and resumed[0] < alone, ("the other job's arrival resized it", alone, events)
    moves = [e["data"]["to"] for e in events if e["kind"] == "state"]
    assert moves.count("starting") == 1, "a hot resize: the ranks stayed"
    exactly_once(job_dir / "audit", epochs=3, samples=8192)
    for rank, log in enumerate(logs):
        assert f"[rank {rank}] rank {rank} epoch 2: loss" in log, log
    (final, *_) = sorted((job_dir / "checkpoints").glob("checkpoint-*.pt"), reverse=True)
    assert torch.load(final, weights_only=True)["epoch"] == 3
