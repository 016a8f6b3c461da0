"""A shared JPEG decoder: the protocol every device implements, and an emulator of one.

DLBooster (../shared/papers/000_9b288f077e0abe26.txt, Sec. 3-4) puts JPEG decoding and
resizing on an FPGA: the host submits one command per batch (sample metadata plus a
destination block) and drains completions asynchronously. Here one device serves several
jobs' loaders at once, each with a share of its capacity, enforced by weighted fair queuing
(start-time fair queuing on the samples served); a share change applies to the next command.

`EmulatedDevice` is an EMULATOR, and says so in `stats()`: it decodes each distinct image
once with Pillow and then serves copies at the paced rate (capacity samples/s, a fixed
latency, `units` commands in flight), so its host CPU does not grow with what it serves.
A real device (Intel OPAE or Xilinx XRT) would implement the same protocol: `submit` writes
the command to the card's task queue and the completion thread reads its completion queue.
"""

import heapq
import itertools
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
from PIL import Image, UnidentifiedImageError

from fpga_driver.errors import DecoderError

__all__ = [
    "DecodeCommand",
    "DecoderDevice",
    "DecoderError",
    "EmulatedDevice",
    "Pixels",
    "bench",
    "saturate",
    "served_per_s",
]

Pixels = np.ndarray  # uint8, (batch, size, size, 3)
_BURST_S = 0.05


@dataclass(frozen=True)
class DecodeCommand:
    """One batch: the files to decode and the square size to resize them to."""

    client: str
    paths: tuple[Path, ...]
    size: int


class DecoderDevice(Protocol):
    def register(self, client: str, share: float) -> None:
        """Let `client` submit, with `share` of the capacity when the device is busy."""

    def set_share(self, client: str, share: float) -> None:
        """Change a client's share; commands already started finish at the old one."""

    def unregister(self, client: str) -> None:
        """Drop a client and fail its queued commands."""

    def submit(self, command: DecodeCommand) -> "Future[Pixels]":
        """Queue one batch; the future holds the pixels or a DecoderError."""

    def stats(self) -> dict[str, object]:
        """What the device has served, per client, and what it is."""

    def close(self) -> None:
        """Stop serving; queued commands fail."""


@dataclass
class _Client:
    share: float
    finish_tag: float = 0.0  # virtual finish time of its last queued command
    served: int = 0  # samples
    queued: int = 0  # commands waiting


@dataclass(order=True)
class _Queued:
    start_tag: float
    sequence: int
    command: DecodeCommand = field(compare=False)
    future: "Future[Pixels]" = field(compare=False)


