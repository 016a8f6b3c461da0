"""A real `stoker serve` in a subprocess, on a free port, with its own state dir and config
file, and an HTTP client for it: for the benchmarks and the integration tests alike."""

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx
import tomli_w

T = TypeVar("T")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS picks it)."""
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
    """One `stoker serve` process: `settings` become its config file (next to `state_dir`,
    as is its log); `start` waits for /healthz and reads the tokens, `stop` ends it."""

    state_dir: Path
    port: int
    settings: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None
    tokens: dict[str, str] = field(default_factory=dict)
    log_level: str = "warning"  # `stoker serve --log-level`; "info" logs every request

    @property
    def log_path(self) -> Path:
        """Where its stdout and stderr go."""
        return self.state_dir.parent / f"{self.state_dir.name}.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Daemon":
        config = self.state_dir.parent / f"{self.state_dir.name}.toml"
        config.write_text(tomli_w.dumps(self.settings))
        with self.log_path.open("ab") as log:
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
                sys.executable, "-m", "cli", "serve",
                "--config", str(config),
                "--state-dir", str(self.state_dir),
                "--port", str(self.port),
                "--log-level", self.log_level,
            ],
            stdout=log,
            stderr=log,
            # A daemon stopped with SIGABRT writes every thread's stack to its log first.
            env={**os.environ, "PYTHONFAULTHANDLER": "1"},
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
            # Where it hangs, for the failure to say: its threads' stacks, then the kill.
            self.process.send_signal(signal.SIGABRT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            tail = "\n".join(self.log_path.read_text(errors="replace").splitlines()[-80:])
            raise AssertionError(
                f"the daemon on {self.url} ignored SIGTERM for 60 s; its log ends:\n{tail}"
            ) from None
