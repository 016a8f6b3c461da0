"""The daemon's end of the agent protocol, by hand: a ROUTER socket that drives one
application master, for tests and benchmarks of the master alone."""

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import zmq

from agents.protocol import decode_agent, encode


class Router:
    """The daemon's end, by hand: one ROUTER, one job."""

    def __init__(self, path: Path) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # as the daemon's AgentLink
        self.endpoint = f"ipc://{path}"
        self.socket.bind(self.endpoint)

    def expect(self, kind: type, timeout_s: float = 60.0) -> Any:
        """The next message of `kind`, skipping heartbeats and hellos unless asked for."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.socket.poll(200, zmq.POLLIN):
                _, data = self.socket.recv_multipart()
                message = decode_agent(data)
                if isinstance(message, kind):
                    return message
        raise AssertionError(f"no {kind.__name__} within {timeout_s} s")

    def send(self, job: str, message: Any) -> None:
        self.socket.send_multipart([job.encode(), encode(message)])

    def close(self) -> None:
        self.socket.close()
        self.context.term()


def start_master(
    router: Router,
    dataset: Path,
    out: Path,
    *,
    batch_size: int,
    gpus: int,
    iterations: int,
    model: str = "smResnet20",
    workers: int = 1,
    heartbeat_s: float = 0.2,
    **more: str,
) -> "subprocess.Popen[bytes]":
    """`python -m agents.master` for job "job" on `router`, auditing, logging next to `out`;
    `more` adds options (resume_from="..." gives --resume-from ...)."""
    argv = [
        sys.executable, "-m", "agents.master",
        "--job", "job", "--endpoint", router.endpoint,
        "--model", model, "--dataset", str(dataset),
        "--batch-size", str(batch_size), "--gpus", str(gpus), "--iterations", str(iterations),
        "--workers", str(workers), "--checkpoint-dir", str(out),
        "--heartbeat-s", str(heartbeat_s), "--audit",
    ]  # fmt: skip
    for flag, value in more.items():
        argv += [f"--{flag.replace('_', '-')}", value]
    with (out.parent / f"{out.name}.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    router.started.append(process)
    return process