class EmulatedDevice:
    """An emulated decoder of `capacity` samples/s with `latency_s` per command and
    `units` commands in flight (the paper's parallel Huffman and resizing ways)."""

    emulated = True

    def __init__(self, capacity: float, latency_s: float = 0.002, units: int = 4) -> None:
        if not capacity > 0:
            raise DecoderError(f"capacity must be positive samples/s, got {capacity}")
        if units < 1:
            raise DecoderError(f"units must be at least 1, got {units}")
        self.capacity, self.latency_s, self.units = capacity, latency_s, units
        self._in_flight = threading.Semaphore(units)  # commands past decoding, in latency
        self._clients: dict[str, _Client] = {}
        self._queue: list[_Queued] = []
        self._sequence = itertools.count()
        self._virtual = 0.0  # start tag of the command in service
        self._decoded: dict[tuple[Path, int], np.ndarray] = {}
        self._cpu_s = 0.0  # host CPU the emulator spent decoding
        self._lock = threading.Condition()
        self._closed = False
        self._busy_until = time.monotonic()
        # Commands in their latency, by due time: one thread completes them all (a timer
        # thread per command would cost host CPU in proportion to what is served).
        self._due: list[tuple[float, int, Future[Pixels], Pixels]] = []
        self._due_changed = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name="decoder", daemon=True)
        self._thread.start()
        self._completer = threading.Thread(
            target=self._complete_due, name="decoder-completions", daemon=True
        )
        self._completer.start()

    # ---- the protocol --------------------------------------------------------------------

    def register(self, client: str, share: float) -> None:
        _check_share(share)
        with self._lock:
            self._clients[client] = _Client(share=share, finish_tag=self._virtual)

    def set_share(self, client: str, share: float) -> None:
        """Live: the client's queued commands are tagged again at the new share, from now."""
        _check_share(share)
        with self._lock:
            known = self._known(client)
            known.share, known.finish_tag = share, self._virtual
            mine = [q for q in self._queue if q.command.client == client]
            self._queue = [q for q in self._queue if q.command.client != client]
            for queued in sorted(mine, key=lambda q: q.sequence):
                queued.start_tag = self._tag(known, queued.command)
                self._queue.append(queued)
            heapq.heapify(self._queue)

    def unregister(self, client: str) -> None:
        with self._lock:
            self._clients.pop(client, None)
            kept = []
            for queued in self._queue:
                if queued.command.client == client:
                    queued.future.set_exception(DecoderError(f"client {client!r} left"))
                else:
                    kept.append(queued)
            self._queue = kept
            heapq.heapify(self._queue)

    def submit(self, command: DecodeCommand) -> "Future[Pixels]":
        future: Future[Pixels] = Future()
        with self._lock:
            if self._closed:
                raise DecoderError("the device is closed")
            client = self._known(command.client)
            start = self._tag(client, command)
            client.queued += 1
            heapq.heappush(self._queue, _Queued(start, next(self._sequence), command, future))
            self._lock.notify()
        return future

    def stats(self) -> dict[str, object]:
        with self._lock:
            return {
                "device": "EMULATED decoder (no hardware): Pillow decodes each image once",
                "capacity": self.capacity,
                "clients": {
                    name: {"share": c.share, "served": c.served, "queued": c.queued}
                    for name, c in self._clients.items()
                },
                "host_cpu_s": self._cpu_s,
                "distinct_images": len(self._decoded),
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            for queued in self._queue:
                queued.future.set_exception(DecoderError("the device closed"))
            self._queue.clear()
            self._lock.notify()
        with self._due_changed:
            self._due_changed.notify()
        self._completer.join(timeout=5)
        self._thread.join(timeout=5)

    # ---- the device ----------------------------------------------------------------------

    def _tag(self, client: _Client, command: DecodeCommand) -> float:
        """Start-time fair queuing: a command starts at the later of now (in virtual time)
        and the end of the client's previous one, and lasts n / share."""
        start = max(self._virtual, client.finish_tag)
        client.finish_tag = start + len(command.paths) / client.share
        return start

    def _known(self, client: str) -> _Client:
        try:
            return self._clients[client]
        except KeyError:
            raise DecoderError(f"unknown client {client!r}; register it first") from None

    def _serve(self) -> None:
        """Take commands in start-tag order and pace them at the capacity."""
        while True:
            with self._lock:
                while not self._queue and not self._closed:
                    self._lock.wait()
                if self._closed:
                    return
                queued = heapq.heappop(self._queue)
                self._virtual = queued.start_tag
                client = self._clients.get(queued.command.client)
                if client is not None:
                    client.queued -= 1
            try:
                pixels = self._decode(queued.command)
            except DecoderError as error:
                queued.future.set_exception(error)
                continue
            # The device's time: this batch occupies it for n / capacity seconds. A device
            # that fell behind its schedule by less than _BURST_S (host jitter) catches up;
            # one that stood idle longer does not bank the idle time.
            now = time.monotonic()
            self._busy_until = max(self._busy_until, now - _BURST_S) + len(pixels) / self.capacity
            time.sleep(max(0.0, self._busy_until - now))
            with self._lock:
                if client is not None:
                    client.served += len(pixels)
            self._in_flight.acquire()  # at most `units` commands in the output pipeline
            with self._due_changed:
                if self._closed:  # the completing thread has gone
                    queued.future.set_exception(DecoderError("the device closed"))
                    return
                due = time.monotonic() + self.latency_s
                heapq.heappush(self._due, (due, next(self._sequence), queued.future, pixels))
                self._due_changed.notify()

    def _complete_due(self) -> None:
        """Complete each command when its latency is over; fail the rest on close."""
        while True:
            with self._due_changed:
                while not self._closed and (not self._due or self._due[0][0] > time.monotonic()):
                    wait_s = self._due[0][0] - time.monotonic() if self._due else None
                    self._due_changed.wait(wait_s)
                if self._closed:
                    pending, self._due = self._due, []
                    for _, _, future, _ in pending:
                        future.set_exception(DecoderError("the device closed"))
                        self._in_flight.release()  # the serving thread may wait on a unit
                    return
                _, _, future, pixels = heapq.heappop(self._due)
            self._in_flight.release()
            if not future.done():
                future.set_result(pixels)

    def _decode(self, command: DecodeCommand) -> Pixels:
        images = [self._image(path, command.size) for path in command.paths]
        return np.stack(images) if images else np.zeros((0, command.size, command.size, 3))

    def _image(self, path: Path, size: int) -> np.ndarray:
        key = (path, size)
        cached = self._decoded.get(key)
        if cached is not None:
            return cached
        started = time.process_time()
        try:
            with Image.open(path) as image:
                if image.format != "JPEG":
                    raise DecoderError(f"{path}: not a JPEG ({image.format})")
                decoded = np.asarray(image.convert("RGB").resize((size, size)))
        except (OSError, UnidentifiedImageError) as error:
            raise DecoderError(f"{path}: cannot decode: {error}") from None
        self._cpu_s += time.process_time() - started
        self._decoded[key] = decoded
        return decoded


def _check_share(share: float) -> None:
    if not 0.0 < share <= 1.0:
        raise DecoderError(f"share must be in (0, 1], got {share}")


def saturate(
    device: DecoderDevice, client: str, paths: Sequence[Path], size: int, stop: threading.Event
) -> None:
    """Keep 4 batches of `client` queued until `stop` is set: a loader that never waits."""

    def again(_: "Future[Pixels] | None") -> None:
        if not stop.is_set():
            device.submit(DecodeCommand(client, tuple(paths), size)).add_done_callback(again)

    for _ in range(4):
        again(None)


def bench(
    capacity: float, shares: Sequence[float], seconds: float, paths: Sequence[Path], size: int
) -> dict[str, object]:
    """`stoker decoder bench`: one saturating client per share against a fresh emulator;
    what each was served, and the host CPU the whole process spent meanwhile (an upper
    bound on the emulator's own)."""
    device = EmulatedDevice(capacity)
    names = [f"client{index}" for index in range(len(shares))]
    for name, share in zip(names, shares, strict=True):
        device.register(name, share)
    stop = threading.Event()
    try:
        for name in names:
            saturate(device, name, paths, size, stop)
        served_per_s(device, names, seconds=min(1.0, seconds / 4))  # warm: images decoded once
        cpu_before = time.process_time()
        rates = served_per_s(device, names, seconds)
        cpu_s = time.process_time() - cpu_before
    finally:
        stop.set()
        device.close()
    total = sum(rates.values())
    return {
        "capacity": capacity,
        "seconds": seconds,
        "clients": [
            {"share": share, "served_per_s": rates[name]}
            for name, share in zip(names, shares, strict=True)
        ],
        "device_cpu_s": cpu_s,
        "cores_per_1000_samples_per_s": cpu_s / seconds / (total / 1000) if total else None,
        "device": "EMULATED decoder (no hardware)",
    }


def served_per_s(
    device: EmulatedDevice, clients: Sequence[str], seconds: float
) -> dict[str, float]:
    """Samples per second each client got over the next `seconds` (for benches and tests)."""
    before = {name: _served(device, name) for name in clients}
    time.sleep(seconds)
    return {name: (_served(device, name) - before[name]) / seconds for name in clients}


def _served(device: EmulatedDevice, client: str) -> int:
    stats = device.stats()["clients"]
    assert isinstance(stats, dict)
    return int(stats[client]["served"])
