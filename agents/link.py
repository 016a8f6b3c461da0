"""An agent's line to the daemon: a ZeroMQ DEALER whose identity is the job id and a nonce
of this link's own (`job@nonce`, agents/protocol.py's `connection_identity`). No torch.

The SDK's side of the protocol uses it (agents/control.py, in every job's rank 0), and so
does the simulated agent (agents/simulated.py), whose command line is `agent_arguments`.

A thread of the link's own holds the socket, so the training loop never makes a ZeroMQ
call or a system call to learn that nothing is waiting: at a batch boundary that is one
look at a queue (on a VM, a ZeroMQ poll right after a 10 ms step cost 60 us, more than
half of the SDK's 1 % budget; docs/results.md). The caller's messages go to the thread
through a queue and a wake-up pipe; the daemon's come back through another queue.
A daemon that restarts binds its socket again and the DEALER reconnects by itself; a
socket monitor notices, and `reconnected()` tells the agent to say hello again, so that
the new daemon re-attaches the job.

Liveness is the thread's own: given `alive_every_s`, it says `alive` (with the script's
`phase`) whenever that long passed with nothing else sent, so a script that spends minutes
in its setup, an evaluation or a save is still heard, whatever its training thread does.
"""

import argparse
import atexit
import contextlib
import os
import queue
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from agents.agentmessages import AliveMessage
from agents.daemonmessages import CancelMessage, PauseMessage, ResumeMessage, ShareMessage
from agents.protocol import (
    SECRET_VARIABLE,
    AgentMessage,
    DaemonMessage,
    ProtocolError,
    connection_identity,
    daemon_version,
    decode_daemon,
    encode,
)
from allocator.types import DecodeMode

_LINGER_MS = 2000  # the last `finished` gets out
_WAIT_SLICE_S = 0.5  # a blocking wait looks for a reconnection this often
ALIVE_VERSION = 10  # the protocol version that brought `alive`
# A new phase is said at once, but not more often than this: a script that changes phase
# every step must not flood the daemon; the newest is said with the next `alive`.
PHASE_SAID_EVERY_S = 0.2

Build = Callable[[], Iterable[AgentMessage]]


class LinkFailed(RuntimeError):
    """The link's thread stopped on an error: the job cannot hear its daemon any more."""


