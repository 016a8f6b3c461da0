"""A job's checkpoints on disk: written atomically (a temporary file, fsync, rename), named
by a sequence number, the newest `KEEP` kept.

What a checkpoint holds is the SDK's business (`agents/checkpointformat.py`); this module
only stores and finds them. Loading uses `torch.load(weights_only=True)`: tensors, numbers,
strings, lists and dicts, nothing that could run code.
"""

import errno
import os
from pathlib import Path
from typing import Any

import torch

from agents.protocol import CHECKPOINT_NAME as _NAME

KEEP = 2


def checkpoint_files(directory: Path) -> list[Path]:
    """The checkpoints in `directory`, oldest first."""
    if not directory.is_dir():
        return []
    found = [path for path in directory.iterdir() if _NAME.match(path.name)]
    return sorted(found, key=lambda path: path.name)


def latest(directory: Path) -> Path | None:
    files = checkpoint_files(directory)
    return files[-1] if files else None


def made_inside(directory: Path) -> None:
    """Make `directory` and its parent, the job's folder, but never the folders above: a
    daemon whose state dir was moved away would find it made again, holding only what its
    jobs wrote on their way out, and refuse to start (issue 37)."""
    try:
        for folder in (directory.parent, directory):
            folder.mkdir(mode=0o700, exist_ok=True)
    except FileNotFoundError:
        raise FileNotFoundError(
            errno.ENOENT,
            "the job's folder is gone (its daemon's state dir was moved or deleted);"
            " nothing is written",
            str(directory.parent),
        ) from None


def write(directory: Path, state: dict[str, Any]) -> Path:
    """Write `state` as the next checkpoint (mode 0600) and drop all but the newest `KEEP`;
    its path."""
    made_inside(directory)
    newest = latest(directory)
    number = int(_NAME.match(newest.name).group(1)) + 1 if newest is not None else 1  # type: ignore[union-attr]
    path = directory / f"checkpoint-{number:08d}.pt"
    temporary = directory / f".{path.name}.tmp"
    # The model and optimizer are the job owner's alone (0600), whatever the umask.
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a leftover temporary keeps its mode through O_CREAT
    with os.fdopen(descriptor, "wb") as handle:
        torch.save(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    temporary.replace(path)
    _fsync_directory(directory)  # the rename itself survives a crash
    for old in checkpoint_files(directory)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def read(path: Path) -> dict[str, Any]:
    state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
