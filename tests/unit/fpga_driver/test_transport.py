"""The decoder service's messages and its shared-memory blocks, in one process."""

import os

import numpy as np
import pytest

from fpga_driver.device import DecoderError
from fpga_driver.pool import PREFIX, AttachedBlocks, OwnedBlocks
from fpga_driver.transport import Decode, Register, decode_reply, decode_request, encode


def test_messages_round_trip_and_bad_ones_name_the_field() -> None:
    register = Register(job="j", share=0.5, pid=1, blocks=4, block_bytes=1024)
    assert decode_request(encode(register)) == register
    with pytest.raises(DecoderError, match="share"):
        decode_request(b'{"type": "register", "job": "j", "share": 0, "pid": 1, '
                       b'"blocks": 1, "block_bytes": 1}')  # fmt: skip
    with pytest.raises(DecoderError, match=r"bye\.surprise: Extra"):
        decode_request(b'{"type": "bye", "surprise": 1}')
    with pytest.raises(DecoderError, match="paths"):
        decode_request(encode(Decode(block=0, paths=["a"], size=8)).replace(b'["a"]', b"[]"))
    with pytest.raises(DecoderError, match="nonsense"):
        decode_reply(b'{"type": "nonsense"}')


def test_blocks_are_shared_queued_and_unlinked_by_their_owner() -> None:
    owned = OwnedBlocks(2, 4 * 8 * 8 * 3)
    attached = AttachedBlocks(owned.names)
    assert all(name.startswith(PREFIX) for name in owned.names)
    block = attached.take()
    pixels = np.random.default_rng(0).integers(0, 255, (3, 8, 8, 3), dtype=np.uint8)
    owned.write(block, pixels)
    view = attached.view(block, 3, 8)
    assert np.array_equal(view, pixels)  # the same memory, no copy on our side
    del view
    attached.take()
    with pytest.raises(DecoderError, match="release one"):
        attached.take()
    attached.release(block)
    assert attached.take() == block
    with pytest.raises(DecoderError, match="does not fit"):
        owned.write(0, np.zeros((5, 8, 8, 3), dtype=np.uint8))
    attached.close()
    owned.close()
    assert not set(owned.names) & set(os.listdir("/dev/shm"))
    owned.close()  # twice is fine
