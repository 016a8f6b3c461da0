"""The decoder service's wire: JSON messages over ZeroMQ, pixels in shared memory.

The service binds a ROUTER (default `ipc://<state dir>/decoder.sock`, mode 0600); each
loader (a DataLoader worker, a profiler, a bench client) connects a DEALER. Commands are
small JSON messages validated by pydantic on both ends (`type` discriminates, `v` is the
protocol version, unknown fields are refused); pixels never cross the socket: the service
writes each decoded batch into a shared-memory block it created for that connection, and
`done` says which block and how many samples it holds.

client -> service
  register {job, share, pid, blocks, block_bytes}  -> registered {blocks: [names], share}
  decode   {block, paths, size}                    -> done {block, count}
                                                      | error {kind: "failed", block}
  share    {share}                                 -> share_set {share} (live, applied)
  stats    {}                                      -> stats {stats}
  bye      {}                                      (blocks unlinked; no reply)
service -> client
  error {kind: "refused", block or null, message} for a command it refuses outright.

`share_set` came without a new version: the client and the service are one stoker's
(`stoker decoder serve` beside the jobs' SDK); a client from before it would take the
answer for an unexpected reply.
"""

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from fpga_driver.errors import DecoderError

VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20  # a batch of a few thousand paths
MAX_BLOCKS = 64
MAX_BLOCK_BYTES = 256 << 20


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    v: Literal[1] = 1


class Register(_Message):
    type: Literal["register"] = "register"
    job: str = Field(min_length=1, max_length=128, description="the share is the job's")
    share: float = Field(gt=0.0, le=1.0)
    pid: int = Field(ge=1, description="the client process; its death frees its blocks")
    blocks: int = Field(ge=1, le=MAX_BLOCKS)
    block_bytes: int = Field(ge=1, le=MAX_BLOCK_BYTES)


class Decode(_Message):
    type: Literal["decode"] = "decode"
    block: int = Field(ge=0, lt=MAX_BLOCKS)
    paths: list[str] = Field(min_length=1, max_length=4096)
    size: int = Field(ge=1, le=4096, description="square side to resize to")


class Share(_Message):
    type: Literal["share"] = "share"
    share: float = Field(gt=0.0, le=1.0)


class StatsRequest(_Message):
    type: Literal["stats"] = "stats"


class Bye(_Message):
    type: Literal["bye"] = "bye"


class Registered(_Message):
    type: Literal["registered"] = "registered"
    blocks: list[str]
    share: float = Field(description="the job's share now: a job's later connections join it")


class Done(_Message):
    type: Literal["done"] = "done"
    block: int
    count: int


class Error(_Message):
    type: Literal["error"] = "error"
    kind: Literal["failed", "refused"]  # the device failed the batch | the service said no
    block: int | None = None  # the block that is free again, if the command named one
    message: str


class Stats(_Message):
    type: Literal["stats"] = "stats"
    stats: dict[str, Any]


class ShareSet(_Message):
    """The job's share is applied: a connection registered after this reply joins at it."""

    type: Literal["share_set"] = "share_set"
    share: float


Request = Annotated[Register | Decode | Share | StatsRequest | Bye, Field(discriminator="type")]
Reply = Annotated[Registered | Done | Error | Stats | ShareSet, Field(discriminator="type")]
_REQUESTS: TypeAdapter[Request] = TypeAdapter(Request)
_REPLIES: TypeAdapter[Reply] = TypeAdapter(Reply)
M = TypeVar("M")


def encode(message: _Message) -> bytes:
    return message.model_dump_json().encode()


def decode_request(data: bytes) -> Request:
    """A client's message; DecoderError names the field that is wrong."""
    return _decode(_REQUESTS, data)


def decode_reply(data: bytes) -> Reply:
    """The service's message; DecoderError names the field that is wrong."""
    return _decode(_REPLIES, data)


def _decode(adapter: TypeAdapter[M], data: bytes) -> M:
    if len(data) > MAX_MESSAGE_BYTES:
        raise DecoderError(f"message of {len(data)} bytes; the limit is {MAX_MESSAGE_BYTES}")
    try:
        return adapter.validate_json(data)
    except ValidationError as error:
        raise DecoderError(describe(error)) from None


def describe(error: ValidationError) -> str:
    """The first thing wrong with a message: `field: what is wrong`."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "message"
    return f"{where}: {first['msg']}"
