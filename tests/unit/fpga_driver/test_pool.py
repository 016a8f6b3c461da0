"""The memory pool: blocks the service owns and unlinks, attached by loaders in other
processes without the resource tracker unlinking them (or warning) when a loader exits."""

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

from fpga_driver.errors import DecoderError
from fpga_driver.pool import PREFIX, AttachedBlocks, OwnedBlocks

SIDE = 8
BLOCK_BYTES = 4 * SIDE * SIDE * 3
PATTERN = (np.arange(3 * SIDE * SIDE * 3) % 251).astype(np.uint8).reshape(3, SIDE, SIDE, 3)

# A service in miniature: owns two blocks, fills block 0, prints their names, and unlinks
# them when told to (a line on stdin).
OWNER = f"""
import json, sys
import numpy as np
from fpga_driver.pool import OwnedBlocks
owned = OwnedBlocks(2, {BLOCK_BYTES})
owned.write(0, (np.arange({PATTERN.size}) % 251).astype(np.uint8).reshape({PATTERN.shape}))
print(json.dumps(owned.names), flush=True)
sys.stdin.readline()
owned.close()
"""

# A loader in miniature: attaches the blocks named in argv, writes block 1, and exits.
ATTACHER = f"""
import json, sys
import numpy as np
from fpga_driver.pool import AttachedBlocks
attached = AttachedBlocks(json.loads(sys.argv[1]))
view = attached.view(1, 1, {SIDE})
view[...] = 7
del view
attached.close()
"""


def on_disk(names: list[str]) -> set[str]:
    return set(names) & set(os.listdir("/dev/shm"))


@pytest.fixture
def owner() -> Iterator[tuple["subprocess.Popen[str]", list[str]]]:
    process = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    names = json.loads(process.stdout.readline())
    yield process, names
    if process.poll() is None:
        process.kill()
        process.communicate()


def test_a_loader_sees_the_owners_pixels_and_cycles_blocks_through_its_queues(
    owner: tuple["subprocess.Popen[str]", list[str]],
) -> None:
    process, names = owner
    attached = AttachedBlocks(names)
    block = attached.take()
    assert block == 0
    view = attached.view(block, 3, SIDE)
    assert np.array_equal(view, PATTERN)  # written by the owner, read here: shared memory
    del view
    attached.take()
    with pytest.raises(DecoderError, match="release one"):
        attached.take()
    attached.release(block)
    assert attached.take() == block
    attached.close()
    assert on_disk(names) == set(names), "attaching and closing must not unlink"
    _, errors = process.communicate("stop\n", timeout=30)
    assert process.returncode == 0 and errors == ""
    assert not on_disk(names), "the owner unlinks its blocks"


def test_a_loader_that_exits_leaves_the_blocks_and_says_nothing() -> None:
    owned = OwnedBlocks(2, BLOCK_BYTES)
    try:
        run = subprocess.run(
            [sys.executable, "-c", ATTACHER, json.dumps(owned.names)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        # Without unregistering, the loader's resource tracker would unlink our blocks at
        # its exit and warn about "leaked shared_memory objects".
        assert run.returncode == 0 and run.stderr == "", run.stderr
        assert on_disk(owned.names) == set(owned.names)
        seen = np.ndarray((1, SIDE, SIDE, 3), dtype=np.uint8, buffer=owned.blocks[1].buf)
        assert (seen == 7).all()  # the loader's write, in our mapping
        del seen
    finally:
        owned.close()
    assert not on_disk(owned.names)
    owned.close()  # twice is fine


def test_a_batch_that_does_not_fit_its_block_is_refused() -> None:
    owned = OwnedBlocks(1, BLOCK_BYTES)
    try:
        assert all(name.startswith(PREFIX) for name in owned.names)
        with pytest.raises(DecoderError, match="does not fit"):
            owned.write(0, np.zeros((5, SIDE, SIDE, 3), dtype=np.uint8))
    finally:
        owned.close()
