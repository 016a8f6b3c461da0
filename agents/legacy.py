"""Checkpoints of the zoo trainer before it was a script on the SDK (`agents.master`, up to
commit 9f261b5), taken over by agents/zoo.py so that a job an older daemon started goes on
from where it was.

That trainer wrote `<job dir>/checkpoint.pt`: `model` and `optimiser` state dicts, `epoch`
and `cursor` (samples of the epoch consumed by all ranks), `iteration`, `rng` (`torch`,
`numpy` as NumPy's legacy state tuple, `python`) and `audit_offsets` (each rank's audit
length). On the job's first start as a script, when the SDK has no checkpoint of it yet,
rank 0 writes that state as the SDK's first checkpoint (the model and optimiser under the
names agents/zoo.py tracks, epoch and cursor as the loader's position, the iteration as
the step); the other ranks wait for that checkpoint. The old file stays, unread from then
on. Its audit (`epoch index` lines) is cut to the lengths it recorded and written as the
SDK's (agents/audit.py: `epoch index offset`, each global batch's offset found again from
the epoch's order, which a resize never changed).

It is read with `torch.load(weights_only=True)`, NumPy's array and dtype types allowed:
nothing that could run code.
"""

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch

from agents import checkpoints
from agents.checkpointformat import FORMAT
from agents.data import EpochOrder
from agents.environment import JobEnvironment
from agents.loader import Position

log = logging.getLogger(__name__)

FILE = "checkpoint.pt"  # in the job directory, where the old trainer kept it
# What NumPy's legacy RNG state pickles as: arrays rebuilt by NumPy's own function (whatever
# module it lives in, in this NumPy), of a uint32 dtype.
_NUMPY_TYPES: list[Callable[..., Any] | tuple[Callable[..., Any], str]] = [
    cast("Callable[..., Any]", np.ndarray(0).__reduce__()[0]),
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
]


def take_over(
    environment: JobEnvironment, *, seed: int, batch_size: int, samples: int, wait_s: float = 600.0
) -> bool:
    """Make the old trainer's checkpoint the SDK's first, if there is one and the SDK has
    none (rank 0 writes it, the other ranks wait for it); whether there was one. `seed`,
    the global `batch_size` and the dataset's `samples` are the job's."""
    if environment.job_dir is None or not (environment.job_dir / FILE).is_file():
        return False
    if checkpoints.latest(environment.checkpoint_dir) is not None:
        return False
    if environment.rank != 0:
        deadline = time.monotonic() + wait_s
        while checkpoints.latest(environment.checkpoint_dir) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank 0 did not take over {environment.job_dir / FILE}")
            time.sleep(0.1)
        return True
    state = read(environment.job_dir / FILE)
    if environment.audit_dir is not None:
        lengths, order = state["audit_offsets"], EpochOrder(samples, seed=seed)
        for rank, length in enumerate(lengths):
            audit = environment.audit_dir / f"rank{rank}.txt"
            if audit.exists():  # as long as at the checkpoint, in the SDK's lines
                text = audit.read_bytes()[:length].decode()
                audit.write_text(audit_lines(text, order, rank, batch_size, len(lengths)))
    path = checkpoints.write(environment.checkpoint_dir, as_sdk(state, seed=seed))
    log.info("job %s: took over %s as %s", environment.job_id, environment.job_dir / FILE, path)
    return True


def read(path: Path) -> dict[str, Any]:
    with torch.serialization.safe_globals(_NUMPY_TYPES):
        state: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return state


def as_sdk(state: dict[str, Any], *, seed: int) -> dict[str, Any]:
    """The old trainer's checkpoint in the SDK's format (agents/checkpointformat.py), for
    agents/zoo.py: its loader's position from `seed`, `model` and `optimizer` tracked."""
    name, keys, position, has_gauss, cached = state["rng"]["numpy"]
    return {
        "format": FORMAT,
        "version": 1,
        "step": int(state["iteration"]),
        "epoch": int(state["epoch"]),
        "loaders": [Position(int(state["epoch"]), int(state["cursor"]), seed).to_state()],
        "tracked": {"model": state["model"], "optimizer": state["optimiser"]},
        "rng": {
            "torch": state["rng"]["torch"],
            "python": state["rng"]["python"],
            "numpy": [name, np.asarray(keys).tolist(), position, has_gauss, cached],
        },
    }


def audit_lines(text: str, order: EpochOrder, rank: int, batch_size: int, world: int) -> str:
    """Rank `rank`'s `epoch index` lines as the SDK's audit writes them: with the offset of
    the global batch each sample was in (the old trainer split global batches of
    `batch_size` among `world` ranks as the SDK's loader does)."""
    offsets: dict[int, Iterator[int]] = {}
    lines = []
    for line in text.splitlines():
        epoch, index = (int(field) for field in line.split())
        if epoch not in offsets:
            offsets[epoch] = _offsets(replace(order, epoch=epoch), rank, batch_size, world)
        lines.append(f"{epoch} {index} {next(offsets[epoch])}\n")
    return "".join(lines)


def _offsets(order: EpochOrder, rank: int, batch_size: int, world: int) -> Iterator[int]:
    """For each sample rank `rank` trains in the epoch, in order, its global batch's offset."""
    offset = 0
    for batch in order.global_batches(batch_size, world):
        share = (rank + 1) * len(batch) // world - rank * len(batch) // world
        yield from [offset] * share
        offset += len(batch)
