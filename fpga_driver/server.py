"""One decoder service per node: several jobs' loaders share one device through it.

`DecoderService.run()` serves until `stop()`: a ROUTER socket takes commands
(`fpga_driver.transport`), the device decodes them in the share of the job that sent them
(weighted fair queuing, `fpga_driver.device`), and each finished batch is written into the
sender's shared-memory block before `done` goes back. Connections of the same job (one per
DataLoader worker) share the job's share; a share change applies live to the next command.

A connection that joins a job already on the device joins at the job's current share (so a
DataLoader worker started late cannot undo a live change); `share` is what changes it.

A client that leaves (`bye`) or dies (its pid gone, or reused by another process; checked
every second) has its blocks unlinked; if it was the job's last connection the job leaves
the device and its queued commands fail. Stopping the service unlinks every block.
"""

import logging
import os
import stat
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import zmq

from fpga_driver.device import DecodeCommand, DecoderDevice, Pixels
from fpga_driver.errors import DecoderError
from fpga_driver.pool import OwnedBlocks
from fpga_driver.transport import (
    Bye,
    Decode,
    Done,
    Error,
    Register,
    Registered,
    Share,
    ShareSet,
    Stats,
    StatsRequest,
    decode_request,
    encode,
)

log = logging.getLogger(__name__)

_WAKE = "inproc://decoder-completions"
_POLL_S = 0.2  # how soon `stop()` is noticed
_LIVENESS_S = 1.0  # how often clients' pids are checked


@dataclass
class _Connection:
    job: str
    pid: int
    started: float  # the pid's creation time: a reused pid is another process
    blocks: OwnedBlocks
    busy: set[int] = field(default_factory=set)  # blocks with a command on the device


@dataclass
class _Job:
    share: float
    connections: int = 0


