"""The daemon with its real application masters (`agent_mode = "process"`): PyTorch jobs on
real JPEGs, paused and resized while they train, every sample counted once."""

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agents.datafiles import make_dataset
from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for
from tests.integration.test_daemon import all_done, states, submit

pytestmark = pytest.mark.timeout(240)
STEPS = 120  # the first job's, of 8 of the 40 images


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


@pytest.mark.parametrize("resize", ["hot", "cold"])
def test_real_jobs_are_resized_while_they_train(
    serve: Callable[..., Daemon], tmp_path: Path, resize: str
) -> None:
    data = tmp_path / "data"
    make_dataset(data, images=40, size=40, classes=4)
    daemon = serve(
        agent_mode="process",
        training={"default_dataset": str(data), "image_size": 32},
        node={"cpu_slots": 2, "cpu_workers": 4},
    )
    with daemon.client() as client:
        bad = client.post(
            "/v1/jobs",
            json={"name": "x", "model": "smVGG7", "batch_size": 8, "gpus": 1,
                  "iterations": 5, "dataset": str(tmp_path / "nothing")},
        )  # fmt: skip
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "dataset"
        too_big = client.post(
            "/v1/jobs",
            json={"name": "x", "model": "smVGG7", "batch_size": 64, "gpus": 1, "iterations": 5},
        )
        assert too_big.status_code == 422, "64 images a step from a dataset of 40"
        (problem,) = too_big.json()["detail"]
        assert problem["field"] == "batch_size" and "at most 40" in str(problem)
        first = submit(
            client,
            "first",
            model="smResnet20",
            batch_size=8,
            iterations=STEPS,  # 24 epochs: it still trains on past the second's arrival
            audit_samples=True,
            resize=resize,
        )
        wait_for("first to train", lambda: states(client)["first"] == "running", 60)
        alone = client.get("/v1/allocations").json()["allocations"][first["id"]]
        submit(client, "second", model="smVGG7", batch_size=8, iterations=30)
        wait_for("both to finish", lambda: all_done(client, {"first", "second"}), 200)
        events = client.get(f"/v1/jobs/{first['id']}/events").json()
        moves = [(e["data"]["from"], e["data"]["to"]) for e in events if e["kind"] == "state"]
        assert ("running", "pausing") in moves and ("resuming", "running") in moves
        history = client.get("/v1/allocations/history").json()
        # Plans made while `first` was starting or resuming (its workers already sent) are
        # for the others: a learned curve far off asks for a round at any time.
        workers = {
            plan["allocations"][first["id"]]["workers_per_gpu"]
            for plan in history
            if first["id"] in plan["allocations"]
        }
        assert alone["workers_per_gpu"] in workers and len(workers) > 1
        done = client.get(f"/v1/jobs/{first['id']}").json()
        assert done["iteration"] == STEPS and done["measured_samples_per_s"] > 0
        resumed = [e["data"] for e in events if e["kind"] == "resumed"]
        assert resumed and all(0 < r["gap_s"] < 30 for r in resumed)
        launches = sum(1 for e in events if e["kind"] == "state" and e["data"]["to"] == "starting")
        assert done["restarts"] == 0 and launches == 1  # a cold resize is no restart
    log = (daemon.state_dir / "jobs" / first["id"] / "stderr.log").read_text()
    exits = log.count("cold resize: exiting after the checkpoint")
    assert exits == (len(resumed) if resize == "cold" else 0)
    audit = Counter(
        tuple(line.split())
        for line in (daemon.state_dir / "jobs" / first["id"] / "audit" / "rank0.txt")
        .read_text()
        .splitlines()
    )
    assert set(audit.values()) == {1}  # STEPS x 8 samples = 24 epochs of 40, each once
    assert len(audit) == STEPS * 8