class DaemonLink:
    def __init__(
        self, job_id: str, endpoint: str, alive_every_s: float | None = None, phase: str = "setup"
    ) -> None:
        """`alive_every_s`: say `alive` whenever that long passed with nothing sent (None:
        never, or to a daemon older than the message)."""
        self.job_id = job_id
        self._endpoint = endpoint
        # What proves to the daemon that this process is the job's launch (never logged).
        self._secret = os.environ.get(SECRET_VARIABLE, "")
        # Every message speaks the version the daemon that launched it reads.
        self._version = daemon_version(os.environ)
        if self._version < ALIVE_VERSION:
            alive_every_s = None
        self._alive_every_s = alive_every_s
        self._phase = phase  # what `alive` says the script is doing
        self.iteration = 0  # the steps it has completed, as `alive` says (set at each step)
        self._phase_said_at = 0.0  # monotonic
        self._phase_unsaid = False  # a change held back by PHASE_SAID_EVERY_S
        self._outbox: queue.SimpleQueue[tuple[float, AgentMessage | Build] | None] = (
            queue.SimpleQueue()
        )
        self._inbox: queue.SimpleQueue[DaemonMessage] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(self._wake_write, False)
        # Set by the thread after it hands something in (a message, a reconnection), cleared
        # here before looking: the one thing a batch boundary reads when nothing came.
        self.attention = False
        self._again = False  # set by the thread when the link came back; read and cleared here
        self._failure: BaseException | None = None
        self._share: float | None = None  # a live share from the daemon, not yet taken
        self._closed = False
        self._thread = threading.Thread(
            target=self._serve, name=f"stoker-link-{job_id}", daemon=True
        )
        self._thread.start()
        atexit.register(self.close)  # what is queued gets out when the script ends early

    # ---- the caller's side --------------------------------------------------------------

    @property
    def version(self) -> int:
        """The protocol version this link speaks: the daemon's, at most this SDK's."""
        return self._version

    @property
    def phase(self) -> str:
        return self._phase

    def set_phase(self, phase: str) -> None:
        """The script is now in `phase`: said at once (a dashboard shows it), and in every
        `alive` from then on."""
        if phase == self._phase:
            return
        self._phase = phase
        if self._alive_every_s is None or self._closed or self._failure is not None:
            return
        now = time.monotonic()
        if now - self._phase_said_at < PHASE_SAID_EVERY_S:
            self._phase_unsaid = True  # the link's thread says it with its next `alive`
            return
        self._phase_said_at, self._phase_unsaid = now, False
        self.send(AliveMessage(job=self.job_id, phase=phase, iteration=self.iteration))

    def send(self, message: AgentMessage) -> None:
        """Send, stamped with the wall clock (the thread sends it)."""
        self._post((time.time(), message))

    def send_built(self, build: Build) -> None:
        """Send the messages `build()` makes, built on the link's thread, so that building
        them (pydantic, JSON) costs the training loop nothing."""
        self._post((time.time(), build))

    def receive(self, timeout_s: float | None) -> DaemonMessage | None:
        """The next command, waiting up to `timeout_s` (None: for ever); None if none came."""
        self._check()
        try:
            return self._inbox.get(timeout=timeout_s)
        except queue.Empty:
            self._check()
            return None

    def next_stop(self) -> PauseMessage | CancelMessage | None:
        """The first pause or cancel waiting, without blocking. A live share change is kept
        for `take_share`; a resume while running means nothing."""
        self.attention = False  # before looking: what comes later raises it again
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

    def wait_for_resume(
        self, on_reconnect: Callable[[], None] | None = None
    ) -> ResumeMessage | None:
        """Block until resume (returned) or cancel (None). A daemon that restarts meanwhile
        gets `on_reconnect()` (a hello, so that it knows the job is paused). A live share
        that comes meanwhile is older than the resume's own, and is dropped."""
        while True:
            if self.reconnected() and on_reconnect is not None:
                on_reconnect()
            message = self.receive(_WAIT_SLICE_S)
            if isinstance(message, CancelMessage):
                return None
            if isinstance(message, ResumeMessage):
                return message

    def reconnected(self) -> bool:
        """Whether the link came back since the last call (not its first connection)."""
        again, self._again = self._again, False
        return again

    def close(self) -> None:
        """Send what is queued (up to the linger time), then stop the thread."""
        if self._closed:
            return
        self._closed = True
        atexit.unregister(self.close)
        self._outbox.put(None)
        self._wake()
        self._thread.join()
        os.close(self._wake_read)
        os.close(self._wake_write)

    def _post(self, item: tuple[float, AgentMessage | Build]) -> None:
        if self._closed:
            raise LinkFailed(f"job {self.job_id}: the link to the daemon is closed")
        self._check()
        self._outbox.put(item)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full of wake-ups: the thread is awake
            os.write(self._wake_write, b"\0")

    def _check(self) -> None:
        if self._failure is not None:
            raise LinkFailed(f"job {self.job_id}: the link to the daemon failed") from self._failure

    # ---- the link's thread --------------------------------------------------------------

    def _serve(self) -> None:
        """Own the socket: send what the caller posts, hand in what the daemon sends, and
        watch for reconnections, until `close`."""
        context = zmq.Context()
        socket = context.socket(zmq.DEALER)
        socket.setsockopt(zmq.IDENTITY, connection_identity(self.job_id))
        socket.setsockopt(zmq.LINGER, _LINGER_MS)
        monitor = socket.get_monitor_socket(zmq.EVENT_CONNECTED)
        socket.connect(self._endpoint)
        poller = zmq.Poller()
        poller.register(socket, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        poller.register(self._wake_read, zmq.POLLIN)
        connections = 0
        every = self._alive_every_s
        timeout_ms = None if every is None else max(1, round(every * 1000))
        sent_at = time.monotonic()
        try:
            while True:
                ready = dict(poller.poll(timeout_ms))
                if socket in ready:
                    self._hand_in(socket)
                if monitor in ready:
                    connections = self._watch(monitor, connections)
                if self._wake_read in ready:
                    if not self._send_posted(socket):
                        return
                    sent_at = time.monotonic()
                if every is not None and self._alive_due(sent_at, every):
                    sent_at = self._say_alive(socket)
        except BaseException as error:  # told to the caller at its next call
            self._failure = error
            traceback.print_exc(file=sys.stderr)
        finally:
            socket.disable_monitor()
            monitor.close()
            socket.close()
            context.term()

    def _watch(self, monitor: zmq.Socket[Any], connections: int) -> int:
        """Count the connections the socket monitor reports; a second one and later are the
        link coming back (a restarted daemon), which the caller learns from `reconnected`."""
        while monitor.poll(0, zmq.POLLIN):
            if recv_monitor_message(monitor)["event"] == zmq.EVENT_CONNECTED:
                connections += 1
                if connections > 1:
                    self._again = self.attention = True
        return connections

    def _say_alive(self, socket: zmq.Socket[Any]) -> float:
        """Send `alive` with the script's phase and steps; when it went (monotonic)."""
        phase, iteration = self._phase, self.iteration
        alive = AliveMessage(job=self.job_id, phase=phase, iteration=iteration)
        self._send_stamped(socket, alive)
        sent_at = self._phase_said_at = time.monotonic()
        self._phase_unsaid = False
        return sent_at

    def _alive_due(self, sent_at: float, every: float) -> bool:
        """Whether to say `alive` now: nothing went out for `every`, or a new phase was held
        back and may go now."""
        now = time.monotonic()
        held = self._phase_unsaid and now - self._phase_said_at >= PHASE_SAID_EVERY_S
        return now - sent_at >= every or held

    def _hand_in(self, socket: zmq.Socket[Any]) -> None:
        while True:
            try:
                frame = socket.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                self._inbox.put(decode_daemon(frame))
                self.attention = True
            except ProtocolError as error:  # a daemon of another version: skip, never crash
                print(f"stoker: a message from the daemon was refused: {error}", file=sys.stderr)

    def _send_posted(self, socket: zmq.Socket[Any]) -> bool:
        """Send everything posted; False once `close` asked to stop."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 4096):
                pass
        while True:
            try:
                item = self._outbox.get_nowait()
            except queue.Empty:
                return True
            if item is None:
                return False
            stamp, what = item
            try:
                messages = list(what()) if callable(what) else [what]
            except Exception:  # a bug in what builds them: those messages are lost, not the link
                traceback.print_exc(file=sys.stderr)
                continue
            for message in messages:
                self._send_stamped(socket, message, stamp)

    def _send_stamped(
        self, socket: zmq.Socket[Any], message: AgentMessage, stamp: float | None = None
    ) -> None:
        stamped: dict[str, object] = {"ts": stamp or time.time(), "v": self._version}
        if self._secret:
            stamped["secret"] = self._secret
        socket.send(encode(message.model_copy(update=stamped)))


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
    parser.add_argument(
        "--job", required=True, help="the job id (with a nonce, the DEALER identity)"
    )
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
