"""What operators and researchers watch on a live daemon: metrics, the event stream, the
model's status and refits, and a clean stop."""

import json
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from daemon.processes import alive
from tests.integration.daemon_harness import Daemon, daemon_factory, wait_for
from tests.integration.test_daemon import agent_pids, states, submit
from tpm.synthetic import LoadingTruth, loading_csv, training_csv

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    yield from daemon_factory(tmp_path)


def test_metrics_show_jobs_counters_and_latency(serve: Callable[..., Daemon]) -> None:
    daemon = serve()
    with daemon.client() as client:
        job = submit(client, "watched", iterations=2000)
        wait_for("it to run", lambda: states(client)["watched"] == "running")

        def measured() -> str | None:
            body = client.get("/metrics").text
            return body if "stoker_job_measured_samples_per_second{" in body else None

        text = wait_for("a measured rate in /metrics", measured)
        assert f'stoker_job_workers_per_gpu{{job="{job["id"]}",tenant="admin"}}' in text
        assert "stoker_plans_total 1.0" in text
        assert 'stoker_jobs{state="running",tenant="admin"} 1.0' in text  # to alert on
        assert 'stoker_rest_request_seconds_count{method="POST",route="/v1/jobs"' in text
        assert "stoker_pause_gap_seconds_bucket" in text
        assert httpx.get(f"{daemon.url}/metrics").status_code == 401
        # Every metric the Grafana dashboard in docs/ queries is one the daemon exposes.
        exposed = {
            line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"
        }
        board = json.loads((REPO / "docs" / "grafana" / "stoker-dashboard.json").read_text())
        queried = {
            name
            for panel in board["panels"]
            for target in panel["targets"]
            for name in re.findall(r"\bstoker_[a-z_]+", target["expr"])
        }
        assert len(queried) >= 10 and queried <= exposed, queried - exposed
        client.delete(f"/v1/jobs/{job['id']}")
        wait_for("the cancel", lambda: states(client)["watched"] == "cancelled")
        after = client.get("/metrics").text
    assert 'stoker_jobs_ended_total{state="cancelled",tenant="admin"} 1.0' in after, after
    assert 'stoker_jobs{state="running"' not in after


def test_the_event_stream_delivers_states_as_they_happen(serve: Callable[..., Daemon]) -> None:
    daemon = serve()
    with daemon.client() as client:
        seen: list[dict[str, Any]] = []
        with client.stream("GET", "/v1/events/stream") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            submit(client, "streamed", iterations=30)
            for line in stream.iter_lines():
                if line.startswith("data:"):
                    seen.append(json.loads(line.removeprefix("data:")))
                if seen and seen[-1]["kind"] == "state" and seen[-1]["data"]["to"] == "completed":
                    break
        kinds = [event["kind"] for event in seen]
        assert kinds[0] == "submitted" and "plan" in kinds
        sequence = [int(event["seq"]) for event in seen]
        assert sequence == sorted(sequence)


