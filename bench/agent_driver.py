"""The daemon's end of the agent protocol, by hand: a ROUTER socket that drives one job's
application master (the zoo trainer on the SDK), for tests and benchmarks of it alone."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypeVar

import zmq

from agents.protocol import AgentMessage, decode_agent, encode

M = TypeVar("M")


class Router:
    """The daemon's end, by hand: one ROUTER, one job."""

    def __init__(self, path: Path) -> None:
        self.started: list[subprocess.Popen[bytes]] = []
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.endpoint = f"ipc://{path}"
        self.socket.bind(self.endpoint)
        self.identities: dict[str, bytes] = {}  # job -> its agent's identity, as last heard

    def expect(self, kind: type[M], timeout_s: float = 60.0) -> M:
        """The next message of `kind`, skipping heartbeats and hellos unless asked for."""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            message = self.next(min(left, 0.2))
            if isinstance(message, kind):
                return message
        raise AssertionError(f"no {kind.__name__} within {timeout_s} s")

    def next(self, timeout_s: float) -> AgentMessage | None:
        """The next message from any job, None if none came within `timeout_s`; its
        sender's identity is kept as the job's (an agent connects as `job@nonce`)."""
        if not self.socket.poll(int(timeout_s * 1000), zmq.POLLIN):
            return None
        identity, data = self.socket.recv_multipart()
        message = decode_agent(data)
        self.identities[message.job] = identity
        return message

    def send(self, job: str, message: Any) -> None:
        """To the job's agent, on the connection it last spoke from."""
        self.socket.send_multipart([self.identities[job], encode(message)])

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
    decoder_endpoint: str = "",
    cold_resize: bool = False,
    **options: str,
) -> "subprocess.Popen[bytes]":
    """The zoo trainer (`python -m agents.zoo`, an SDK script) as job "job" on `router`: one
    process per rank with the environment the daemon gives a command job, job directory
    `out` (checkpoints in out/checkpoints, so a second start goes on from the newest),
    auditing to out/audit, each rank's output in out.log (out.rank<k>.log); `options` are
    the trainer's (image_size="64" gives --image-size 64). Rank 0's process, which leads
    the ranks' process group."""
    argv = [
        sys.executable, "-m", "agents.zoo",
        "--model", model, "--dataset", str(dataset),
        "--batch-size", str(batch_size), "--iterations", str(iterations),
        "--audit", str(out / "audit"),
    ]  # fmt: skip
    for option, value in options.items():
        argv += [f"--{option.replace('_', '-')}", value]
    own = {name: value for name, value in os.environ.items() if not name.startswith("STOKER_")}
    common = {
        **own,
        "STOKER_JOB_ID": "job",
        "STOKER_CONTROL": router.endpoint,
        "STOKER_WORKERS": str(workers),
        "STOKER_HEARTBEAT_S": repr(heartbeat_s),
        "STOKER_JOB_DIR": str(out),
        "STOKER_OUTPUT_DIR": str(out / "output"),
        "STOKER_CHECKPOINT_DIR": str(out / "checkpoints"),
        "STOKER_DECODER": decoder_endpoint,
        "STOKER_RESIZE": "cold" if cold_resize else "hot",
        "WORLD_SIZE": str(gpus),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "OMP_NUM_THREADS": "1",
        # A rank killed by SIGABRT (a test's diagnosis of a hang) writes every thread's
        # stack into its log first.
        "PYTHONFAULTHANDLER": "1",
    }
    ranks: list[subprocess.Popen[bytes]] = []
    for rank in range(gpus):
        suffix = f".rank{rank}" if rank else ""
        with (out.parent / f"{out.name}{suffix}.log").open("ab") as log:
            process = subprocess.Popen(
                argv,
                stdout=log,
                stderr=log,
                env={**common, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                # one group for all ranks, led by rank 0 (a rank can join a group only in
                # its own session, so no new session)
                process_group=ranks[0].pid if ranks else 0,
            )
        ranks.append(process)
        router.started.append(process)  # the caller stops it, even if a later rank fails
    return ranks[0]


def where_ranks_hang(router: Router, out: Path) -> str:
    """Every started rank's stacks (SIGABRT, which the faulthandler answers with them) and
    the tail of each rank's log: what a test that timed out waiting for a job shows."""
    for process in router.started:
        if process.poll() is None:
            process.send_signal(signal.SIGABRT)
    time.sleep(2.0)
    tails = []
    for log in sorted(out.parent.glob(f"{out.name}*.log")):
        text = log.read_text(errors="replace")
        tails.append(f"--- {log.name} (last 6,000 characters)\n{text[-6000:]}")
    return "\n".join(tails)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
