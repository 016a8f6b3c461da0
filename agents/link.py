"""An agent's line to the daemon: a ZeroMQ DEALER whose identity is the job id. No torch.

The SDK's side of the protocol uses it (agents/control.py, in every job's rank 0), and so
does the simulated agent (agents/simulated.py), whose command line is `agent_arguments`.
A daemon that restarts binds its socket again and the DEALER reconnects by itself; a
socket monitor notices, and `reconnected()` tells the agent to say hello again, so that
the new daemon re-attaches the job.
"""

import argparse
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from agents.protocol import (
    AgentMessage,
    CancelMessage,
    DaemonMessage,
    PauseMessage,
    ResumeMessage,
    ShareMessage,
    decode_daemon,
    encode,
)
from allocator.types import DecodeMode


class DaemonLink:
    def __init__(self, job_id: str, endpoint: str) -> None:
        self.job_id = job_id
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, job_id.encode())
        self._socket.setsockopt(zmq.LINGER, 2000)  # the last `finished` gets out
        self._monitor = self._socket.get_monitor_socket(zmq.EVENT_CONNECTED)
        self._connections = 0
        self._share: float | None = None  # a live share from the daemon, not yet taken
        self._socket.connect(endpoint)

    def send(self, message: AgentMessage) -> None:
        """Send, stamped with the wall clock."""
        self._socket.send(encode(message.model_copy(update={"ts": time.time()})))

    def receive(self, timeout_s: float | None) -> DaemonMessage | None:
        """The next command, waiting up to `timeout_s` (None: for ever); None if none came."""
        timeout_ms = None if timeout_s is None else int(timeout_s * 1000)
        if not self._socket.poll(timeout_ms, zmq.POLLIN):
            return None
        return decode_daemon(self._socket.recv())

    def next_stop(self) -> PauseMessage | CancelMessage | None:
        """The first pause or cancel waiting, without blocking. A live share change is kept
        for `take_share`; a resume while running means nothing."""
        while (message := self.receive(0)) is not None:
            if isinstance(message, ShareMessage):
                self._share = message.decoder_share
            elif isinstance(message, PauseMessage | CancelMessage):
                return message
        return None

    def take_share(self) -> float | None:
        """The newest live share the daemon sent since the last call, or None. Taken once:
        a resume's share, which comes later, is not undone by an older live one."""
        share, self._share = self._share, None
        return share

    def wait_for_resume(self) -> ResumeMessage | None:
        """Block until resume (returned) or cancel (None), saying nothing meanwhile."""
        while True:
            message = self.receive(None)
            if isinstance(message, CancelMessage):
                return None
            if isinstance(message, ResumeMessage):
                return message

    def reconnected(self) -> bool:
        """Whether the link came back since the last call (not its first connection)."""
        again = False
        while self._monitor.poll(0, zmq.POLLIN):
            if recv_monitor_message(self._monitor)["event"] == zmq.EVENT_CONNECTED:
                self._connections += 1
                again = again or self._connections > 1
        return again

    def close(self) -> None:
        self._socket.disable_monitor()
        self._monitor.close()
        self._socket.close()
        self._context.term()


@dataclass(frozen=True, kw_only=True)
class AgentJob:
    """What the simulated agent is told by the launcher (`agent_arguments`); its own job
    adds its fields."""

    job_id: str
    endpoint: str  # the daemon's ROUTER, e.g. ipc:///state/agents.sock
    iterations: int
    batch_size: int  # global
    workers_per_gpu: int
    checkpoint_dir: Path
    gpus: int = 1  # ranks
    heartbeat_s: float = 1.0
    gen: int = 0
    resume_from: Path | None = None
    decode_mode: DecodeMode = "cpu"  # device: the node's decoder decodes, workers augment
    decoder_share: float = 0.0
    decoder_endpoint: str = ""  # the decoder service, for device mode

    @staticmethod
    def options(args: argparse.Namespace) -> dict[str, Any]:
        """The common fields, from arguments parsed by `agent_arguments`."""
        return {
            "job_id": args.job,
            "endpoint": args.endpoint,
            "iterations": args.iterations,
            "batch_size": args.batch_size,
            "workers_per_gpu": args.workers,
            "checkpoint_dir": args.checkpoint_dir,
            "gpus": args.gpus,
            "heartbeat_s": args.heartbeat_s,
            "gen": args.gen,
            "resume_from": args.resume_from,
            "decode_mode": args.decode_mode,
            "decoder_share": args.decoder_share,
            "decoder_endpoint": args.decoder_endpoint,
        }


def agent_arguments(description: str) -> argparse.ArgumentParser:
    """The options the simulated agent takes from the daemon's launcher
    (daemon/agentargs.py `agent_argv`); SDK jobs get theirs from the environment."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--job", required=True, help="the job id, also the DEALER identity")
    parser.add_argument("--endpoint", required=True, help="the daemon's ROUTER")
    parser.add_argument("--iterations", type=int, required=True)
    parser.add_argument("--batch-size", type=int, required=True, help="global batch")
    parser.add_argument("--gpus", type=int, default=1, help="ranks")
    parser.add_argument("--workers", type=int, required=True, help="loader workers per GPU")
    parser.add_argument("--checkpoint-dir", type=Path, required=True)
    parser.add_argument("--heartbeat-s", type=float, default=1.0)
    parser.add_argument("--gen", type=int, default=0)
    parser.add_argument("--resume-from", type=Path, default=None)
    parser.add_argument("--decode-mode", choices=("cpu", "device"), default="cpu")
    parser.add_argument("--decoder-share", type=float, default=0.0, help="of the decoder")
    parser.add_argument("--decoder-endpoint", default="", help="`stoker decoder serve`'s")
    return parser
