"""A loader's side of the decoder service: the reader and the dispatcher of DLBooster.

`DecoderClient` is one connection (a DataLoader worker, a profiler, a bench): it registers
the job with its share, attaches the blocks the service made for it, and keeps them in a
free and a full queue (`fpga_driver.pool`). `Reader` is the paper's host loop on top: it
submits one command per batch (the sample paths plus a free destination block) while
blocks are free, drains completions as they come, and hands full blocks to the training
process in batch order as views of the shared memory (no copy); the consumer releases each
block back to the free queue. `DecoderClient.decode` is the one-batch convenience a
DataLoader worker uses: it returns a copy, so the block is free again at once.

A client is one thread's: its ZeroMQ socket and queues are not shared between threads.
"""

import collections
import contextlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import numpy as np
import zmq
from pydantic import ValidationError

from fpga_driver.errors import BatchFailed, DecoderError, Refused, ServiceUnavailable
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
    ShareSet,
    Stats,
    StatsRequest,
    decode_reply,
    describe,
    encode,
)

DEFAULT_TIMEOUT_S = 30.0
Answer = TypeVar("Answer", Stats, ShareSet)  # the replies a request waits for


class DecoderClient:
    """One connection to the node's decoder service, for `job` at `share`, with `blocks`
    destination blocks of `max_batch` samples of `size` x `size` RGB each.

    Joining a job that already has connections joins it at the job's current share (the
    `share` attribute says which); `set_share` changes it for every connection of the job.
    """

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
        self.max_batch, self.block_bytes = max_batch, max_batch * size * size * 3
        with _valid(f"cannot register job {job!r}"):
            register = Register(
                job=job, share=share, pid=os.getpid(), blocks=blocks, block_bytes=self.block_bytes
            )
        self._failed: dict[int, Error] = {}  # blocks whose command failed, not yet collected
        self._abandoned: set[int] = set()  # blocks given up on; freed when they complete
        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.LINGER, 500)  # `bye` gets out on close
        self._socket.connect(endpoint)
        self._send(register)
        reply = self._receive(timeout_s)
        if not isinstance(reply, Registered):
            self._close_socket()
            if reply is None:
                raise ServiceUnavailable(endpoint, timeout_s)
            if isinstance(reply, Error):
                raise Refused(f"job {job!r} cannot register: {reply.message}")
            raise DecoderError(f"unexpected reply to register: {reply.type}")
        self.share = reply.share
        self.blocks = AttachedBlocks(reply.blocks)

    # ---- commands --------------------------------------------------------------------------

    def submit(self, paths: Sequence[Path | str], size: int | None = None) -> int:
        """Queue one batch on the device into a free block; the block's index. DecoderError
        at once if no block is free or the batch does not fit one."""
        side = size or self.size
        if not paths or len(paths) * side * side * 3 > self.block_bytes:
            raise DecoderError(
                f"a batch of {len(paths)} samples of {side} px; this client's blocks hold 1 "
                f"to {self.max_batch} of {self.size} px (connect with a larger max_batch)"
            )
        with _valid("cannot decode this batch"):
            command = Decode(block=self.blocks.take(), paths=[str(p) for p in paths], size=side)
        self._send(command)
        return command.block

    def drain(self, timeout_s: float | None = None) -> int:
        """Move completions that arrived into the full queue (failures aside for
        `collect`), waiting up to `timeout_s` for the first; how many came."""
        reply = self._receive(self.timeout_s if timeout_s is None else timeout_s)
        came = 0
        while reply is not None:
            self._complete(reply)
            came += 1
            reply = self._receive(0.0)
        return came

    def collect(self, block: int, timeout_s: float | None = None) -> int:
        """Wait for the command on `block` to complete; its sample count (the block is
        then the caller's to view and release). BatchFailed or Refused if the device failed
        or the service refused it (the block is free again); ServiceUnavailable if no
        answer comes within `timeout_s` (the block is freed if it ever completes)."""
        wait_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + wait_s
        while block not in self.blocks.full and block not in self._failed:
            left = deadline - time.monotonic()
            if left <= 0:
                self.abandon(block)
                raise ServiceUnavailable(self.endpoint, wait_s)
            self.drain(left)
        failure = self._failed.pop(block, None)
        if failure is not None:
            self.blocks.release(block)
            if failure.kind == "failed":
                raise BatchFailed(block, failure.message)
            raise Refused(failure.message)
        return self.blocks.full.pop(block)

    def abandon(self, block: int) -> None:
        """Stop waiting for the command on `block`: its block is freed now if the command
        ended, or when it ends."""
        if block in self.blocks.full or block in self._failed:
            self.blocks.full.pop(block, 0)
            self._failed.pop(block, None)
            self.blocks.release(block)
        else:
            self._abandoned.add(block)

    def view(self, block: int, count: int, size: int | None = None) -> np.ndarray:
        """The pixels of a collected block: a view of the shared memory, valid until the
        block is released."""
        return self.blocks.view(block, count, size or self.size)

    def release(self, block: int) -> None:
        """Block `block` is consumed; it takes the next command."""
        self.blocks.release(block)

    def decode(self, paths: Sequence[Path | str], size: int | None = None) -> np.ndarray:
        """Decode one batch: a COPY of its pixels, (n, size, size, 3) uint8, so the block is
        free again on return (a DataLoader pickles the batch to the trainer anyway)."""
        block = self.submit(paths, size)
        count = self.collect(block)
        try:
            return self.view(block, count, size).copy()
        finally:
            self.release(block)

    def set_share(self, share: float) -> None:
        """The job's new share, for all its connections; the device applies it to the job's
        queued and next commands, live. Returns once the service has applied it, so a
        connection the job opens after this call joins at the new share (another socket's
        register could otherwise overtake an unanswered change)."""
        with _valid(f"cannot set job {self.job!r}'s share"):
            message = Share(share=share)
        self._send(message)
        self._await(ShareSet, lambda applied: applied.share == share)
        self.share = share

    def stats(self) -> dict[str, object]:
        """The service's counters (what it served per job, and that it is an emulator)."""
        self._send(StatsRequest())
        return self._await(Stats).stats

    def close(self) -> None:
        """Say bye (the service unlinks this client's blocks) and disconnect; safe twice."""
        if self._socket.closed:
            return
        self._send(Bye())
        self._close_socket()
        self.blocks.close()

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
            case Done(block=block, count=count) if block in self._abandoned:
                self._abandoned.discard(block)
                self.blocks.release(block)
            case Done(block=block, count=count):
                self.blocks.full[block] = count
            case Error(block=None, message=message):
                raise Refused(message)
            case Error(block=int(block)) if block in self._abandoned:
                self._abandoned.discard(block)
                self.blocks.release(block)
            case Error(block=int(block)):
                self._failed[block] = reply
            case Stats() | ShareSet():
                pass  # the late answer to a request whose wait timed out
            case _:
                raise DecoderError(f"unexpected reply: {reply.type}")

    def _await(
        self, kind: type[Answer], matches: Callable[[Answer], bool] = lambda _: True
    ) -> Answer:
        """The service's answer of `kind` to the request just sent; completions that arrive
        first are taken as they come, and so is the late answer to an earlier request that
        timed out."""
        deadline = time.monotonic() + self.timeout_s
        while (left := deadline - time.monotonic()) > 0:
            reply = self._receive(left)
            if isinstance(reply, kind) and matches(reply):
                return reply
            if reply is not None:
                self._complete(reply)
        raise ServiceUnavailable(self.endpoint, self.timeout_s)

    def _send(self, message: Register | Decode | Share | StatsRequest | Bye) -> None:
        self._socket.send(encode(message))

    def _receive(self, timeout_s: float) -> Reply | None:
        if not self._socket.poll(int(timeout_s * 1000), zmq.POLLIN):
            return None
        return decode_reply(self._socket.recv())

    def _close_socket(self) -> None:
        self._socket.close()
        self._context.term()


