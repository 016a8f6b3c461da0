"""A real `stoker serve` in a subprocess, on a free port, with its own state dir, and an
HTTP client for it. Factories clean up after themselves."""

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import tomli_w

T = TypeVar("T")

FAST = {
    "agent_mode": "simulate",
    # windows short, agents 20x faster than the jobs the TPM predicts, frequent heartbeats
    "heartbeat_s": 0.2,
    "scheduler": {"arrival_window_s": 0.3, "completion_window_s": 0.3, "gate": False},
    "simulated": {"time_scale": 0.05, "pause_s": 0.2, "resume_s": 0.2},
    "node": {"cpu_slots": 4, "cpu_workers": 18},
}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def wait_for(what: str, check: Callable[[], T | None], timeout_s: float = 30.0) -> T:
    """Poll `check` until it returns something truthy; fail naming `what` after the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


@dataclass
class Daemon:
    state_dir: Path
    port: int
    settings: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    tokens: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Daemon":
        config = self.state_dir.parent / f"{self.state_dir.name}.toml"
        config.write_text(tomli_w.dumps(self.settings))
        with (self.state_dir.parent / f"{self.state_dir.name}.log").open("ab") as log:
            self.process = self._spawn(config, log)
        wait_for("the daemon to answer /healthz", self._healthy, timeout_s=30)
        if not self.settings.get("tokens"):
            self.tokens = {"admin": (self.state_dir / "admin.token").read_text().strip()}
        else:
            self.tokens = dict(self.settings["tokens"])
        return self

    def _spawn(self, config: Path, log: IO[bytes]) -> "subprocess.Popen[bytes]":
        return subprocess.Popen(
            [
                sys.executable, "-m", "daemon.cli", "serve",
                "--config", str(config),
                "--state-dir", str(self.state_dir),
                "--port", str(self.port),
                "--log-level", "warning",
            ],
            stdout=log,
            stderr=log,
        )  # fmt: skip

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            log = (self.state_dir.parent / f"{self.state_dir.name}.log").read_text()
            raise AssertionError(f"the daemon exited with {self.process.returncode}:\n{log}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def client(self, tenant: str = "admin") -> httpx.Client:
        token = self.tokens[tenant]
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=10
        )

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.process is not None
        self.process.send_signal(sig)
        self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM, as an operator stops it; a daemon that does not end in 60 s is killed
        and the test fails, so that none outlives the suite unseen."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"the daemon on {self.url} ignored SIGTERM for 60 s") from None


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
