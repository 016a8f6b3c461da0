"""The sample audit of an SDK job (the job's `audit_samples`, STOKER_AUDIT_DIR): every sample
the job's loader hands to this rank's script, one line `epoch index offset` each in
`rank<k>.txt`, where `offset` is where its global batch starts in the epoch (the same on
every rank, so the lines of one step on all ranks are one global batch). The first two
columns are those the built-in trainer's audit had before it was an SDK script.

It rolls back with the job: a run that starts from a checkpoint first drops the lines of
batches after the checkpoint's position, which it trains (and writes) again, so after any
number of stops and restarts every sample of an epoch has one line, on one rank.
"""

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Audit:
    path: Path

    @classmethod
    def resume(cls, directory: Path, rank: int, epoch: int, consumed: int) -> "Audit":
        """This rank's audit, with the lines of batches at or after (`epoch`, `consumed`),
        the position the job goes on from, dropped."""
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        audit = cls(directory / f"rank{rank}.txt")
        if audit.path.exists():
            lines = audit.path.read_text().splitlines(keepends=True)
            kept = [line for line in lines if _before(line, epoch, consumed)]
            if len(kept) < len(lines):
                temporary = audit.path.with_suffix(".tmp")
                temporary.write_text("".join(kept))
                temporary.replace(audit.path)
        return audit

    def record(self, epoch: int, offset: int, indices: list[int]) -> None:
        """This rank's samples of the global batch at `offset` of `epoch`."""
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(descriptor, "a") as out:
            out.write("".join(f"{epoch} {index} {offset}\n" for index in indices))


def _before(line: str, epoch: int, consumed: int) -> bool:
    fields = line.split()
    if len(fields) != 3 or not line.endswith("\n"):
        return False  # a line cut by a crash
    return (int(fields[0]), int(fields[2])) < (epoch, consumed)