def test_samples_refit_and_a_new_model_survives_a_restart(serve: Callable[..., Daemon]) -> None:
    daemon = serve(tokens={"admin": "root", "alice": "a"})
    with daemon.client() as admin, daemon.client("alice") as alice:
        before = admin.get("/v1/tpm").json()
        assert before["samples"] == {"training": 0, "loading": 0}
        assert alice.post("/v1/tpm/fit").status_code == 403
        early = admin.post("/v1/tpm/fit")
        assert early.status_code == 422 and "training and loading" in early.text
        bad = admin.post("/v1/tpm/samples", json={"kind": "training", "csv": "batch_size\n1\n"})
        assert bad.status_code == 422 and "flops" in bad.text
        for kind, text in (("training", training_csv(200, 1)), ("loading", loading_csv(200, 2))):
            added = admin.post("/v1/tpm/samples", json={"kind": kind, "csv": text})
            assert added.status_code == 201 and added.json()["added"] == 200
        # No loading samples of the pipeline jobs use: refused whole, the old model stays.
        refused = admin.post("/v1/tpm/fit")
        assert refused.status_code == 422 and "imagenet" in refused.text
        assert admin.get("/v1/tpm").json()["source"] == "given at start"
        submit(alice, "planned", iterations=10)  # still planned with the old model
        imagenet = LoadingTruth(sample_cost_s=(("imagenet", 0.0085),))
        added = admin.post(
            "/v1/tpm/samples", json={"kind": "loading", "csv": loading_csv(100, 3, imagenet)}
        )
        assert added.status_code == 201
        fitted = admin.post("/v1/tpm/fit")
        assert fitted.status_code == 200, fitted.text
        assert fitted.json()["report"]["training"]["chosen"]
        good = admin.get("/v1/tpm").json()
        assert "fitted" in good["source"] and good["refused"] is None
        # Step times that no model explains drown the good ones: the refit's held-out R^2
        # falls below scheduler.min_refit_r2, so it is refused and reported with its figure.
        noise = training_csv(800, 9, noise=3.0)
        assert admin.post("/v1/tpm/samples", json={"kind": "training", "csv": noise}).is_success
        untrusted = admin.post("/v1/tpm/fit")
        assert untrusted.status_code == 422 and "min_refit_r2 = 0.5" in untrusted.text
        after = admin.get("/v1/tpm").json()
        assert after["source"] == good["source"], "the good model stays in use"
        assert (
            after["refused"]["training_r2"] < 0.5 and "held-out R^2" in after["refused"]["reason"]
        )
        shown = admin.get("/v1/dashboard").json()["tpm"]["refused"]
        assert shown["training_r2"] == after["refused"]["training_r2"]
    daemon.stop()
    again = serve(state=daemon.state_dir.name, tokens={"admin": "root", "alice": "a"})
    with again.client() as admin:
        status = admin.get("/v1/tpm").json()
        assert status["source"] == good["source"], "the model taken, not the one refused"
        assert status["samples"]["training"] == 1000


def test_heartbeats_of_busy_jobs_become_training_samples(serve: Callable[..., Daemon]) -> None:
    # Resnet18 with 6 workers is GPU-bound at the predicted rates: no waiting for batches.
    daemon = serve(tpm_sample_every_s=0.5)
    with daemon.client() as client:
        submit(client, "busy", iterations=3000)
        wait_for(
            "telemetry samples",
            lambda: client.get("/v1/tpm").json()["samples"]["training"] >= 2,
            timeout_s=60,
        )


def test_sigterm_checkpoints_stops_agents_and_keeps_the_jobs(
    serve: Callable[..., Daemon],
) -> None:
    daemon = serve(log_level="info")
    with daemon.client() as client:
        job = submit(client, "long", iterations=100_000, max_restarts=0)
        wait_for("it to run", lambda: states(client)["long"] == "running")
        wait_for("some progress", lambda: client.get(f"/v1/jobs/{job['id']}").json()["iteration"])
    pids = agent_pids(daemon)
    daemon.kill(signal.SIGTERM)
    # uvicorn drains, then re-raises the signal so supervisors see why it ended
    assert daemon.process is not None and daemon.process.returncode == -signal.SIGTERM
    assert not any(alive(pid) for pid in pids.values()), "no agent outlives a clean stop"
    assert not (daemon.state_dir / "agents.sock").exists(), "the shutdown ran to its end"
    checkpoint = daemon.state_dir / "jobs" / job["id"] / "checkpoint.json"
    stopped_at = json.loads(checkpoint.read_text())["iteration"]
    assert stopped_at > 0, "the agents paused and checkpointed on the way out"
    said = f"job {job['id']}: paused for the stop at step {stopped_at}, checkpoint kept"
    assert said in daemon.log_path.read_text(), "the operator's log names each job"
    again = serve(state=daemon.state_dir.name)
    with again.client() as client:
        wait_for("it to run again", lambda: states(client)["long"] == "running")
        back = client.get(f"/v1/jobs/{job['id']}").json()
        assert back["restarts"] == 0, "a clean stop is no crash (max_restarts = 0 here)"
        assert back["iteration"] >= stopped_at, "it went on from its checkpoint"
        client.delete(f"/v1/jobs/{job['id']}")
        wait_for("the cancel", lambda: states(client)["long"] == "cancelled")
