"""What an SDK checkpoint holds (`FORMAT`, version 1): the job's step and epoch, each
loader's position, the tracked objects' states, the random number generators' states, and
which script (and which arguments, as a digest) wrote it. agents/checkpoints.py writes and
reads the files; agents/resume.py chooses which one a run goes on from; agents/legacy.py
turns the old built-in trainer's into this format.
"""

import hashlib
import json
import os
import random
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents import checkpoints
from agents.loader import Position

FORMAT = "stoker-sdk-checkpoint"


def sdk_state(
    *,
    step: int,
    epoch: int,
    positions: Sequence[Position],
    tracked: Mapping[str, Any],
    reports: int,
    steps_cursor: int,
    final: bool,
) -> dict[str, Any]:
    """A checkpoint's content: the job's position, its tracked objects (a state_dict where
    they have one, else the value), the RNG states, and which run wrote it."""
    return {
        "format": FORMAT,
        "version": 1,
        "step": step,
        "epoch": epoch,
        "loaders": [position.to_state() for position in positions],
        "tracked": {
            name: value.state_dict() if hasattr(value, "state_dict") else value
            for name, value in tracked.items()
        },
        "rng": rng_state(),
        "reports": reports,  # a script with no loader: its series goes on
        "steps_cursor": steps_cursor,  # `job.steps`: where its pass is
        # Which run wrote it (not its arguments, which may hold a secret): another
        # script's is not resumed, and a resume says when the arguments differ.
        "script": script(),
        "args": args_digest(),
        "final": final,  # the end of `job.epochs`: a new run starts afresh
    }


def rng_state() -> dict[str, Any]:
    numpy_state = np.random.get_state()
    assert isinstance(numpy_state, tuple)  # the legacy form: (name, keys, pos, gauss, cached)
    name, keys, position, has_gauss, cached = numpy_state
    return {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [name, keys.tolist(), position, has_gauss, cached],
    }


def set_rng(state: Mapping[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    name, keys, position, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), position, has_gauss, cached))


def script() -> str:
    """The script this process runs, by its full path ("" when none: `python -c`)."""
    return os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""


def args_digest() -> str:
    """A digest of this run's arguments: told apart, never kept."""
    return hashlib.sha256(json.dumps(sys.argv[1:]).encode()).hexdigest()[:16]


def read(path: Path) -> dict[str, Any]:
    """A checkpoint of the SDK's, or ValueError naming the file."""
    state = checkpoints.read(path)
    _check_format(state, path)
    return state


def _check_format(state: Mapping[str, Any], path: Path | None) -> None:
    if state.get("format") != FORMAT:
        raise ValueError(f"{path}: not a stoker SDK checkpoint (format {state.get('format')!r})")
