"""What the launcher tells a job through its environment (the `STOKER_*` variables and
torchrun's), read once into a frozen `JobEnvironment`; without a daemon, the standalone
defaults and the script's own settings (`stoker.init(output_dir=..., checkpoint_every_s=...)`).
docs/sdk.md lists the variables. A value that is not what its variable takes is refused
here, naming the variable.
"""

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from agents.control import Allocation
from allocator.types import DecodeMode

DEFAULT_CHECKPOINT_EVERY_S = 600.0
Say = Callable[[str], None]  # a line to the script's user (`JobEnvironment.say`)


@dataclass(frozen=True)
class JobEnvironment:
    """What the launcher tells a job through its environment, or the standalone defaults."""

    job_id: str | None  # None: no daemon
    attempt: int
    rank: int
    world_size: int
    local_rank: int
    output_dir: Path
    checkpoint_dir: Path
    workers: int | None  # loader workers per rank the scheduler gave; None: the script's own
    checkpoint_every_s: float
    control: str | None = None  # the daemon's agent endpoint; None: standalone
    gen: int = 0  # the plan that launched the job
    heartbeat_s: float = 1.0
    job_dir: Path | None = None  # where the daemon looks for the finished marker
    audit_dir: Path | None = None  # where the sample audit goes (agents/audit.py); None: none
    decode_mode: DecodeMode = "cpu"  # where the plan has the job decode its images
    decoder_share: float = 0.0  # of the node's decoder device
    decoder_endpoint: str | None = None  # the node's decoder service; None: none
    cold_resize: bool = False  # leave after a pause's checkpoint; the daemon starts it again
    paused_at: float | None = None  # a cold resize's relaunch: when the pause came (epoch s)
    # The checkpoints of the ended job this one continues (`stoker resume`): its start,
    # until it has checkpoints of its own.
    continue_from: Path | None = None

    @classmethod
    def read(
        cls,
        environ: Mapping[str, str],
        output_dir: Path | None = None,
        checkpoint_every_s: float | None = None,
    ) -> "JobEnvironment":
        output = Path(environ.get("STOKER_OUTPUT_DIR") or output_dir or "stoker-out")
        every = environ.get("STOKER_CHECKPOINT_EVERY_S")
        return cls(
            job_id=environ.get("STOKER_JOB_ID") or None,
            attempt=_integer(environ, "STOKER_ATTEMPT", 0),
            rank=_integer(environ, "RANK", 0),
            world_size=_integer(environ, "WORLD_SIZE", 1),
            local_rank=_integer(environ, "LOCAL_RANK", 0),
            output_dir=output,
            checkpoint_dir=Path(environ.get("STOKER_CHECKPOINT_DIR") or output / "checkpoints"),
            workers=_integer(environ, "STOKER_WORKERS", -1)
            if "STOKER_WORKERS" in environ
            else None,
            checkpoint_every_s=(
                float(every)
                if every
                else checkpoint_every_s
                if checkpoint_every_s is not None
                else DEFAULT_CHECKPOINT_EVERY_S
            ),
            control=environ.get("STOKER_CONTROL") or None,
            gen=_integer(environ, "STOKER_GEN", 0),
            heartbeat_s=float(environ.get("STOKER_HEARTBEAT_S") or 1.0),
            job_dir=Path(environ["STOKER_JOB_DIR"]) if environ.get("STOKER_JOB_DIR") else None,
            audit_dir=(
                Path(environ["STOKER_AUDIT_DIR"]) if environ.get("STOKER_AUDIT_DIR") else None
            ),
            decode_mode=cast(DecodeMode, _choice(environ, "STOKER_DECODE_MODE", ("cpu", "device"))),
            decoder_share=_number(environ, "STOKER_DECODER_SHARE") or 0.0,
            decoder_endpoint=environ.get("STOKER_DECODER") or None,
            cold_resize=_choice(environ, "STOKER_RESIZE", ("hot", "cold")) == "cold",
            paused_at=_number(environ, "STOKER_PAUSED_AT"),
            continue_from=(
                Path(environ["STOKER_CONTINUE_FROM"])
                if environ.get("STOKER_CONTINUE_FROM")
                else None
            ),
        )

    @property
    def allocation(self) -> Allocation:
        """What the launch gave the job."""
        return Allocation(self.workers, self.decoder_share, self.decode_mode)

    def say(self, what: str, *, afresh_hint: bool = False) -> None:
        """A line on stderr from rank 0; with `afresh_hint`, how to start afresh instead (a
        second run of a script in the same folder goes on from the first's checkpoints)."""
        if self.rank != 0:
            return
        if afresh_hint:
            what += (
                f"; to start afresh, remove {self.checkpoint_dir}"
                " or give stoker.init(output_dir=...) another folder"
            )
        print(f"stoker: {what}", file=sys.stderr, flush=True)


def _integer(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}: a whole number, got {text!r}") from None


def _number(environ: Mapping[str, str], name: str) -> float | None:
    text = environ.get(name)
    if text is None or text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{name}: a number, got {text!r}") from None


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """The variable's value, one of `choices`; the first when unset."""
    value = environ.get(name) or choices[0]
    if value not in choices:
        raise ValueError(f"{name}: one of {', '.join(choices)}, got {value!r}")
    return value
