"""A loader's side of the decoder service: the reader and the dispatcher of DLBooster.

`DecoderClient` is one connection (a DataLoader worker, a profiler, a bench): it registers
the job with its share, attaches the blocks the service made for it, and keeps them in a
free and a full queue (`fpga_driver.pool`). `Reader` is the paper's host loop on top: it
submits one command per batch (the sample paths plus a free destination block) while
blocks are free, drains completions as they come, and hands full blocks to the training
process in batch order as views of the shared memory (no copy); the consumer releases each
block back to the free queue. `DecoderClient.decode` is the one-batch convenience a
DataLoader worker uses: it returns a copy, so the block is free again at once.
"""

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

import numpy as np
import zmq

from fpga_driver.device import DecoderError
from fpga_driver.pool import AttachedBlocks
from fpga_driver.transport import (
    Bye,
    Decode,
    Done,
    Error,
    Register,
    Registered,
    Reply,
    Share,
    Stats,
    StatsRequest,
    decode_reply,
    encode,
)

DEFAULT_TIMEOUT_S = 30.0


class DecoderClient:
    """One connection to the node's decoder service, for `job` at `share`."""

    def __init__(
        self,
        endpoint: str,
        job: str,
        share: float,
        *,
        max_batch: int,
        size: int,
        blocks: int = 4,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.endpoint, self.job, self.size, self.timeout_s = endpoint, job, size, timeout_s
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 500)  # `bye` gets out on close
        self._socket.connect(endpoint)
        block_bytes = max_batch * size * size * 3
        self._send(
            Register(job=job, share=share, pid=os.getpid(), blocks=blocks, block_bytes=block_bytes)
        )
        reply = self._receive(timeout_s)
        if reply is None:
            self._close_socket()
            raise DecoderError(self._silent(timeout_s))
        if isinstance(reply, Error):
            self._close_socket()
            raise DecoderError(f"the decoder service refused job {job!r}: {reply.message}")
        if not isinstance(reply, Registered):
            self._close_socket()
            raise DecoderError(f"unexpected reply to register: {reply.type}")
        self.blocks = AttachedBlocks(reply.blocks)
        self.max_batch = max_batch

    # ---- commands --------------------------------------------------------------------------

    def submit(self, paths: Sequence[Path | str], size: int | None = None) -> int:
        """Queue one batch on the device into a free block; the block's index."""
        if not 1 <= len(paths) <= self.max_batch:
            raise DecoderError(f"a batch of {len(paths)} samples; this client takes 1 to "
                               f"{self.max_batch}")  # fmt: skip
        block = self.blocks.take()
        self._send(Decode(block=block, paths=[str(p) for p in paths], size=size or self.size))
        return block

    def drain(self, timeout_s: float | None = None) -> int:
        """Move completions into the full queue, waiting up to `timeout_s` for the first;
        how many came. DecoderError for a command the device failed (its block is free
        again)."""
        reply = self._receive(self.timeout_s if timeout_s is None else timeout_s)
        came = 0
        while reply is not None:
            self._complete(reply)
            came += 1
            reply = self._receive(0.0)
        return came

    def view(self, block: int, count: int, size: int | None = None) -> np.ndarray:
        """The pixels of a full block: a view of the shared memory, valid until released."""
        return self.blocks.view(block, count, size or self.size)

    def release(self, block: int) -> None:
        self.blocks.release(block)

    def decode(self, paths: Sequence[Path | str], size: int | None = None) -> np.ndarray:
        """Decode one batch and return a copy of its pixels, (n, size, size, 3) uint8."""
        block = self.submit(paths, size)
        deadline = time.monotonic() + self.timeout_s
        while not any(full == block for full, _ in self.blocks.full):
            left = deadline - time.monotonic()
            if left <= 0:
                raise DecoderError(self._silent(self.timeout_s))
            self.drain(left)
        count = next(c for full, c in self.blocks.full if full == block)
        self.blocks.full.remove((block, count))
        pixels = self.view(block, count, size).copy()
        self.release(block)
        return pixels

    def set_share(self, share: float) -> None:
        """The job's new share; the device applies it to the next command, live."""
        self._send(Share(share=share))

    def stats(self) -> dict[str, object]:
        """The service's counters (what it served per job, and that it is an emulator)."""
        self._send(StatsRequest())
        deadline = time.monotonic() + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            reply = self._receive(left)
            if isinstance(reply, Stats):
                return reply.stats
            if reply is not None:
                self._complete(reply)
        raise DecoderError(self._silent(self.timeout_s))

    def close(self) -> None:
        """Say bye (the service unlinks this client's blocks) and disconnect."""
        if self._socket.closed:
            return
        self.blocks.close()
        self._send(Bye())
        self._close_socket()

    def __enter__(self) -> "DecoderClient":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # ---- the socket ------------------------------------------------------------------------

    def _complete(self, reply: Reply) -> None:
        match reply:
            case Done(block=block, count=count):
                self.blocks.full.append((block, count))
            case Error(block=block, message=message):
                if block is not None:
                    self.blocks.release(block)
                raise DecoderError(message)
            case _:
                raise DecoderError(f"unexpected reply: {reply.type}")

    def _send(self, message: Register | Decode | Share | StatsRequest | Bye) -> None:
        self._socket.send(encode(message))

    def _receive(self, timeout_s: float) -> Reply | None:
        if not self._socket.poll(int(timeout_s * 1000), zmq.POLLIN):
            return None
        return decode_reply(self._socket.recv())

    def _silent(self, timeout_s: float) -> str:
        return (
            f"no answer from the decoder service at {self.endpoint} in {timeout_s:g} s; "
            "is `stoker decoder serve` running there?"
        )

    def _close_socket(self) -> None:
        self._socket.close()
        self._context.term()


class Batch:
    """A full block handed to the training process: `pixels` is a view, valid until
    `release()` (or the end of a `with` block)."""

    def __init__(self, client: DecoderClient, block: int, count: int, index: int) -> None:
        self.client, self.block, self.index = client, block, index
        self.pixels = client.view(block, count)

    def release(self) -> None:
        if self.block >= 0:
            self.client.release(self.block)
            self.block = -1

    def __enter__(self) -> "Batch":
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()


class Reader:
    """Every batch of `batches` through the device, `depth` commands in flight at most,
    handed out in order. Each batch must be released before more than `depth` are held."""

    def __init__(
        self, client: DecoderClient, batches: Iterable[Sequence[Path | str]], depth: int = 2
    ) -> None:
        if not 1 <= depth <= len(client.blocks.blocks):
            raise DecoderError(f"depth must be 1 to {len(client.blocks.blocks)} (the blocks)")
        self.client, self.depth = client, depth
        self._batches = iter(batches)

    def __iter__(self) -> Iterator[Batch]:
        in_flight: list[int] = []  # blocks, in batch order
        index = 0
        exhausted = False
        while True:
            while not exhausted and len(in_flight) < self.depth and self.client.blocks.free:
                paths = next(self._batches, None)
                if paths is None:
                    exhausted = True
                    break
                in_flight.append(self.client.submit(paths))
            if not in_flight:
                return
            head = in_flight[0]
            counts = dict(self.client.blocks.full)
            if head not in counts:
                if not self.client.drain(self.client.timeout_s):
                    raise DecoderError(self.client._silent(self.client.timeout_s))
                continue
            self.client.blocks.full.remove((head, counts[head]))
            in_flight.pop(0)
            yield Batch(self.client, head, counts[head], index)
            index += 1