class DecoderService:
    """The node's decoder, served over `endpoint` to every job's loaders (one writer: every
    command and every client's departure is handled on the thread that calls `run()`)."""

    def __init__(self, device: DecoderDevice, endpoint: str) -> None:
        self.device, self.endpoint = device, endpoint
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.LINGER, 0)
        self._wake_in = self._context.socket(zmq.PULL)
        self._wake_in.bind(_WAKE)
        self._lock = threading.Lock()  # the completion callbacks' PUSH socket
        self._blocks_lock = threading.Lock()  # no block is unlinked while one is written
        self._wake_out = self._context.socket(zmq.PUSH)
        self._wake_out.connect(_WAKE)
        self._connections: dict[bytes, _Connection] = {}
        self._jobs: dict[str, _Job] = {}  # the jobs on the device
        self._stopping = threading.Event()
        self.refused = 0  # malformed or refused commands

    def bind(self) -> None:
        """Bind the ROUTER; an ipc socket is created 0600, so only this user can connect."""
        if not self.endpoint.startswith("ipc://"):
            self._router.bind(self.endpoint)
            return
        path = Path(self.endpoint.removeprefix("ipc://"))
        path.unlink(missing_ok=True)  # left by a service that was killed
        old_mask = os.umask(0o177)  # no window in which others could connect
        try:
            self._router.bind(self.endpoint)
        finally:
            os.umask(old_mask)
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)

    def stop(self) -> None:
        """Ask `run()` to return (safe from a signal handler or another thread)."""
        self._stopping.set()

    def run(self) -> None:
        """Serve until `stop()`; then unlink every block and close the sockets."""
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        poller.register(self._wake_in, zmq.POLLIN)
        log.info("serving %s on %s", self.device.stats().get("device"), self.endpoint)
        next_check = time.monotonic() + _LIVENESS_S
        try:
            while not self._stopping.is_set():
                ready = dict(poller.poll(int(_POLL_S * 1000)))
                while self._wake_in in ready and self._wake_in.poll(0):
                    identity, reply = self._wake_in.recv_multipart()
                    self._reply(identity, reply)
                if self._router in ready:
                    while self._router.poll(0):
                        identity, data = self._router.recv_multipart()
                        self._handle(identity, data)
                # Liveness costs a syscall per client: once a second, not once per command.
                if time.monotonic() >= next_check:
                    self._reap_dead()
                    next_check = time.monotonic() + _LIVENESS_S
        finally:
            for identity in list(self._connections):
                self._drop(identity, "the service stopped")
            self._router.close()
            if self.endpoint.startswith("ipc://"):  # ZeroMQ leaves the socket file behind
                Path(self.endpoint.removeprefix("ipc://")).unlink(missing_ok=True)
            self._wake_in.close()
            with self._lock:
                self._wake_out.close()
            self._context.term()

    def stats(self) -> dict[str, object]:
        """The device's counters, plus the connections and refused commands."""
        served = self.device.stats()
        served["connections"] = len(self._connections)
        served["refused"] = self.refused
        return served

    # ---- commands ------------------------------------------------------------------------

    def _handle(self, identity: bytes, data: bytes) -> None:
        try:
            message = decode_request(data)
        except DecoderError as error:
            self._refuse(identity, None, f"malformed command: {error}")
            return
        match message:
            case Register():
                self._register(identity, message)
            case Decode():
                self._decode(identity, message)
            case Share(share=share):
                self._set_share(identity, share)
            case StatsRequest():
                self._reply(identity, encode(Stats(stats=self.stats())))
            case Bye():
                self._drop(identity, "said bye")

    def _register(self, identity: bytes, message: Register) -> None:
        if identity in self._connections:
            self._drop(identity, "registered again")
        started = _started(message.pid)
        if started is None:
            why = (
                f"pid {message.pid} is no process this service can see; run the loader on "
                "this node, in the service's pid namespace"
            )
            self._refuse(identity, None, why)
            return
        try:
            blocks = OwnedBlocks(message.blocks, message.block_bytes)
        except DecoderError as error:
            self._refuse(identity, None, str(error))
            return
        job = self._jobs.get(message.job)
        if job is None:
            job = self._jobs[message.job] = _Job(share=message.share)
            self.device.register(message.job, message.share)
        job.connections += 1
        self._connections[identity] = _Connection(message.job, message.pid, started, blocks)
        log.info(
            "job %s: client pid %d registered (%d connections), share %.3f, %d blocks of %d "
            "bytes", message.job, message.pid, job.connections, job.share, message.blocks,
            message.block_bytes,
        )  # fmt: skip
        self._reply(identity, encode(Registered(blocks=blocks.names, share=job.share)))

    def _set_share(self, identity: bytes, share: float) -> None:
        known = self._connections.get(identity)
        if known is None:
            self._refuse(identity, None, "share from an unknown client; register first")
            return
        self.device.set_share(known.job, share)
        self._jobs[known.job].share = share
        log.info("job %s: decoder share %.3f, live", known.job, share)
        self._reply(identity, encode(ShareSet(share=share)))

    def _decode(self, identity: bytes, message: Decode) -> None:
        known = self._connections.get(identity)
        if known is None:
            self._refuse(identity, message.block, "decode from an unknown client; register first")
            return
        if message.block >= len(known.blocks.blocks) or message.block in known.busy:
            self._refuse(identity, message.block, f"block {message.block} is not free")
            return
        command = DecodeCommand(known.job, tuple(Path(p) for p in message.paths), message.size)
        try:
            future = self.device.submit(command)
        except DecoderError as error:
            self._refuse(identity, message.block, str(error))
            return
        known.busy.add(message.block)
        future.add_done_callback(lambda done: self._finished(identity, known, message, done))

    def _finished(
        self, identity: bytes, known: _Connection, message: Decode, future: "Future[Pixels]"
    ) -> None:
        """On the device's thread: write the pixels into the block, then wake the loop."""
        reply: bytes
        with self._blocks_lock:
            if self._connections.get(identity) is not known:
                return  # the client left meanwhile; its blocks are gone
            try:
                pixels = future.result()
                known.blocks.write(message.block, pixels)
                reply = encode(Done(block=message.block, count=len(pixels)))
            except DecoderError as error:
                log.warning("job %s: batch failed: %s", known.job, error)
                reply = encode(Error(kind="failed", block=message.block, message=str(error)))
        known.busy.discard(message.block)
        with self._lock:
            if not self._wake_out.closed:
                self._wake_out.send_multipart([identity, reply])

    # ---- clients that leave ----------------------------------------------------------------

    def _reap_dead(self) -> None:
        for identity, known in list(self._connections.items()):
            if _started(known.pid) != known.started:
                self._drop(identity, f"client pid {known.pid} is gone")

    def _drop(self, identity: bytes, why: str) -> None:
        with self._blocks_lock:
            known = self._connections.pop(identity, None)
            if known is None:
                return
            known.blocks.close()
        job = self._jobs[known.job]
        job.connections -= 1
        if not job.connections:
            del self._jobs[known.job]
            self.device.unregister(known.job)
        log.info("job %s: client pid %d dropped: %s", known.job, known.pid, why)

    def _refuse(self, identity: bytes, block: int | None, why: str) -> None:
        self.refused += 1
        log.warning("refused a command: %s", why)
        self._reply(identity, encode(Error(kind="refused", block=block, message=why)))

    def _reply(self, identity: bytes, reply: bytes) -> None:
        try:
            self._router.send_multipart([identity, reply], zmq.NOBLOCK)
        except zmq.Again:
            log.warning("a client is not reading its replies; one dropped")


def _started(pid: int) -> float | None:
    """When process `pid` started, or None if it is gone (a zombie has let go of its
    blocks)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return float(process.create_time())
    except psutil.NoSuchProcess:
        return None
