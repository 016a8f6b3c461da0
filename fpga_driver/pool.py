"""DLBooster's memory pool: shared-memory blocks, one batch each, cycling between a free
queue and a full queue.

The decoder service owns every block (`OwnedBlocks`): it creates them when a client
registers and unlinks them when the client says bye, dies, or the service stops, so a
client that crashes leaks nothing. The client attaches to them by name (`AttachedBlocks`)
and keeps the two queues: a block leaves `free` with a command, comes back into `full` with
its completion, and returns to `free` when the training process has consumed it.
"""

import collections
import contextlib
import secrets
from collections.abc import Sequence
from multiprocessing import resource_tracker, shared_memory

import numpy as np

from fpga_driver.errors import DecoderError

PREFIX = "stoker-dec-"  # /dev/shm/stoker-dec-*: easy to audit for leaks


class OwnedBlocks:
    """The service's side: `count` blocks of `block_bytes`, unlinked by `close()`."""

    def __init__(self, count: int, block_bytes: int) -> None:
        self.blocks: list[shared_memory.SharedMemory] = []
        try:
            for _ in range(count):
                name = PREFIX + secrets.token_hex(8)
                self.blocks.append(
                    shared_memory.SharedMemory(name=name, create=True, size=block_bytes)
                )
        except OSError as error:
            self.close()
            message = f"cannot create {count} blocks of {block_bytes} bytes: {error}"
            raise DecoderError(message) from None

    @property
    def names(self) -> list[str]:
        return [block.name for block in self.blocks]

    def write(self, index: int, pixels: np.ndarray) -> None:
        """Copy a decoded batch into block `index` (the device's DMA into host memory)."""
        block = self.blocks[index]
        if pixels.nbytes > block.size:
            raise DecoderError(
                f"a batch of {pixels.nbytes} bytes does not fit a block of {block.size}; "
                "register with a larger block_bytes"
            )
        target = np.ndarray(pixels.shape, dtype=np.uint8, buffer=block.buf)
        target[...] = pixels

    def close(self) -> None:
        """Unmap and unlink every block; safe to call twice."""
        for block in self.blocks:
            block.close()
            with contextlib.suppress(FileNotFoundError):  # unlinked already
                block.unlink()
        self.blocks = []


class AttachedBlocks:
    """The client's side: the blocks by name, with the free and full queues."""

    def __init__(self, names: Sequence[str]) -> None:
        self.blocks = [_attach(name) for name in names]
        self.free: collections.deque[int] = collections.deque(range(len(self.blocks)))
        # Completed blocks -> their sample count, in completion order. A dict, not a FIFO:
        # the dispatcher hands batches out in submission order, whatever order they finish.
        self.full: dict[int, int] = {}

    def take(self) -> int:
        """A free block for the next command; DecoderError when every block is in use."""
        if not self.free:
            raise DecoderError(
                f"all {len(self.blocks)} blocks are in flight or unconsumed; release one first"
            )
        return self.free.popleft()

    def view(self, index: int, count: int, size: int) -> np.ndarray:
        """Batch `index` as (count, size, size, 3) uint8, a view of the shared memory: valid
        until the block is released."""
        return np.ndarray((count, size, size, 3), dtype=np.uint8, buffer=self.blocks[index].buf)

    def release(self, index: int) -> None:
        """Block `index` is consumed: back to the free queue for the next command."""
        self.free.append(index)

    def close(self) -> None:
        """Unmap every block (the service unlinks them). DecoderError if a view of one is
        still alive: release every batch before closing."""
        try:
            for block in self.blocks:
                block.close()
        except BufferError:
            raise DecoderError(
                "a batch's pixels are still referenced; release every batch (and drop its "
                "views) before closing the client"
            ) from None
        self.blocks = []


def _attach(name: str) -> shared_memory.SharedMemory:
    block = shared_memory.SharedMemory(name=name)
    # Python 3.11 registers attached segments with the resource tracker, which would unlink
    # them (and warn) when this process exits; the service owns them, not us.
    resource_tracker.unregister(block._name, "shared_memory")  # type: ignore[attr-defined]
    return block
