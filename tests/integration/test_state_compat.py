"""A state dir written by an older daemon (commit 467efbf, tests/fixtures/README.md) is read
by today's: every job, event, plan, sample and model comes back, and a zoo job that an
older daemon's trainer (`agents.master`) checkpointed goes on from that checkpoint."""

import shutil
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agents import checkpoints
from agents.datafiles import make_dataset
from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for
from tests.integration.master_format import write_master_checkpoint

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "state-467efbf"
NODE = {"cpu_slots": 2, "cpu_workers": 8, "max_jobs_per_gpu": 1}  # as the old daemon had it


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def stored(query: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{FIXTURE / 'stoker.db'}?mode=ro", uri=True)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


def test_todays_daemon_reads_a_state_dir_an_older_one_wrote(
    tmp_path: Path, serve: Callable[..., Daemon]
) -> None:
    shutil.copytree(FIXTURE, tmp_path / "state")
    old_jobs = {row[1]: row for row in stored("SELECT id, name, tenant, state FROM jobs")}
    assert set(old_jobs) == {"done", "failing", "running", "cancelled", "waiting"}
    ids = {name: row[0] for name, row in old_jobs.items()}
    daemon = serve(node=NODE)
    with daemon.client() as client:
        jobs = {job["name"]: job for job in client.get("/v1/jobs").json()}
        assert {name: job["id"] for name, job in jobs.items()} == ids
        assert {job["tenant"] for job in jobs.values()} == {"admin"}
        # Final states stay as they were, with what they recorded.
        assert jobs["done"]["state"] == "completed" and jobs["done"]["iteration"] == 20
        assert jobs["failing"]["state"] == "failed"
        assert jobs["cancelled"]["state"] == "cancelled"
        assert jobs["done"]["model"] == "Resnet18" and jobs["waiting"]["gpus"] == 2
        # Why each ended: the old file said it in events only; kept in words on its row.
        assert jobs["done"]["reason"] == "finished"
        assert jobs["failing"]["reason"] == "agent exited with code -9"
        assert jobs["cancelled"]["reason"] == ""  # its old daemon said nothing
        # The running job's agent died with the old daemon: relaunched, one restart counted.
        restored = client.get(f"/v1/jobs/{ids['running']}/events").json()
        (back,) = [event for event in restored if event["kind"] == "restored"][:1]
        assert back["data"] == {
            "was": "running",
            "why": "the daemon restarted while it was running",
        }
        assert client.get(f"/v1/jobs/{ids['running']}").json()["restarts"] >= 1
        waiting = client.get(f"/v1/jobs/{ids['waiting']}/events").json()
        assert any(event["kind"] == "restored" for event in waiting)
        # Every old event is still there, unchanged, before the new ones.
        for name, job_id in ids.items():
            old = stored(f"SELECT seq, kind, data FROM job_events WHERE job_id = '{job_id}'")
            now = client.get(f"/v1/jobs/{job_id}/events").json()
            assert [(e["seq"], e["kind"]) for e in now[: len(old)]] == [
                (seq, kind) for seq, kind, _ in old
            ], name
        # Plans, samples and the refit model.
        (plans,) = stored("SELECT count(*) FROM plans")[0]
        assert len(client.get("/v1/allocations/history").json()) >= plans == 4
        tpm = client.get("/v1/tpm").json()
        assert tpm["samples"] == {"training": 60, "loading": 60}
        assert tpm["source"].startswith("fitted from stored samples at")
        # And the node plans on: with the running job cancelled, both slots are free for the
        # waiting one.
        assert client.delete(f"/v1/jobs/{ids['running']}").status_code == 200
        wait_for(
            "the waiting job to leave the queue",
            lambda: client.get(f"/v1/jobs/{ids['waiting']}").json()["state"] != "submitted",
            timeout_s=60,
        )


def test_a_zoo_job_an_older_daemon_ran_goes_on_from_its_old_checkpoint_as_an_sdk_script(
    tmp_path: Path, serve: Callable[..., Daemon]
) -> None:
    # The fixture's daemon ran its zoo jobs simulated; one in process mode ran them with
    # `agents.master`, which left checkpoint.pt in the job's directory in its own format.
    # Give the running job that, at iteration 63, and start today's daemon with real
    # trainers: the relaunch is the zoo trainer on the SDK, and it goes on from iteration 63.
    shutil.copytree(FIXTURE, tmp_path / "state")
    (job_id,) = [row[0] for row in stored("SELECT id FROM jobs WHERE name = 'running'")]
    job_dir = tmp_path / "state" / "jobs" / job_id
    data = tmp_path / "data"
    make_dataset(data, images=128, size=32, classes=4)  # at least one batch of 64
    write_master_checkpoint(
        job_dir, model="Resnet18", classes=4, samples=128, batch_size=64, iteration=63
    )
    daemon = serve(
        node=NODE,
        agent_mode="process",
        training={"default_dataset": str(data), "image_size": 32},
    )
    with daemon.client() as client:
        wait_for(
            "the job to train past its old checkpoint",
            lambda: client.get(f"/v1/jobs/{job_id}").json()["iteration"] > 63,
            timeout_s=90,
        )
        log = (job_dir / "stderr.log").read_text()
        assert f"took over {job_dir / 'checkpoint.pt'}" in log
        taken = checkpoints.read(job_dir / "checkpoints" / "checkpoint-00000001.pt")
        assert taken["step"] == 63 and taken["loaders"][0]["epoch"] == 31  # 2 steps an epoch
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 200