@contextlib.contextmanager
def _valid(what: str) -> Iterator[None]:
    """Turn a message this client would send but the service would refuse into a
    DecoderError that names the field."""
    try:
        yield
    except ValidationError as error:
        raise DecoderError(f"{what}: {describe(error)}") from None


class Batch:
    """A full block handed to the training process: `pixels` is a view of the shared
    memory, valid until `release()` (or the end of a `with` block); `index` is the batch's
    place in the reader's input."""

    def __init__(self, client: DecoderClient, block: int, count: int, index: int) -> None:
        self.client, self.block, self.index = client, block, index
        self.pixels = client.view(block, count)

    def release(self) -> None:
        """Give the block back to the free queue; safe twice."""
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
    """Every batch of `batches` through the device, one command per batch, up to `depth`
    in flight, handed out in input order as `Batch` views (no copy).

    The consumer releases each batch; it may hold at most blocks - depth of them while
    iterating, or the reader has no free block and raises DecoderError. A failed batch
    raises BatchFailed at its turn. Leaving the loop early (break, error) waits for the
    commands still in flight and frees their blocks, so the client can read on."""

    def __init__(
        self, client: DecoderClient, batches: Iterable[Sequence[Path | str]], depth: int = 2
    ) -> None:
        if not 1 <= depth <= len(client.blocks.blocks):
            raise DecoderError(f"depth must be 1 to {len(client.blocks.blocks)} (the blocks)")
        self.client, self.depth = client, depth
        self._batches = iter(batches)
        self._exhausted = False

    def __iter__(self) -> Iterator[Batch]:
        in_flight: collections.deque[int] = collections.deque()  # blocks, in input order
        try:
            for index in itertools.count():
                self._fill(in_flight)
                if not in_flight:
                    return
                block = in_flight.popleft()
                count = self.client.collect(block)
                yield Batch(self.client, block, count, index)
        except ServiceUnavailable:
            for block in in_flight:  # no second wait for a service that does not answer
                self.client.abandon(block)
            in_flight.clear()
            raise
        finally:
            self._settle(in_flight)

    def _fill(self, in_flight: collections.deque[int]) -> None:
        """Submit batches while fewer than `depth` are in flight and a block is free."""
        while not self._exhausted and len(in_flight) < self.depth:
            if not self.client.blocks.free:
                if in_flight:
                    return  # the head completes, the consumer releases it, one comes free
                held = len(self.client.blocks.blocks)
                raise DecoderError(
                    f"all {held} blocks are held by batches not yet released; release each "
                    "batch after using it (or connect with more blocks)"
                )
            paths = next(self._batches, None)
            if paths is None:
                self._exhausted = True
                return
            in_flight.append(self.client.submit(paths))

    def _settle(self, in_flight: collections.deque[int]) -> None:
        """Wait for the commands still on the device and free their blocks."""
        for block in in_flight:
            try:
                self.client.collect(block)
                self.client.release(block)
            except ServiceUnavailable:
                return  # the rest will not come either; their blocks free if they do
            except DecoderError:
                continue  # that batch failed; its block is free already
