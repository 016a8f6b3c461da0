"""Plans never block the event loop (issue 39, item 3): while the core's policy plans 128
jobs, the daemon's REST API answers as it does when idle.

The daemon is the real ASGI app with its real service, store and writer, served by uvicorn
on a socket from a thread of the test's process; only job processes are records
(tests/unit/daemon/service_harness.py's launcher), so that 128 launches cost nothing. The
round's plan is made by the default policy, `lookahead`, on 128 jobs that each say their
work left: its slowest case (bench/bench_allocator.py)."""

import contextlib
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi import FastAPI

from daemon.api import create_app
from daemon.config import DaemonConfig, NodeConfig
from daemon.planner import PlanTiming
from daemon.service import Service
from scheduler.config import SchedulerConfig
from tests.integration.daemon_harness import job_body, wait_for
from tests.unit.daemon.service_harness import RecordedLauncher

JOBS = 128
P99_GOAL_S = 0.050
TOKEN = "planner-test-admin-token"


def _config(tmp_path: Path) -> DaemonConfig:
    # Every job waits for the arrival window, so that one round plans them all at once.
    scheduler = SchedulerConfig(arrival_window_s=3.0, start_when_free=False)
    node = NodeConfig(gpus=8, cpu_workers=256, max_jobs_per_gpu=JOBS // 8)
    return DaemonConfig(
        state_dir=tmp_path / "state",
        agent_mode="simulate",
        scheduler=scheduler,
        node=node,
        tokens={"admin": TOKEN},
    )


# A client of its own, as REST users are: it reads one job again and again until told to
# stop, then prints when each read began and ended (time.monotonic(), one clock for all
# processes of the host).
_CLIENT = """
import json, sys, time, pathlib, httpx
url, token, job, stop = sys.argv[1:5]
spans = []
with httpx.Client(base_url=url, headers={"Authorization": "Bearer " + token}) as client:
    while not pathlib.Path(stop).exists():
        began = time.monotonic()
        assert client.get("/v1/jobs/" + job).status_code == 200
        spans.append((began, time.monotonic()))
print(json.dumps(spans))
"""


@pytest.mark.serial  # it times requests: alone on the host
def test_rest_answers_fast_while_the_core_plans_128_jobs(tmp_path: Path) -> None:
    config = _config(tmp_path)
    app = create_app(config, launcher=RecordedLauncher(config.state_dir / "jobs"))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with _served(app) as url, httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        service: Service = app.state.service
        models = ("Resnet18", "smResnet20", "mdVGG11", "smVGG7")
        ids = []
        for i in range(JOBS):
            body = job_body(f"job{i}", model=models[i % 4], iterations=500 + 37 * i)
            reply = client.post("/v1/jobs", json=body)
            assert reply.status_code == 201, reply.text
            ids.append(reply.json()["id"])
        stop = tmp_path / "stop"
        reader = subprocess.Popen(
            [sys.executable, "-c", _CLIENT, url, TOKEN, ids[0], str(stop)],
            stdout=subprocess.PIPE,
            text=True,
        )
        plan = wait_for("the round's plan", lambda: _planned(service), 120)
        wait_for("the plan taken", lambda: service.scheduler.generation >= 1)
        stop.touch()
        spans: list[tuple[float, float]] = json.loads(reader.communicate(timeout=60)[0])
        states = {job["state"] for job in client.get("/v1/jobs?limit=500").json()}
    assert plan.jobs == JOBS  # one round planned every job
    assert states <= {"starting", "running"}, states  # and launched them on its plan
    during = [end - began for began, end in spans if began >= plan.asked and end <= plan.made]
    took = f"the plan took {plan.made - plan.asked:.3f} s"
    # Requests were answered while the plan was being made: on the event loop, none would be.
    assert len(during) >= 5, f"{len(during)} requests answered while planning ({took})"
    p99 = statistics.quantiles(during, n=100)[98]

    assert p99 < P99_GOAL_S, f"p99 {p99 * 1e3:.1f} ms over {len(during)} requests ({took})"


def _planned(service: Service) -> PlanTiming | None:
    return next(iter(service.planner.timings), None)


@contextlib.contextmanager
def _served(app: FastAPI) -> Iterator[str]:
    """`app` served by uvicorn on a free local port, from a thread; its URL."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, name="uvicorn")
    thread.start()
    try:
        deadline = time.monotonic() + 30.0
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(60.0)
