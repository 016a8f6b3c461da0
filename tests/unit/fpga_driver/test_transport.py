"""The decoder service's messages: what goes over the socket, and what is refused."""

import pytest

from fpga_driver.errors import DecoderError
from fpga_driver.transport import (
    Decode,
    Error,
    Register,
    Registered,
    ShareSet,
    decode_reply,
    decode_request,
    encode,
)


def test_messages_round_trip() -> None:
    register = Register(job="j", share=0.5, pid=1, blocks=4, block_bytes=1024)
    assert decode_request(encode(register)) == register
    registered = Registered(blocks=["stoker-dec-0"], share=0.25)
    assert decode_reply(encode(registered)) == registered
    assert decode_reply(encode(ShareSet(share=0.2))) == ShareSet(share=0.2)
    failed = Error(kind="failed", block=2, message="x.jpg: cannot decode")
    assert decode_reply(encode(failed)) == failed


def test_bad_messages_are_refused_naming_the_field() -> None:
    with pytest.raises(DecoderError, match="share"):
        decode_request(b'{"type": "register", "job": "j", "share": 0, "pid": 1, '
                       b'"blocks": 1, "block_bytes": 1}')  # fmt: skip
    with pytest.raises(DecoderError, match=r"bye\.surprise: Extra"):
        decode_request(b'{"type": "bye", "surprise": 1}')
    with pytest.raises(DecoderError, match="paths"):
        decode_request(encode(Decode(block=0, paths=["a"], size=8)).replace(b'["a"]', b"[]"))
    with pytest.raises(DecoderError, match="v"):
        decode_request(b'{"v": 2, "type": "bye"}')
    with pytest.raises(DecoderError, match="nonsense"):
        decode_reply(b'{"type": "nonsense"}')
    with pytest.raises(DecoderError, match="kind"):
        decode_reply(b'{"type": "error", "block": 1, "message": "m"}')
    with pytest.raises(DecoderError, match="limit"):
        decode_request(b" " * (2 << 20))
