"""What can go wrong with the decoder, one class per case, all rooted in `DecoderError`.

Each carries what a caller needs to act on it: which batch failed, which endpoint did not
answer. The messages say what happened and what to do.
"""


class DecoderError(ValueError):
    """A command the device or the service refuses or cannot finish; the message says
    which and why."""


class BatchFailed(DecoderError):
    """The device could not decode one batch (a corrupt, missing or non-JPEG file). Only
    that batch is lost: its block is free again and the connection goes on."""

    def __init__(self, block: int, message: str) -> None:
        super().__init__(f"the decoder failed a batch: {message}; fix or drop that file")
        self.block = block


class Refused(DecoderError):
    """The service refused a command outright (malformed, from a connection that never
    registered, for a block in use, or a registration it cannot grant)."""

    def __init__(self, message: str) -> None:
        super().__init__(f"the decoder service refused a command: {message}")


class ServiceUnavailable(DecoderError):
    """No answer from the service at `endpoint` within `timeout_s`: it is not running, it
    stopped, or the endpoint is wrong."""

    def __init__(self, endpoint: str, timeout_s: float) -> None:
        super().__init__(
            f"no answer from the decoder service at {endpoint} in {timeout_s:g} s; "
            "is `stoker decoder serve` running there?"
        )
        self.endpoint, self.timeout_s = endpoint, timeout_s
