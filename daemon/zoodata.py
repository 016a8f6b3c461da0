"""A zoo job's dataset, checked when it is submitted (the built-in trainer reads it), and
the size of the images the trainer feeds its model, which the job's FLOPs depend on."""

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


IMAGENET_SIZE = 224  # what the zoo's FLOPs are counted at when nothing else is known


def zoo_image_size(configured: int | None, dataset: str | Path | None) -> int:
    """The side of the images a zoo job's model sees: `training.image_size` when set, as
    the trainer crops to it, else the dataset's own size (its index), as the trainer then
    uses; 224 when neither is known (a dataset gone since the submission)."""
    if configured:
        return configured
    if dataset is None:
        return IMAGENET_SIZE
    try:
        return int(json.loads((Path(dataset) / "index.json").read_text())["size"])
    except (OSError, ValueError, KeyError, TypeError):
        return IMAGENET_SIZE
