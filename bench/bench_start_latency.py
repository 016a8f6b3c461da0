"""How soon a job submitted to an idle node runs (issue 36: within 2 s), under a daemon of
the default scheduler settings (its 30-s arrival window included), and what a rank's log
sink costs (daemon/logsink.py: its start and its memory).

    python -m bench.bench_start_latency [--jobs 5]

Prints one JSON object and saves it to bench/out/start_latency.json: for simulated agents
and for a real command job (a Python that imports the SDK), the seconds from the submit's
reply to `running`, each job submitted once the one before has ended; and the sink's start
in ms and resident memory in KiB.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import psutil

from bench.daemon_driver import Daemon, free_port, wait_for
from daemon.sinks import SINK

OUT = Path(__file__).resolve().parent / "out" / "start_latency.json"
SDK_JOB = "import stoker, time\njob = stoker.init()\ntime.sleep(3)\n"


def to_running(state_dir: Path, body: dict[str, Any], jobs: int) -> list[float]:
    """Seconds from each submit's reply to `running`, on an otherwise idle daemon."""
    daemon = Daemon(state_dir, free_port(), {"agent_mode": "simulate"}).start()
    seconds = []
    try:
        with daemon.client() as client:
            for number in range(jobs):
                job_id = client.post("/v1/jobs", json={**body, "name": f"j{number}"}).json()["id"]
                asked = time.monotonic()
                wait_for("it to run", partial(_is, client, job_id, "running"), timeout_s=120)
                seconds.append(round(time.monotonic() - asked, 3))
                client.delete(f"/v1/jobs/{job_id}")
                wait_for("its exit", partial(_is, client, job_id, "exited"))
    finally:
        daemon.stop()
    return seconds


def _is(client: Any, job_id: str, what: str) -> bool:
    job = client.get(f"/v1/jobs/{job_id}").json()
    return bool(job["state"] == "running" if what == "running" else not job["exiting"])


def sink_cost() -> dict[str, float]:
    """A log sink's start (to its fork) and its resident memory once at work."""
    with tempfile.TemporaryDirectory() as folder:
        logs = [os.open(Path(folder) / f"{n}.log", os.O_WRONLY | os.O_CREAT, 0o600) for n in "oeb"]
        (out_read, out_write), (err_read, err_write) = os.pipe(), os.pipe()
        given = (out_read, err_read, *logs)
        started = time.monotonic()
        starter = subprocess.Popen(
            [sys.executable, "-S", "-E", str(SINK), *map(str, given)],
            pass_fds=given,
            start_new_session=True,
        )
        starter.wait(timeout=10)
        start_ms = (time.monotonic() - started) * 1000
        time.sleep(0.3)
        sinks = [
            p for p in psutil.process_iter(["cmdline"]) if str(SINK) in (p.info["cmdline"] or [])
        ]
        rss_kib = max(p.memory_info().rss for p in sinks) / 1024
        for descriptor in (*given, out_write, err_write):
            os.close(descriptor)
    return {"start_ms": round(start_ms, 1), "rss_kib": round(rss_kib)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=5)
    args = parser.parse_args()
    zoo = {"model": "Resnet18", "batch_size": 64, "gpus": 1, "iterations": 100_000}
    command = {"command": [sys.executable, "-c", SDK_JOB], "batch_size": 64, "gpus": 1}
    result: dict[str, Any] = {}
    for name, body in (("simulated", zoo), ("command", command)):
        with tempfile.TemporaryDirectory() as folder:
            seconds = to_running(Path(folder) / "state", body, args.jobs)
        result[name] = {
            "seconds": seconds,
            "median_s": statistics.median(seconds),
            "max_s": max(seconds),
        }
    result["log_sink"] = sink_cost()
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
