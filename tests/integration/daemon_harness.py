"""Daemons for the integration tests: fast settings, job bodies, and a factory that stops
every daemon it started. The daemon process itself is bench/daemon_driver.py."""

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.daemon_driver import Daemon, free_port, wait_for

__all__ = ["FAST", "Daemon", "daemon_factory", "free_port", "job_body", "wait_for"]

FAST = {
    "agent_mode": "simulate",
    # windows short, agents 20x faster than the jobs the TPM predicts, frequent heartbeats
    "heartbeat_s": 0.2,
    "scheduler": {
        "arrival_window_s": 0.3,
        "completion_window_s": 0.3,
        "gate": False,
        "restart_backoff_s": 0.2,
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

    def make(state: str = "state", **settings: Any) -> Daemon:
        merged = {**FAST, **settings}
        daemon = Daemon(tmp_path / state, free_port(), merged)
        started.append(daemon)
        return daemon.start()

    yield make
    for daemon in started:
        daemon.stop()
