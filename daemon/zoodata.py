"""A zoo job's dataset, checked when it is submitted (the built-in trainer reads it)."""

import json
from pathlib import Path

from daemon.items import SubmitError


def check_dataset(dataset: Path, batch_size: int) -> None:
    """A zoo job's dataset exists and holds at least one global batch (the trainer would
    otherwise train on fewer samples per step than asked, without a word)."""
    try:
        images = int(json.loads((dataset / "index.json").read_text())["images"])
    except (OSError, ValueError, KeyError, TypeError):
        raise SubmitError(
            "dataset", f"{dataset} holds no dataset; make one with `stoker dataset make`"
        ) from None
    if batch_size > images:
        raise SubmitError(
            "batch_size",
            f"{batch_size} is more than the {images} images of {dataset}; use at most "
            f"{images}, or make a larger dataset (`stoker dataset make --images N`)",
        )
