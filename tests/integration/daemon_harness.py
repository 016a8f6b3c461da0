"""Daemons for the integration tests: fast settings, job bodies, and a factory that stops
every daemon it started. The daemon process itself is bench/daemon_driver.py."""

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.daemon_driver import Daemon, free_port, wait_for
from workloads.live import FINAL

__all__ = [
    "FAST", "Daemon", "daemon_factory", "ended", "free_port", "job_body", "stored_pid", "wait_for",
]  # fmt: skip

FAST = {
    "agent_mode": "simulate",
    # windows short, agents 20x faster than the jobs the TPM predicts, frequent heartbeats
    "heartbeat_s": 0.2,
    "scheduler": {
        "arrival_window_s": 0.3,
        "completion_window_s": 0.3,
        "gate": False,
        "restart_backoff_s": 0.2,
        "heartbeat_timeout_s": 10.0,  # the silence limit these scenarios were written around
    },
    "simulated": {"time_scale": 0.05, "pause_s": 0.2, "resume_s": 0.2},
    "node": {"cpu_slots": 4, "cpu_workers": 18},
}


def job_body(name: str, **fields: Any) -> dict[str, Any]:
    """A one-slot ResNet-18 job unless told otherwise."""
    return {
        "name": name,
        "model": "Resnet18",
        "batch_size": 64,
        "gpus": 1,
        "iterations": 300,
        **fields,
    }


def daemon_factory(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    """Yield a function that starts daemons; every one is stopped at the end."""
    started: list[Daemon] = []

    def make(state: str = "state", log_level: str = "warning", **settings: Any) -> Daemon:
        merged = {**FAST, **settings}
        daemon = Daemon(tmp_path / state, free_port(), merged, log_level=log_level)
        started.append(daemon)
        return daemon.start()

    yield make
    for daemon in started:
        daemon.stop()


def ended(client: httpx.Client, job_id: str) -> dict[str, Any] | None:
    """The job, once it is in a final state; None before."""
    job: dict[str, Any] = client.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in FINAL else None


def stored_pid(state_dir: Path, job_id: str) -> int | None:
    """The agent pid the daemon of `state_dir` recorded for the job, read from its state file."""
    db = sqlite3.connect(state_dir / "stoker.db")
    try:
        (pid,) = db.execute("SELECT pid FROM jobs WHERE id = ?", (job_id,)).fetchone()
    finally:
        db.close()
    return None if pid is None else int(pid)
